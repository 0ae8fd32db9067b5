"""A product install as a user gets it, for tests: the wheel built from this checkout, installed
into a fresh virtual environment (its dependencies from PyPI), the lab's package deleted."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(dist: Path) -> Path:
    """pip builds in the tree (setuptools' ``build/``): one build at a time (`make test`'s
    streams both build one), from an empty ``build/`` (a module deleted since the last build
    would still be in ``build/lib``, and so in the wheel)."""
    with open(Path(tempfile.gettempdir()) / "specdec-wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(ROOT / "build", ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--disable-pip-version-check", "-w", str(dist), str(ROOT)],
                       check=True, capture_output=True, timeout=600)
    return next(dist.glob("specdec-*.whl"))


def product_venv(wheel: Path, env: Path) -> Path:
    """``env`` with the wheel installed and without ``specdec_lab`` (a product install needs
    none of the lab's files). pip runs outside the checkout and without ``$PYTHONPATH``: a
    checkout's ``specdec.egg-info`` on the path reads as installed, and pip skips the wheel."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    subprocess.run([str(env / "bin/python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(wheel)], check=True,
                   capture_output=True, timeout=900, cwd=env, env=clean)
    site = Path(subprocess.run([str(env / "bin/python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, cwd=env, env=clean
                               ).stdout.strip())
    shutil.rmtree(site / "specdec_lab")
    return env
