"""An emulated Hugging Face CLI (``hf download``) and the HF cache layout the engines read.

``python3 -m specdec_lab.emulator.hf download REPO [--local-dir DIR]`` "downloads" a catalog model
or
EAGLE head: it writes small metadata files (``config.json`` describing the catalog entry,
``generation_config.json``, ``model.safetensors.index.json`` with the real total size, a
``tokenizer.json`` whose pieces are the emulator's output tokens) into the
HF cache exactly as huggingface_hub lays it out::

    $HF_HOME/hub/models--ORG--NAME/blobs/<sha256>
    $HF_HOME/hub/models--ORG--NAME/refs/main                    (the revision)
    $HF_HOME/hub/models--ORG--NAME/snapshots/<revision>/<file>  (symlinks to ../../blobs/...)

and prints the snapshot path (or the ``--local-dir``) on stdout. It is idempotent. Gated repos
(``meta-llama/*``) need a token from ``HF_TOKEN``, the file ``HF_TOKEN_PATH`` or
``$HF_HOME/token``; without one it fails like the Hub (401). Unknown repos fail with 404. The
token is never printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from specdec_lab.emulator.profiles import ModelSpec, model_spec
from specdec_lab.emulator.textgen import tokenizer_json

__all__ = [
    "GATED_ORGS",
    "cached_snapshot",
    "download",
    "hf_home",
    "hub_cache",
    "main",
    "read_token",
    "repo_files",
    "revision_of",
]

GATED_ORGS = ("meta-llama",)
_MODEL_TYPES = {"llama3": "llama", "qwen3": "qwen3", "o200k_harmony": "gpt_oss"}
_NETWORK_GBS = 1.0  # emulated download speed, scaled by SPECDEC_EMU_TIME_SCALE


class HubError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def hf_home() -> Path:
    env = os.environ.get("HF_HOME")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "huggingface" if xdg else Path.home() / ".cache" / "huggingface"


def hub_cache() -> Path:
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(env) if env else hf_home() / "hub"


def read_token() -> str | None:
    """The token the Hub client would use (never printed)."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        v = os.environ.get(var, "").strip()
        if v:
            return v
    paths = [os.environ.get("HF_TOKEN_PATH"), str(hf_home() / "token")]
    for p in paths:
        if not p:
            continue
        try:
            v = Path(p).read_text().strip()
        except OSError:
            continue
        if v:
            return v
    return None


def revision_of(repo: str) -> str:
    return hashlib.sha1(f"specdec-emulated:{repo}".encode()).hexdigest()


def _repo_dir(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


def cached_snapshot(repo: str, cache: Path | None = None) -> Path | None:
    """The snapshot directory of ``repo`` in the HF cache, if complete (refs/main + config)."""
    base = _repo_dir(cache or hub_cache(), repo)
    try:
        rev = (base / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snap = base / "snapshots" / rev
    return snap if (snap / "config.json").is_file() else None


def repo_files(spec: ModelSpec) -> dict[str, str]:
    """The small files of an emulated repo (what the engine emulator reads); the lab's Hub
    (`specdec_lab.hubrepo`) serves them, plus the weights."""
    cfg: dict[str, object] = {
        "_name_or_path": spec.id,
        "architectures": [spec.architecture],
        "model_type": _MODEL_TYPES.get(spec.tokenizer, "llama"),
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.layers,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_context,
        "torch_dtype": "bfloat16",
        "specdec_repo_id": spec.id,
        "specdec_emulated": True,
    }
    if spec.kind == "head":
        cfg["draft_vocab_size"] = 32000 if spec.tokenizer == "llama3" else spec.vocab_size
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}
    if spec.moe_experts:
        cfg["num_local_experts"] = spec.moe_experts
        cfg["num_experts_per_tok"] = spec.moe_active
    gen = {"do_sample": True, "temperature": 0.6, "top_p": 0.9}
    index = {"metadata": {"total_size": int(spec.weight_bytes)},
             "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}
    return {
        "config.json": json.dumps(cfg, indent=2) + "\n",
        "generation_config.json": json.dumps(gen, indent=2) + "\n",
        "model.safetensors.index.json": json.dumps(index, indent=2) + "\n",
        # counts the emulator's output tokens exactly (specdec.bench.tokens)
        "tokenizer.json": tokenizer_json(),
    }


def _check_access(repo: str, spec: ModelSpec | None) -> ModelSpec:
    api = f"https://huggingface.co/api/models/{repo}/revision/main"
    if spec is None:
        raise HubError(404, (
            f"Repository Not Found for url: {api}.\nPlease make sure you specified the correct "
            "`repo_id` and `repo_type`.\nIf you are trying to access a private or gated repo, "
            "make sure you are authenticated. For more details, see "
            "https://huggingface.co/docs/huggingface_hub/authentication"))
    if repo.split("/")[0] in GATED_ORGS and read_token() is None:
        raise HubError(401, (
            f"Cannot access gated repo for url {api}.\nAccess to model {repo} is restricted. You "
            "must have access to it and be authenticated to access it. Please log in."))
    return spec


def _write_cache(cache: Path, repo: str, files: dict[str, str]) -> Path:
    base = _repo_dir(cache, repo)
    rev = revision_of(repo)
    snap = base / "snapshots" / rev
    (base / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (base / "refs").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        data = text.encode()
        sha = hashlib.sha256(data).hexdigest()
        blob = base / "blobs" / sha
        if not blob.exists():
            tmp = blob.with_suffix(".incomplete")
            tmp.write_bytes(data)
            tmp.replace(blob)
        link = snap / name
        target = Path("..") / ".." / "blobs" / sha
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target)
    ref = base / "refs" / "main"
    if not ref.is_file() or ref.read_text().strip() != rev:
        ref.write_text(rev)
    return snap


def _write_local(local: Path, repo: str, files: dict[str, str]) -> Path:
    local.mkdir(parents=True, exist_ok=True)
    meta = local / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True, exist_ok=True)
    rev = revision_of(repo)
    for name, text in files.items():
        path = local / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        sha = hashlib.sha256(text.encode()).hexdigest()
        (meta / f"{name}.metadata").write_text(f"{rev}\n{sha}\n{time.time():.6f}\n")
    return local


def download(repo: str, *, local_dir: str | None = None, cache_dir: str | None = None,
             quiet: bool = False, time_scale: float = 1.0) -> Path:
    """Emulate ``hf download``; returns the path it would print. Raises `HubError`."""
    spec = model_spec(repo)
    cache = Path(cache_dir) if cache_dir else hub_cache()
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    existing = cached_snapshot(repo, cache) if local_dir is None else (
        Path(local_dir) if (Path(local_dir) / "config.json").is_file() else None)
    if offline:
        if existing is not None:
            return existing.resolve() if local_dir else existing
        raise HubError(0, (
            "Cannot find an appropriate cached snapshot folder for the specified revision on the "
            "local disk and outgoing traffic has been disabled. To enable repo look-ups and "
            "downloads online, pass 'local_files_only=False' as input."))
    spec = _check_access(repo, spec)
    files = repo_files(spec)
    if existing is None and time_scale > 0:
        time.sleep(min(spec.weight_bytes / (_NETWORK_GBS * 1e9) * time_scale, 600.0))
    if not quiet:
        print(f"Fetching {len(files)} files: 100%|{'█' * 10}| {len(files)}/{len(files)}",
              file=sys.stderr)
    if local_dir is not None:
        return _write_local(Path(local_dir), repo, files).resolve()
    return _write_cache(cache, repo, files)


def _time_scale() -> float:
    try:
        v = float(os.environ.get("SPECDEC_EMU_TIME_SCALE", "1"))
    except ValueError:
        return 1.0
    return v if v > 0 else 1.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hf", description="Hugging Face Hub CLI (emulated)")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("download", help="Download files from the Hub")
    d.add_argument("repo_id")
    d.add_argument("filenames", nargs="*")
    d.add_argument("--repo-type", default="model", choices=["model", "dataset", "space"])
    d.add_argument("--revision")
    d.add_argument("--include", nargs="*")
    d.add_argument("--exclude", nargs="*")
    d.add_argument("--cache-dir")
    d.add_argument("--local-dir")
    d.add_argument("--token", help=argparse.SUPPRESS)
    d.add_argument("--force-download", action="store_true")
    d.add_argument("--max-workers", type=int, default=8)
    d.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.token:
        os.environ["HF_TOKEN"] = args.token  # this process only; never echoed
    if args.repo_type != "model":
        print(f"Error: repo type {args.repo_type!r} is not emulated", file=sys.stderr)
        return 1
    try:
        path = download(args.repo_id, local_dir=args.local_dir, cache_dir=args.cache_dir,
                        quiet=args.quiet, time_scale=_time_scale())
    except HubError as exc:
        code = f"{exc.status} Client Error. " if exc.status else ""
        print(f"Error: {code}{exc}".rstrip(), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"Error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
