"""Engine emulator images, built without Docker: an OCI image layout written by hand.

Layer 1 is the `IMAGE_RECIPE` rootfs (python3 + PyYAML), layer 2 the emulator's part of the
specdec package in /opt/specdec plus ``vllm``, ``trtllm-serve`` and ``hf`` on PATH. Both images
(``specdec/vllm-emu``, ``specdec/trtllm-emu``) share the layers; only the default command
differs. Layers are deterministic tars (sorted, fixed mtimes and owners), so the tag
(`emulator_version`, a hash of the emulator sources) and the layer digests only change when
the sources do. The layout is pushed with skopeo to the lab registry (`push`).
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

from specdec.errors import LabError
from specdec.lab.paths import CACHE_DIR, REGISTRY_DIR, STATE_FILE

__all__ = [
    "IMAGE_NAMES",
    "REGISTRY",
    "BuiltImages",
    "build_images",
    "digests_file",
    "emulator_files",
    "emulator_version",
    "image_ref",
    "pinned_ref",
    "push",
    "wrapper_scripts",
]

REGISTRY = "localhost:5000"
IMAGE_NAMES = {"vllm": "specdec/vllm-emu", "trtllm": "specdec/trtllm-emu"}
_CMD = {"vllm": ["vllm", "serve"], "trtllm": ["trtllm-serve"]}
_PKG = Path(__file__).resolve().parent.parent  # the specdec package
# The engine emulator's closure inside the specdec package (pure Python + PyYAML).
_EMU_PARTS = ("__init__.py", "errors.py", "power.py", "catalog", "emulator")
_EPOCH = 1735689600  # 2025-01-01: fixed mtime of every layer entry
_CREATED = "2025-01-01T00:00:00Z"
INSTALL_DIR = "opt/specdec"


def wrapper_scripts(python_path: str = "/" + INSTALL_DIR) -> dict[str, str]:
    """The commands the engines' users type, as thin wrappers around the emulator."""
    env = f'PYTHONPATH={python_path}${{PYTHONPATH:+:$PYTHONPATH}}'
    head = "#!/bin/sh\n# specdec lab: engine emulator (see specdec/emulator)\n"
    return {
        "vllm": f'{head}{env} exec python3 -m specdec.emulator vllm "$@"\n',
        "trtllm-serve": f'{head}{env} exec python3 -m specdec.emulator trtllm-serve "$@"\n',
        "hf": f'{head}{env} exec python3 -m specdec.emulator.hf "$@"\n',
    }


def emulator_files(parts: Iterable[str] = _EMU_PARTS) -> dict[str, bytes]:
    """``specdec/...`` relative path -> content for the given parts of the package."""
    out: dict[str, bytes] = {}
    for part in parts:
        base = _PKG / part
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for p in paths:
            if not p.is_file() or "__pycache__" in p.parts or p.suffix not in (".py", ".yaml"):
                continue
            out["specdec/" + p.relative_to(_PKG).as_posix()] = p.read_bytes()
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


def image_ref(engine: str) -> str:
    """``localhost:5000/specdec/<engine>-emu:<version>`` (tag-pinned)."""
    return f"{REGISTRY}/{IMAGE_NAMES[engine]}:{emulator_version()}"


def digests_file() -> Path:
    return CACHE_DIR / "images.json"


def pinned_ref(engine: str) -> str:
    """The image a lab host should run: while the lab is up, the one it pushed (the emulator
    sources may have changed since); else `image_ref`, plus ``@sha256:…`` when built."""
    try:
        state = json.loads(STATE_FILE.read_text())
        served = state.get("images", {}).get(engine) if isinstance(state, dict) else None
        if isinstance(served, str) and served:
            return served
    except (OSError, ValueError, AttributeError):
        pass
    ref = image_ref(engine)
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
    refs: dict[str, str]  # engine -> tag reference (localhost:5000/…:<version>)
    digests: dict[str, str]  # engine -> manifest digest


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
    """Write (or reuse) the OCI layout holding both emulator images of this version."""
    version = emulator_version()
    layout = CACHE_DIR / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')

    base = _layer_cached(blobs, f"base-{base_key}",
                         lambda fh: _rootfs_tar(base_rootfs, fh))
    app_files = {f"{INSTALL_DIR}/{p}": (d, 0o644) for p, d in emulator_files().items()}
    for name, text in wrapper_scripts().items():
        app_files[f"usr/local/bin/{name}"] = (text.encode(), 0o755)
    app = _layer_cached(blobs, f"app-{version}", lambda fh: _files_tar(app_files, fh))

    manifests = []
    refs: dict[str, str] = {}
    digests: dict[str, str] = {}
    for engine, repo in IMAGE_NAMES.items():
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": _CREATED,
            "config": {
                "Env": [
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1",
                    "PYTHONUNBUFFERED=1",
                ],
                "Cmd": _CMD[engine],
                "WorkingDir": "/",
                "Labels": {
                    "org.opencontainers.image.title": f"{repo} (specdec lab engine emulator)",
                    "org.opencontainers.image.version": version,
                },
            },
            "rootfs": {"type": "layers", "diff_ids": [base.diff_id, app.diff_id]},
            "history": [
                {"created": _CREATED, "created_by": "specdec lab: debootstrap python3 rootfs"},
                {"created": _CREATED, "created_by": "specdec lab: engine emulator " + version},
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
                 "digest": b.digest, "size": b.size} for b in (base, app)
            ],
        }
        m_digest, m_size = _put_json(blobs, manifest)
        tag = f"{engine}-{version}"
        manifests.append({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": m_digest, "size": m_size,
            "annotations": {"org.opencontainers.image.ref.name": tag},
        })
        refs[engine] = f"{REGISTRY}/{repo}:{version}"
        digests[engine] = m_digest
    (layout / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "manifests": manifests}, sort_keys=True))
    return BuiltImages(layout, refs, digests)


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
    version = emulator_version()
    for engine, repo in IMAGE_NAMES.items():
        if _registry_has(repo, version, built.digests[engine]):
            continue
        proc = subprocess.run(
            ["ip", "netns", "exec", netns, "skopeo", "copy", "--quiet",
             "--dest-tls-verify=false", "--preserve-digests",
             f"oci:{built.layout}:{engine}-{version}",
             f"docker://127.0.0.1:5000/{repo}:{version}"],
            capture_output=True, text=True, check=False, timeout=600,
        )
        if proc.returncode != 0:
            err = " ".join(proc.stderr.split())[-300:]
            raise LabError(f"pushing {repo}:{version} to the lab registry failed: {err}")
        if not _registry_has(repo, version, built.digests[engine]):
            raise LabError(f"pushed {repo}:{version} but the registry does not hold "
                           f"{built.digests[engine]}")
    try:
        known = json.loads(digests_file().read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    for engine in IMAGE_NAMES:
        known[built.refs[engine]] = built.digests[engine]
    digests_file().write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
