"""Container images as data: which engine and exact engine version each carries, its base, and
what in it the deploy depends on (Hub cache variables, which Hugging Face CLI).

Loaded from ``images.yaml``. A host's image is the catalog's default for its device and engine
(the newest GA release that runs on the host's L4T / SBSA base, else the newest release
candidate), or the ``specdec_image`` it pins: a catalog image, a mirror of one (same repository
path and tag in another registry), or any image whose tag states its engine version, or that
comes with ``specdec_engine_version``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec.config.hygiene import split_reference
from specdec.engines.version import Version, version_in_tag
from specdec.errors import ConfigError

__all__ = ["HUB_CLIS", "Image", "ImageRef", "parse_image_ref", "parse_images"]

HUB_CLIS = ("hf", "huggingface-cli")
PLATFORMS = ("l4t", "sbsa")
CHANNELS = ("ga", "rc")

@dataclass(frozen=True)
class ImageRef:
    """A parsed reference: ``[domain/]path[:tag][@sha256:…]``."""

    text: str
    domain: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def key(self) -> str:
        """Repository path and tag without the registry: how a mirror is recognised."""
        return f"{self.path}:{self.tag}" if self.tag else self.path


def parse_image_ref(text: str) -> ImageRef | None:
    """Docker's reference grammar (`specdec.config.hygiene.split_reference`); None when ``text`` is
    not a reference."""
    if not isinstance(text, str) or len(text) > 512:
        return None
    parts = split_reference(text)
    if parts is None:
        return None
    return ImageRef(text, *parts)


@dataclass(frozen=True)
class Image:
    ref: str  # repo:tag as published (catalog keys are never digests: tags are what NVIDIA lists)
    engine: str
    engine_version: Version
    platform: str  # l4t | sbsa
    l4t: Version | None  # L4T release the image is built for (Jetson), e.g. 36.4
    cuda: str
    channel: str  # ga | rc
    hub_cli: str  # the Hugging Face CLI the image carries: hf | huggingface-cli
    env: dict[str, str]  # image ENV the deploy must account for (Hub cache variables)
    source: str  # where the engine version, base and ENV come from
    hub_version: Version | None = None  # huggingface_hub in the image (None: not known)
    families: tuple[str, ...] = ()  # the device families it is a default for (empty: any)
    entrypoint: tuple[str, ...] = ()  # the image's ENTRYPOINT when it is an engine's command

    @property
    def key(self) -> str:
        parsed = parse_image_ref(self.ref)
        return parsed.key if parsed else self.ref

    def runs_on(self, platform: str, l4t: Version | None) -> bool:
        """jetson-containers' rule (jetson_containers/l4t_version.py l4t_version_compatible):
        within r36, images built for >= 36.4 need a host >= 36.4 and older ones an older host;
        otherwise the major release must match."""
        if platform != self.platform:
            return False
        if self.platform != "l4t" or self.l4t is None or l4t is None:
            return True
        if l4t.release[0] != self.l4t.release[0]:
            return False
        if self.l4t.release[0] == 36:
            newer = self.l4t >= Version.parse("36.4")
            return newer == (l4t >= Version.parse("36.4"))
        return True


def _field(where: str, d: dict[str, Any], key: str, typ: type) -> Any:
    value = d.get(key)
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        raise ConfigError(f"catalog {where}: {key}={value!r} must be a {typ.__name__}")
    return value


def _image(ref: str, d: Any, engines: tuple[str, ...]) -> Image:
    w = f"image {ref}"
    if not isinstance(d, dict):
        raise ConfigError(f"catalog {w}: expected a mapping, got {d!r}")
    parsed = parse_image_ref(ref)
    if parsed is None or parsed.digest or not parsed.tag or parsed.tag.startswith("latest"):
        raise ConfigError(f"catalog {w}: must be repo:tag with a fixed tag")
    engine = _field(w, d, "engine", str)
    if engine not in engines:
        raise ConfigError(f"catalog {w}: engine={engine!r} is not one of {', '.join(engines)}")
    try:
        version = Version.parse(str(_field(w, d, "engine_version", str)))
        l4t = Version.parse(str(d["l4t"])) if d.get("l4t") is not None else None
    except ValueError as exc:
        raise ConfigError(f"catalog {w}: {exc}") from None
    stated = version_in_tag(parsed.tag)
    if stated is not None and stated != version:
        raise ConfigError(f"catalog {w}: tag says {stated}, engine_version says {version}")
    platform = _field(w, d, "platform", str)
    channel = _field(w, d, "channel", str)
    hub_cli = _field(w, d, "hub_cli", str)
    for key, value, allowed in (("platform", platform, PLATFORMS),
                                ("channel", channel, CHANNELS), ("hub_cli", hub_cli, HUB_CLIS)):
        if value not in allowed:
            raise ConfigError(f"catalog {w}: {key}={value!r} is not one of {', '.join(allowed)}")
    if (platform == "l4t") != (l4t is not None):
        raise ConfigError(f"catalog {w}: l4t is required for, and only for, platform l4t")
    if channel == "rc" and not version.is_prerelease and engine != "vllm":
        raise ConfigError(f"catalog {w}: channel rc but {version} is a final release")
    hub_version = _hub_version(w, d.get("hub_version"), hub_cli)
    env = d.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ConfigError(f"catalog {w}: env must map names to strings")
    families = d.get("families") or []
    entrypoint = d.get("entrypoint") or []
    for key, value in (("families", families), ("entrypoint", entrypoint)):
        if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
            raise ConfigError(f"catalog {w}: {key} must be a list of strings")
    return Image(ref=ref, engine=engine, engine_version=version, platform=platform, l4t=l4t,
                 cuda=str(_field(w, d, "cuda", str)), channel=channel, hub_cli=hub_cli,
                 env=dict(env), source=_field(w, d, "source", str), hub_version=hub_version,
                 families=tuple(families), entrypoint=tuple(entrypoint))


def _hub_version(where: str, value: Any, hub_cli: str) -> Version | None:
    """huggingface_hub's release, checked against the CLI it ships: ``huggingface-cli`` only
    before 0.34.0, ``hf`` from 0.34.0 (setup.py ``entry_points``; ``huggingface-cli`` was
    removed in 1.0.0)."""
    if value is None:
        return None
    try:
        v = Version.parse(str(value))
    except ValueError as exc:
        raise ConfigError(f"catalog {where}: hub_version: {exc}") from None
    has_hf = v >= Version.parse("0.34.0")
    if (hub_cli == "hf") != has_hf:
        raise ConfigError(f"catalog {where}: hub_version {v} ships "
                          f"{'hf' if has_hf else 'only huggingface-cli'}, hub_cli says {hub_cli}")
    return v


def parse_images(data: Any, engines: tuple[str, ...]) -> dict[str, Image]:
    if not isinstance(data, dict):
        raise ConfigError("catalog images.yaml: expected a top-level 'images' mapping")
    out = {ref: _image(ref, d, engines) for ref, d in data.items()}
    keys: dict[str, str] = {}
    for ref, img in out.items():
        if img.key in keys:
            raise ConfigError(f"catalog image {ref}: same repository path and tag as "
                              f"{keys[img.key]}")
        keys[img.key] = ref
    return out
