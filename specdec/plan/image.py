"""Which image and engine release a host runs, and what that release can run (part of the plan).

The image is the catalog's default for the device and engine, or the pinned ``specdec_image``;
the release comes from the catalog image (or the mirror of one), the image's tag, or
``specdec_engine_version``; natively, from what the host has installed. `runnable` keeps the
candidate methods the release can run (`specdec.engines.support`), and refuses a pinned one it
cannot, naming the first release that can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from specdec.catalog import Catalog, Device, Image, Model
from specdec.config.hygiene import check_image
from specdec.config.settings import HostSettings
from specdec.engines.base import Engine
from specdec.engines.support import Support, Target
from specdec.engines.version import Version, version_in_tag
from specdec.errors import ConfigError, PlanError
from specdec.host.identify import Identity

__all__ = ["Candidate", "engine_details", "engine_version", "image_for_host", "runnable"]


class Candidate(Protocol):
    """A speculative configuration the planner considers (what `runnable` reads of it)."""

    @property
    def method(self) -> str: ...

    @property
    def draft(self) -> str | None: ...

    @property
    def head_format(self) -> str | None: ...


C = TypeVar("C", bound=Candidate)


def image_for_host(s: HostSettings, cat: Catalog, device: Device, engine: str,
           identity: Identity | None) -> tuple[str, Image | None]:
    """The image reference to run and the catalog image it is (or mirrors), if any."""
    if s.image is not None:
        ref = check_image(s.host, "specdec_image", s.image)
        return ref, cat.image_for(ref)
    l4t = identity.l4t if identity and identity.l4t else None
    if device.platform == "l4t" and l4t is None:
        l4t = "36.4"  # offline plan of a Jetson: the catalog's JetPack 6 line
    img = cat.default_image(device, engine, l4t)
    if img is None:
        where = f"L4T {l4t}" if device.platform == "l4t" else device.platform.upper()
        raise PlanError(
            f"specdec_engine={engine!r}: the catalog has no {engine} image for {device.id} on "
            f"{where}; set specdec_image (and specdec_engine_version)",
            host=s.host,
        )
    return check_image(s.host, f"catalog image for {device.id}/{engine}", img.ref), img


def engine_version(s: HostSettings, eng: Engine, runtime: str, image: str | None,
                   img: Image | None, installed: Mapping[str, str] | None,
                   assumed: Version | None = None) -> tuple[Version, str]:
    """The engine release this host runs, and where that is known from (``assumed``: the
    device's native release in the catalog, for an offline plan of a device without images); a
    release the engine's facts do not know is refused (`Engine.release_problem`), naming where
    it came from."""
    version, origin = _engine_version(s, eng, runtime, image, img, installed, assumed)
    problem = eng.release_problem(version)
    if problem is not None:
        key = {"specdec_engine_version": f"specdec_engine_version={s.engine_version!r}",
               "installed on the host": f"specdec_runtime='native' ({eng.name} {version} is "
                                        "installed on the host)"}.get(
            origin, f"specdec_image={image!r}")
        raise ConfigError(f"{key}: {problem}", host=s.host)
    return version, origin


def _engine_version(s: HostSettings, eng: Engine, runtime: str, image: str | None,
                    img: Image | None, installed: Mapping[str, str] | None,
                    assumed: Version | None = None) -> tuple[Version, str]:
    engine = eng.name
    pinned = Version.parse(s.engine_version) if s.engine_version else None
    if runtime == "docker":
        assert image is not None
        if img is not None and img.engine != engine:
            raise ConfigError(f"specdec_image={image!r}: carries {img.engine}, not {engine}",
                              host=s.host)
        tag = (image.split("@")[0].rsplit("/", 1)[-1].partition(":")[2])
        found = img.engine_version if img is not None else version_in_tag(tag)
        origin = f"image {img.ref}" if img is not None else f"image tag {tag!r}"
        if found is not None and pinned is not None and found != pinned:
            raise ConfigError(
                f"specdec_engine_version={s.engine_version!r}: the {origin} carries {engine} "
                f"{found}", host=s.host)
        if found is None and pinned is None:
            raise ConfigError(
                f"specdec_image={image!r}: the tag does not say which {engine} version it "
                "carries; set specdec_engine_version", host=s.host)
        return (found or pinned), (origin if found else "specdec_engine_version")  # type: ignore
    if installed is not None:  # the deploy looked on the host
        found = Version.parse(installed[engine]) if engine in installed else None
        if found is None and pinned is None:
            raise PlanError(f"specdec_runtime='native': {engine} is not installed on the host "
                            f"({eng.installed_hint})", host=s.host)
        if found is not None and pinned is not None and found != pinned:
            raise PlanError(
                f"specdec_engine_version={s.engine_version!r}: the host has {engine} {found} "
                "installed", host=s.host)
        version = found or pinned
        assert version is not None
        return version, ("installed on the host" if found else "specdec_engine_version")
    if pinned is not None:
        return pinned, "specdec_engine_version"
    if assumed is not None:  # no image: the release the catalog pins for the device
        return assumed, "assumed from the catalog's native release; the deploy reads the host's"
    if img is None:
        raise ConfigError(
            f"specdec_runtime='native': the {engine} version on the host is not known; set "
            "specdec_engine_version", host=s.host)
    # An offline plan: assume the release of the device's default image (the deploy checks).
    return img.engine_version, f"assumed from {img.ref}; the deploy reads the host's"



def runnable(s: HostSettings, eng: Engine, version: Version, model: Model,
             candidates: Sequence[C], notes: list[str], platform: str = "") -> list[C]:
    """The candidates this engine release can run on the device's ``platform``. A pinned method
    it cannot run is an error naming the first release that can; otherwise each skipped one is
    noted (fallback order: EAGLE-3 -> draft model -> n-gram)."""
    target = Target(model.id, model.architecture, model.model_type, platform)
    name = eng.label
    out: list[C] = []
    unloadable: dict[str, str] = {}  # method -> why its heads cannot load
    for cand in candidates:
        sup = eng.support(version, cand.method, target)
        if sup.ok and cand.head_format:
            head = eng.head_support(version, cand.head_format)
            if not head.ok:
                why = (f"{name} {version} cannot load {cand.draft} ({cand.head_format}-format "
                       f"checkpoint): {_why(head)}")
                unloadable[cand.method] = why
                notes.append(f"{cand.method} {cand.draft} skipped: {why} [{head.source}]")
                continue
        if sup.ok:
            if sup.caveat:
                notes.append(sup.caveat.strip())
            out.append(cand)
            continue
        if cand.method == "eagle3" and not model.architecture:
            out.append(cand)  # a model outside the catalog: its architecture is not known
            notes.append(f"eagle3 for {model.id}: architecture unknown, not checked against "
                         f"{name} {version}")
            continue
        why = f"{name} {version} cannot run {cand.method} for {model.id}: {_why(sup)}"
        if s.method is not None and s.method == cand.method:
            raise PlanError(f"specdec_method={cand.method!r}: {why}", host=s.host)
        notes.append(f"{cand.method}{' ' + cand.draft if cand.draft else ''} skipped: {why} "
                     f"[{sup.source}]")
    for method, why in unloadable.items():
        pinned = s.draft is not None or s.method == method
        if pinned and not any(c.method == method for c in out):
            key = f"specdec_draft={s.draft!r}" if s.draft else f"specdec_method={method!r}"
            raise PlanError(f"{key}: {why}", host=s.host)
    if not out:
        raise PlanError(f"no speculative method {name} {version} can run for {model.id}",
                        host=s.host)
    return out


def _why(sup: Support) -> str:
    reason = " ".join(sup.reason.split())
    first = (f"; first release that can: {sup.first_ok}" if sup.first_ok
             else "; no release in the capability table can")
    return f"{reason}{first}"


def engine_details(eng: Engine, version: Version, model: Model, method: str,
                   draft: str | None) -> tuple[str | None, str | None, str | None]:
    """(TensorRT-LLM decoding_type, local draft dir, TIKTOKEN_ENCODINGS_BASE) for the release."""
    decoding, draft_dir = eng.speculation_details(version, method, draft)
    return decoding, draft_dir, eng.tiktoken_dir(model)
