"""One virtual environment per pinned vLLM release, outside the repository, made only from PyPI.

The cheapest environment that imports a release's own CLI parser and config classes on a
CPU-only machine: ``vllm==X`` without its dependencies, torch 2.13.0 (the CPU build this
machine keeps in /opt/wheels, else PyPI's build, which runs on the CPU too) and the pure-Python
packages they import, pinned per release in ``locks/vllm-X.txt`` (`specdec_lab.contract.lockgen`
derives one). Built with uv (installed into the cache from PyPI), bytecode compiled at install
time (without it every import of vLLM recompiles: 30-80 s).

``<cache>/vllm-X/`` is reused while its stamp (lock file hash, torch, Python, recipe) matches;
builds of one release are serialized by a lock file, so parallel test runs share one build.
The cache is ``$SPECDEC_CONTRACT_CACHE``, default ``/var/cache/specdec-contract``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specdec_lab.filelock import locked

__all__ = ["LOCKS", "cache_root", "ensure_uv", "ensure_vllm", "lock_file", "torch_spec"]

LOCKS = Path(__file__).resolve().parent / "locks"
DEFAULT_CACHE = "/var/cache/specdec-contract"
UV_VERSION = "0.13.9"
TORCH_VERSION = "2.13.0"
PYTHON_TAG = "cp311"
RECIPE = 1  # bump when the way an environment is built changes
STAMP = ".specdec-contract.json"

Log = Callable[[str], None]


class InstallError(RuntimeError):
    """An environment could not be built (one line: what failed)."""


def cache_root() -> Path:
    return Path(os.environ.get("SPECDEC_CONTRACT_CACHE") or DEFAULT_CACHE)


def wheels_dir() -> Path:
    return Path(os.environ.get("SPECDEC_CONTRACT_WHEELS") or "/opt/wheels")


def lock_file(engine: str, version: str) -> Path:
    path = LOCKS / f"{engine}-{version}.txt"
    if not path.is_file():
        raise InstallError(f"no lock file for {engine} {version} ({path}); derive one with "
                           f"`python3 -m specdec_lab.contract.lockgen {version} --exclude-newer "
                           "DATE` (the release's date)")
    return path


def torch_spec() -> tuple[str, bool]:
    """What to install torch from and whether with its dependencies: the local CPU wheel
    (dependencies come from the lock file), else PyPI's torch with its own (CUDA libraries)."""
    local = sorted(wheels_dir().glob(f"torch-{TORCH_VERSION}+cpu-{PYTHON_TAG}-*.whl"))
    if local:
        return str(local[-1]), False
    return f"torch=={TORCH_VERSION}", True


def _python() -> str:
    if sys.version_info[:2] != (3, 11):
        raise InstallError(f"the contract environments need Python 3.11 (torch {TORCH_VERSION} "
                           f"{PYTHON_TAG}); this is {sys.version.split()[0]}")
    return sys.executable


def run(argv: list[str], what: str, env: dict[str, str] | None = None,
        timeout: float = 3600) -> str:
    """Run a command; InstallError with its last output lines when it fails."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             env=env, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise InstallError(f"{what}: {exc}") from None
    if out.returncode != 0:
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-6:])
        raise InstallError(f"{what}: exit {out.returncode}: {tail}")
    return out.stdout


def uv_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(UV_CACHE_DIR=str(cache / "uv-cache"), UV_PYTHON_DOWNLOADS="never",
               UV_NO_CONFIG="1", UV_LINK_MODE="hardlink")
    for name in ("VIRTUAL_ENV", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(name, None)
    return env


def ensure_uv(cache: Path, log: Log = print) -> Path:
    """uv, pinned, in ``<cache>/tools`` (pip from PyPI)."""
    tools = cache / "tools"
    uv = tools / "bin" / "uv"
    with locked(cache / ".tools.lock"):
        if uv.is_file():
            have = run([str(uv), "--version"], "uv --version").split()
            if len(have) > 1 and have[1] == UV_VERSION:
                return uv
        log(f"installing uv {UV_VERSION} into {tools}")
        run([_python(), "-m", "venv", "--clear", str(tools)], "python -m venv tools")
        run([str(tools / "bin" / "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", f"uv=={UV_VERSION}"], f"pip install uv=={UV_VERSION}")
    return uv


def pins(lock: Path) -> list[str]:
    """A lock file's requirement lines (its comments do not change an environment)."""
    lines = (x.split("#", 1)[0].strip() for x in lock.read_text().splitlines())
    return [x for x in lines if x]


def _stamp(engine: str, version: str, lock: Path) -> dict[str, object]:
    torch, _ = torch_spec()
    return {"engine": engine, "version": version, "recipe": RECIPE,
            "lock_sha256": hashlib.sha256("\n".join(pins(lock)).encode()).hexdigest(),
            "torch": Path(torch).name, "python": sys.version.split()[0]}


def site_packages(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


def healthy(venv: Path, stamp: dict[str, object]) -> bool:
    try:
        have = json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return False
    dist = site_packages(venv) / f"{stamp['engine']}-{stamp['version']}.dist-info"
    return have == stamp and (venv / "bin" / "python").exists() and dist.is_dir()


def install_torch(uv: Path, python: Path, env: dict[str, str]) -> None:
    spec, with_deps = torch_spec()
    argv = [str(uv), "pip", "install", "-q", "--python", str(python), "--compile-bytecode"]
    run(argv + ([] if with_deps else ["--no-deps"]) + [spec], f"install {spec}", env)


def ensure_vllm(version: str, log: Log = print) -> Path:
    """The environment of vLLM ``version``: reused when healthy, else built (minutes)."""
    cache = cache_root()
    lock = lock_file("vllm", version)
    stamp = _stamp("vllm", version, lock)
    venv = cache / f"vllm-{version}"
    with locked(cache / f".vllm-{version}.lock"):
        if healthy(venv, stamp):
            return venv
        uv = ensure_uv(cache, log)
        env = uv_env(cache)
        t0 = time.monotonic()
        log(f"building {venv} (vLLM {version}, {lock.name})")
        shutil.rmtree(venv, ignore_errors=True)
        run([str(uv), "venv", "-q", "--python", _python(), str(venv)], "uv venv", env)
        python = venv / "bin" / "python"
        install_torch(uv, python, env)
        run([str(uv), "pip", "install", "-q", "--python", str(python), "--no-deps",
             "--compile-bytecode", "-r", str(lock)], f"install {lock.name}", env)
        (venv / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        log(f"built {venv} in {time.monotonic() - t0:.0f} s")
    return venv


def main(argv: list[str] | None = None) -> int:
    """``python3 -m specdec_lab.contract.installer VERSION...``: build (or reuse) environments."""
    versions = sys.argv[1:] if argv is None else argv
    return cli(lambda: "\n".join(str(ensure_vllm(v)) for v in versions))


def cli(action: Callable[[], object]) -> int:
    """Print what ``action`` returns (exit 0) or its InstallError in one line (exit 1)."""
    try:
        print(action())
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
