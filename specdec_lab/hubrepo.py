"""What the lab's Hub serves for a repo: the emulated model's files at its one revision, or a
real model's (`specdec_lab.realmodel`: the x86-cpu host's SmolLM2 and its head), read from
disk.

The small files are the engine emulator's (`specdec_lab.emulator.hf.repo_files`: ``config.json``
describing the catalog model, the tokenizer, ...), stored in git on the Hub: their ETag is the
git blob id. The weights are one LFS file, ``model-00001-of-00001.safetensors``, of the real
weights' size times the lab's scale (1e-3: 16 MB for an 8B model), its bytes a deterministic
stream (SHAKE-256 per 64 KiB block, so any range is cheap to serve) whose sha256 is its LFS oid
and ETag, as the Hub has them (the tree API's ``lfs.oid``; huggingface_hub names the blob by it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from specdec_lab.emulator.hf import repo_files, revision_of
from specdec_lab.emulator.profiles import model_spec
from specdec_lab.realmodel import LocalFile, local_files

__all__ = ["BLOCK", "GATED_PREFIXES", "WEIGHTS", "HubRepo", "RepoFile", "hub_repo", "is_gated"]

# Gated on the Hub (the Llama licence): what roles/common.py's GATED_PREFIXES names too.
GATED_PREFIXES = ("meta-llama/", "nvidia/Llama-")
WEIGHTS = "model-00001-of-00001.safetensors"
BLOCK = 65536
LFS_OVER = 10 * 1024 * 1024
MIN_WEIGHTS = 4096


def is_gated(repo: str) -> bool:
    return repo.startswith(GATED_PREFIXES)


def git_blob_id(data: bytes) -> str:
    """git's object id of a blob: sha1 of ``blob <size>\\0`` + the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _block(seed: bytes, i: int) -> bytes:
    return hashlib.shake_256(seed + i.to_bytes(8, "big")).digest(BLOCK)


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    oid: str  # git blob id (of the LFS pointer, for an LFS file)
    data: bytes | None = None  # a small file's bytes; None: LFS, generated from the seed
    sha256: str | None = None  # LFS oid
    seed: bytes = b""
    pointer_size: int = 0
    source: str = ""  # an LFS file with real bytes: read from this path (`specdec_lab.realmodel`)

    @property
    def lfs(self) -> bool:
        return self.data is None

    @property
    def etag(self) -> str:
        return self.sha256 if self.sha256 else self.oid

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``start`` .. ``end`` (exclusive; default: to the end), in pieces."""
        end = self.size if end is None else min(end, self.size)
        if self.data is not None:
            yield self.data[start:end]
            return
        if self.source:
            yield from _file_chunks(self.source, start, end)
            return
        pos = start
        while pos < end:
            i, off = divmod(pos, BLOCK)
            piece = _block(self.seed, i)[off:min(BLOCK, off + end - pos)]
            yield piece
            pos += len(piece)

    def tree_entry(self) -> dict[str, object]:
        entry: dict[str, object] = {"type": "file", "oid": self.oid, "size": self.size,
                                    "path": self.path}
        if self.sha256 is not None:
            entry["lfs"] = {"oid": self.sha256, "size": self.size,
                            "pointerSize": self.pointer_size}
        return entry


def _file_chunks(path: str, start: int, end: int) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            piece = fh.read(min(BLOCK, left))
            if not piece:
                return
            left -= len(piece)
            yield piece


def _pointer(sha: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n".encode()


def _lfs_file(repo: str, revision: str, path: str, size: int) -> RepoFile:
    seed = hashlib.sha256(f"specdec-lab-hub:{repo}@{revision}/{path}:{size}".encode()).digest()
    f = RepoFile(path, size, "", seed=seed)
    digest = hashlib.sha256()
    for chunk in f.chunks():
        digest.update(chunk)
    sha = digest.hexdigest()
    pointer = _pointer(sha, size)
    return RepoFile(path, size, git_blob_id(pointer), sha256=sha, seed=seed,
                    pointer_size=len(pointer))


def _real_repo(repo: str, files: tuple[LocalFile, ...]) -> HubRepo:
    """A repo of real files (a built folder): small ones in git, the rest LFS (the Hub's rule:
    a file over 10 MB must be LFS), its revision a hash of every file's sha256."""
    rev = hashlib.sha1("".join(f"{f.path}\0{f.sha256}\n" for f in files).encode()).hexdigest()
    out = []
    for f in files:
        if f.size <= LFS_OVER:
            data = f.source.read_bytes()
            out.append(RepoFile(f.path, len(data), git_blob_id(data), data=data))
        else:
            pointer = _pointer(f.sha256, f.size)
            out.append(RepoFile(f.path, f.size, git_blob_id(pointer), sha256=f.sha256,
                                pointer_size=len(pointer), source=str(f.source)))
    return HubRepo(repo, rev, is_gated(repo), tuple(out))


@dataclass(frozen=True)
class HubRepo:
    id: str
    revision: str  # the commit every ref points at
    gated: bool
    files: tuple[RepoFile, ...]

    def file(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def size(self) -> int:
        """Bytes of one copy of the revision (every file)."""
        return sum(f.size for f in self.files)

    def info(self) -> dict[str, object]:
        """``GET /api/models/{repo}/revision/{rev}`` (siblings: read by huggingface_hub <1.22)."""
        return {"_id": self.revision[:24], "id": self.id, "modelId": self.id,
                "sha": self.revision, "private": False,
                "gated": "manual" if self.gated else False, "disabled": False,
                "lastModified": "2026-01-01T00:00:00.000Z", "tags": [], "downloads": 0,
                "likes": 0, "library_name": "transformers",
                "siblings": [{"rfilename": f.path} for f in self.files]}


@lru_cache(maxsize=64)
def hub_repo(repo: str, scale: float) -> HubRepo | None:
    """The repo as the lab's Hub has it (None: not a catalog model or head): real weights
    where the lab built them (`specdec_lab.realmodel`), else the emulated ones."""
    real = local_files(repo)
    if real is not None:
        return _real_repo(repo, real)
    spec = model_spec(repo)
    if spec is None:
        return None
    rev = revision_of(repo)
    files = [RepoFile(p, len(d), git_blob_id(d), data=d)
             for p, d in sorted((p, t.encode()) for p, t in repo_files(spec).items())]
    weights = max(MIN_WEIGHTS, int(spec.weight_bytes * scale))
    files.append(_lfs_file(repo, rev, WEIGHTS, weights))
    return HubRepo(repo, rev, is_gated(repo), tuple(sorted(files, key=lambda f: f.path)))
