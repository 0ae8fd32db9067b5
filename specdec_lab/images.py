"""Engine emulator images, built without Docker: an OCI image layout written by hand.

One lab image per catalog image (`specdec/catalog/images.yaml`), pushed to the lab registry
under the real repository path and tag (``localhost:5000/dustynv/vllm:0.9.2-r36.4-cu128-24.04``:
a mirror, which the planner recognises as that catalog image). Each carries what the real image
carries that the deploy depends on: its engine release (``SPECDEC_EMU_ENGINE_VERSION``, so the
emulator refuses what that release refuses), its Hub cache variables (``HF_HOME``,
``HUGGINGFACE_HUB_CACHE``, ``TRANSFORMERS_CACHE`` on jetson-containers images) and the real
``huggingface_hub`` release it has, with only the CLI that release ships (``hf`` or
``huggingface-cli``: `specdec_lab.hubclient`). Layers: the `IMAGE_RECIPE` rootfs (python3 +
PyYAML), the emulator's part of the specdec package in /opt/specdec with ``vllm`` and
``trtllm-serve`` on PATH, and one layer per huggingface_hub release. Layers are deterministic
tars (sorted,
fixed mtimes and owners), so digests only change when the sources do; the layout is pushed with
skopeo (`push`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specdec.catalog import load_catalog
from specdec.catalog.images import parse_image_ref
from specdec_lab.errors import LabError
from specdec_lab.hubclient import ensure_client, layer_files
from specdec_lab.instance import Instance
from specdec_lab.paths import CACHE_DIR, REGISTRY_DIR
from specdec_lab.state import shared_lock

__all__ = [
    "REGISTRY",
    "LabImage",
    "BuiltImages",
    "build_images",
    "digests_file",
    "emulator_files",
    "emulator_version",
    "image_ref",
    "lab_images",
    "pinned_ref",
    "push",
    "wrapper_scripts",
]

REGISTRY = "localhost:5000"
_CMD = {"vllm": ["vllm", "serve"], "trtllm": ["trtllm-serve"]}
_ROOT = Path(__file__).resolve().parent.parent  # the directory holding specdec and specdec_lab
# The engine emulator's import closure (pure Python + PyYAML): tests/unit/test_layers.py checks it.
EMU_PARTS = ("specdec/__init__.py", "specdec/errors.py", "specdec/config/__init__.py",
             "specdec/config/hygiene.py", "specdec/host/__init__.py", "specdec/host/power.py",
             "specdec/host/identify.py", "specdec/catalog", "specdec/engines",
             "specdec_lab/__init__.py", "specdec_lab/emulator",
             "specdec_lab/contract/parsers")  # the emulated vLLM's parser data (vllm_release)
_EPOCH = 1735689600  # 2025-01-01: fixed mtime of every layer entry
_CREATED = "2025-01-01T00:00:00Z"
INSTALL_DIR = "opt/specdec"


def wrapper_scripts(python_path: str = "/" + INSTALL_DIR,
                    versions: dict[str, str] | None = None) -> dict[str, str]:
    """The commands the engines' users type, as thin wrappers around the emulator.
    ``versions`` (engine -> release) bakes the release into a native install's wrappers; an
    image carries it in its environment instead."""
    env = f'PYTHONPATH={python_path}${{PYTHONPATH:+:$PYTHONPATH}}'
    head = "#!/bin/sh\n# specdec lab: engine emulator (see specdec/emulator)\n"

    def pin(engine: str) -> str:
        v = (versions or {}).get(engine)
        return f"SPECDEC_EMU_ENGINE_VERSION={v} " if v else ""

    return {
        "vllm": f'{head}{env} {pin("vllm")}exec python3 -m specdec_lab.emulator vllm "$@"\n',
        "trtllm-serve": f'{head}{env} {pin("trtllm")}exec python3 -m specdec_lab.emulator '
                        'trtllm-serve "$@"\n',
    }


@dataclass(frozen=True)
class LabImage:
    """The lab's stand-in for one catalog image."""

    catalog_ref: str
    repo: str  # repository path in the lab registry (the real one, registry host dropped)
    tag: str
    engine: str
    version: str
    hub_cli: str
    env: tuple[tuple[str, str], ...]
    hub_version: str = ""  # huggingface_hub in the image (the catalog's hub_version)
    entrypoint: tuple[str, ...] = ()  # the catalog's ENTRYPOINT of the real image

    @property
    def ref(self) -> str:
        return f"{REGISTRY}/{self.repo}:{self.tag}"


def lab_images() -> list[LabImage]:
    """One lab image per catalog image, except Dynamo's: the lab runs Dynamo natively (its
    venv, bound into the hosts, would otherwise be copied into every host's Docker storage)."""
    out = []
    for img in load_catalog().images.values():
        if img.engine not in _CMD:
            continue
        parsed = parse_image_ref(img.ref)
        assert parsed is not None and parsed.tag  # the catalog checks this on load
        out.append(LabImage(img.ref, parsed.path, parsed.tag, img.engine,
                            str(img.engine_version), img.hub_cli, tuple(sorted(img.env.items())),
                            str(img.hub_version or ""), img.entrypoint))
    return sorted(out, key=lambda i: i.catalog_ref)


def emulator_files(parts: Iterable[str] = EMU_PARTS) -> dict[str, bytes]:
    """``specdec/...`` / ``specdec_lab/...`` relative path -> content for the given parts."""
    out: dict[str, bytes] = {}
    for part in parts:
        base = _ROOT / part
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for p in paths:
            if (not p.is_file() or "__pycache__" in p.parts
                    or p.suffix not in (".py", ".yaml", ".json")):
                continue
            out[p.relative_to(_ROOT).as_posix()] = p.read_bytes()
    return out


@cache
def emulator_version() -> str:
    """Tag of the emulator images: a hash of the emulator sources and the wrappers."""
    h = hashlib.sha256()
    for path, data in sorted(emulator_files().items()):
        h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    for name, text in sorted(wrapper_scripts().items()):
        h.update(name.encode() + b"\0" + text.encode())
    return "emu-" + h.hexdigest()[:12]


def image_ref(catalog_ref: str) -> str:
    """The lab's mirror of a catalog image: ``localhost:5000/<path>:<tag>``."""
    for img in lab_images():
        if img.catalog_ref == catalog_ref:
            return img.ref
    raise LabError(f"{catalog_ref}: not a catalog image (see specdec/catalog/images.yaml)")


DIGESTS_ENV = "SPECDEC_LAB_IMAGE_DIGESTS"  # another digests file (tests: as if built)


def digests_file() -> Path:
    """The digests of the images pushed so far (``$SPECDEC_LAB_IMAGE_DIGESTS`` moves it)."""
    return Path(os.environ.get(DIGESTS_ENV) or CACHE_DIR / "images.json")


IMAGES_LOCK = CACHE_DIR / ".images.lock"  # the OCI layout, the registry storage, images.json


def pinned_ref(catalog_ref: str, instance: Instance | None = None) -> str:
    """The mirror of ``catalog_ref`` a host of lab ``instance`` should run, digest-pinned: while
    the lab is up, the one it pushed (the emulator sources may have changed since); else
    `image_ref`, plus ``@sha256:…`` when built."""
    inst = instance or Instance.from_env()
    ref = image_ref(catalog_ref)
    try:
        state = json.loads(inst.state_file.read_text())
        served = state.get("images", {}).get(catalog_ref) if isinstance(state, dict) else None
        if isinstance(served, str) and served.startswith(ref + "@sha256:"):
            return served
    except (OSError, ValueError, AttributeError):
        pass
    try:
        known = json.loads(digests_file().read_text())
    except (OSError, ValueError):
        return ref
    digest = known.get(ref) if isinstance(known, dict) else None
    return f"{ref}@{digest}" if isinstance(digest, str) and digest.startswith("sha256:") else ref


# -- building -----------------------------------------------------------------------------


def _tarinfo(name: str, st: os.stat_result | None, kind: bytes, size: int = 0,
             mode: int = 0o644) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.size = size
    ti.mode = stat.S_IMODE(st.st_mode) if st is not None else mode
    ti.uid = st.st_uid if st is not None else 0
    ti.gid = st.st_gid if st is not None else 0
    ti.uname = ti.gname = ""
    ti.mtime = _EPOCH
    return ti


def _rootfs_tar(root: Path, out: io.BufferedIOBase) -> None:
    """A deterministic tar of ``root`` (devices, sockets, /dev, /proc, /sys contents skipped)."""
    skip = {"dev", "proc", "sys", "run", "tmp"}
    seen: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root)
            dirnames.sort()
            if rel_dir == Path("."):
                for d in list(dirnames):
                    if d in skip:
                        tar.addfile(_tarinfo(d, os.lstat(Path(dirpath) / d), tarfile.DIRTYPE))
                        dirnames.remove(d)
                if ".specdec-recipe.json" in filenames:
                    filenames.remove(".specdec-recipe.json")
            entries = sorted(dirnames + filenames)
            for entry in entries:
                full = Path(dirpath) / entry
                rel = (rel_dir / entry).as_posix()
                st = os.lstat(full)
                if stat.S_ISDIR(st.st_mode):
                    tar.addfile(_tarinfo(rel, st, tarfile.DIRTYPE))
                elif stat.S_ISLNK(st.st_mode):
                    ti = _tarinfo(rel, st, tarfile.SYMTYPE)
                    ti.linkname = os.readlink(full)
                    tar.addfile(ti)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in seen:
                        ti = _tarinfo(rel, st, tarfile.LNKTYPE)
                        ti.linkname = seen[key]
                        tar.addfile(ti)
                        continue
                    seen[key] = rel
                    with open(full, "rb") as fh:
                        tar.addfile(_tarinfo(rel, st, tarfile.REGTYPE, st.st_size), fh)


def _files_tar(files: dict[str, tuple[bytes, int]], out: io.BufferedIOBase) -> None:
    dirs: set[str] = set()
    for path in files:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            tar.addfile(_tarinfo(d, None, tarfile.DIRTYPE, mode=0o755))
        for path in sorted(files):
            data, mode = files[path]
            tar.addfile(_tarinfo(path, None, tarfile.REGTYPE, len(data), mode), io.BytesIO(data))


@dataclass(frozen=True)
class _Blob:
    digest: str  # sha256:… of the stored (compressed) bytes
    size: int
    diff_id: str  # sha256:… of the uncompressed tar


def _write_layer(blobs: Path, write: object) -> _Blob:
    """Run ``write(fileobj)`` to produce a tar; store it gzipped as a blob."""
    tmp_tar = blobs / ".layer.tar"
    with open(tmp_tar, "wb") as fh:
        write(fh)  # type: ignore[operator]
    diff = hashlib.sha256()
    tmp_gz = blobs / ".layer.tar.gz"
    with (open(tmp_tar, "rb") as src, open(tmp_gz, "wb") as raw,
          gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz):
        while chunk := src.read(1 << 20):
            diff.update(chunk)
            gz.write(chunk)
    tmp_tar.unlink()
    digest = hashlib.sha256(tmp_gz.read_bytes()).hexdigest()
    size = tmp_gz.stat().st_size
    tmp_gz.rename(blobs / digest)
    return _Blob(f"sha256:{digest}", size, f"sha256:{diff.hexdigest()}")


def _put_json(blobs: Path, doc: object) -> tuple[str, int]:
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


@dataclass(frozen=True)
class BuiltImages:
    layout: Path  # OCI image layout directory
    images: tuple[LabImage, ...]
    digests: dict[str, str]  # catalog ref -> manifest digest

    @property
    def refs(self) -> dict[str, str]:
        """catalog ref -> lab ref (tag)."""
        return {i.catalog_ref: i.ref for i in self.images}

    def pinned(self) -> dict[str, str]:
        """catalog ref -> lab ref@digest (what the inventory pins while the lab is up)."""
        return {i.catalog_ref: f"{i.ref}@{self.digests[i.catalog_ref]}" for i in self.images}


def _layer_cached(blobs: Path, key: str, write: object) -> _Blob:
    index = blobs.parent / f"layer-{key}.json"
    try:
        meta = json.loads(index.read_text())
        if (blobs / meta["digest"].split(":")[1]).is_file():
            return _Blob(meta["digest"], meta["size"], meta["diff_id"])
    except (OSError, ValueError, KeyError):
        pass
    blob = _write_layer(blobs, write)
    index.write_text(json.dumps(blob.__dict__))
    return blob


def build_images(base_rootfs: Path, base_key: str) -> BuiltImages:
    """Write (or reuse) the OCI layout holding both emulator images of this version (one
    writer at a time: lab instances share the cache)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with shared_lock(IMAGES_LOCK):
        return _build_images(base_rootfs, base_key)


def _build_images(base_rootfs: Path, base_key: str) -> BuiltImages:
    version = emulator_version()
    layout = CACHE_DIR / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')

    base = _layer_cached(blobs, f"base-{base_key}",
                         lambda fh: _rootfs_tar(base_rootfs, fh))
    app_files = {f"{INSTALL_DIR}/{p}": (d, 0o644) for p, d in emulator_files().items()}
    wrappers = wrapper_scripts()
    for name in ("vllm", "trtllm-serve"):
        app_files[f"usr/local/bin/{name}"] = (wrappers[name].encode(), 0o755)
    app = _layer_cached(blobs, f"app-{version}", lambda fh: _files_tar(app_files, fh))
    images = tuple(lab_images())
    hubs = {}
    for v in sorted({i.hub_version for i in images}):
        if not v:
            raise LabError("the catalog names no hub_version for a lab image "
                           "(specdec/catalog/images.yaml)")
        ensure_client(v)
        hubs[v] = _layer_cached(blobs, f"hub-{v}", lambda fh, v=v: _files_tar(
            layer_files(v), fh))
    manifests = []
    digests: dict[str, str] = {}
    for n, img in enumerate(images):
        layers = (base, app, hubs[img.hub_version])
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": _CREATED,
            "config": {
                "Env": [
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1",
                    "PYTHONUNBUFFERED=1",
                    *(f"{k}={v}" for k, v in img.env),
                    f"SPECDEC_EMU_ENGINE_VERSION={img.version}",
                ],
                # as the real image: an engine command as ENTRYPOINT takes every argument
                **({"Entrypoint": list(img.entrypoint)} if img.entrypoint
                   else {"Cmd": _CMD[img.engine]}),
                "WorkingDir": "/",
                "Labels": {
                    "org.opencontainers.image.title": f"{img.catalog_ref} (specdec lab engine "
                                                      "emulator)",
                    "org.opencontainers.image.version": version,
                },
            },
            "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in layers]},
            "history": [
                {"created": _CREATED, "created_by": "specdec lab: debootstrap python3 rootfs"},
                {"created": _CREATED, "created_by": "specdec lab: engine emulator " + version},
                {"created": _CREATED,
                 "created_by": f"pip install huggingface_hub=={img.hub_version}"},
            ],
        }
        cfg_digest, cfg_size = _put_json(blobs, config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": cfg_digest, "size": cfg_size},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                 "digest": b.digest, "size": b.size} for b in layers
            ],
        }
        m_digest, m_size = _put_json(blobs, manifest)
        manifests.append({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": m_digest, "size": m_size,
            "annotations": {"org.opencontainers.image.ref.name": f"image-{n}"},
        })
        digests[img.catalog_ref] = m_digest
    (layout / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "manifests": manifests}, sort_keys=True))
    return BuiltImages(layout, images, digests)


def _registry_has(repo: str, tag: str, digest: str) -> bool:
    link = (REGISTRY_DIR / "docker/registry/v2/repositories" / repo / "_manifests/tags" / tag
            / "current/link")
    try:
        return link.read_text().strip() == digest
    except OSError:
        return False


def push(built: BuiltImages, netns: str) -> None:
    """Push both images to the registry listening on 127.0.0.1:5000 in ``netns`` (skipped when
    the shared registry storage already has them), then record their digests."""
    if shutil.which("skopeo") is None:
        raise LabError("skopeo is not installed (apt-get install skopeo)")
    with shared_lock(IMAGES_LOCK):
        _push(built, netns)


def _push(built: BuiltImages, netns: str) -> None:
    for n, img in enumerate(built.images):
        digest = built.digests[img.catalog_ref]
        if _registry_has(img.repo, img.tag, digest):
            continue
        proc = subprocess.run(
            ["ip", "netns", "exec", netns, "skopeo", "copy", "--quiet",
             "--dest-tls-verify=false", "--preserve-digests",
             f"oci:{built.layout}:image-{n}", f"docker://127.0.0.1:5000/{img.repo}:{img.tag}"],
            capture_output=True, text=True, check=False, timeout=600,
        )
        if proc.returncode != 0:
            err = " ".join(proc.stderr.split())[-300:]
            raise LabError(f"pushing {img.repo}:{img.tag} to the lab registry failed: {err}")
        if not _registry_has(img.repo, img.tag, digest):
            raise LabError(f"pushed {img.repo}:{img.tag} but the registry does not hold "
                           f"{digest}")
    try:
        known = json.loads(digests_file().read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    for img in built.images:
        known[img.ref] = built.digests[img.catalog_ref]
    digests_file().write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
