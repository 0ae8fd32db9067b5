"""Derive the lock file of a vLLM release (``locks/vllm-X.txt``): what its CLI parser and config
classes import on a CPU-only machine, at versions of the release's era.

    python3 -m specdec_lab.contract.lockgen 0.14.0 --exclude-newer 2026-01-19 [--seed FILE]

In a scratch environment (``<cache>/lockgen-X``): ``vllm==X`` without dependencies and torch,
then repeatedly run the contract checker (first only its imports, then every contract case of
that release) and install the top-level module it misses, with vLLM's own requirement for it
(its METADATA) and ``--exclude-newer`` the release's date, so that what comes along is what a
user got then. A missing ``vllm.*`` module stops the loop: installing "vllm" with dependencies
would replace the release. Then freeze, torch left out (the installer adds it).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from specdec_lab.contract.controls import checker_input
from specdec_lab.contract.installer import (
    LOCKS,
    InstallError,
    cache_root,
    cli,
    ensure_uv,
    install_torch,
    run,
    site_packages,
    uv_env,
)

__all__ = ["derive"]

CHECKER = Path(__file__).resolve().parent / "vllm_check.py"
# import name -> distribution, where they differ
DISTS = {"zmq": "pyzmq", "cv2": "opencv-python-headless", "yaml": "pyyaml",
         "cpuinfo": "py-cpuinfo", "PIL": "pillow", "google": "protobuf",
         "pythonjsonlogger": "python-json-logger", "multipart": "python-multipart",
         "sklearn": "scikit-learn", "jwt": "pyjwt", "dateutil": "python-dateutil",
         "lmformatenforcer": "lm-format-enforcer"}
_MISSING = re.compile(r"No module named '([^'.]+)[^']*'")
# fastapi's check for Form parameters (fastapi/dependencies/utils.py ensure_multipart_is_installed)
_REQUIRES = re.compile(r'requires "([A-Za-z0-9._-]+)" to be installed')
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(line: str) -> str:
    """The normalized distribution name a requirement line starts with ("" for none)."""
    m = _NAME.match(line.strip())
    return _norm(m.group(1)) if m else ""


def vllm_requirements(venv: Path, version: str) -> dict[str, str]:
    """vLLM's own unconditional requirements: normalized name -> specifier (extras dropped)."""
    meta = site_packages(venv) / f"vllm-{version}.dist-info" / "METADATA"
    out: dict[str, str] = {}
    for line in meta.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req, _, marker = line.split(":", 1)[1].partition(";")
        if "extra ==" in marker:
            continue
        req = re.sub(r"\[[^]]*\]", "", req).replace(" ", "")
        m = _NAME.match(req)
        if m:
            out.setdefault(_norm(m.group(1)), req)
    return out


def _probe(python: Path, inp: Path | None) -> tuple[bool, str]:
    """Whether the checker's import probe or full run succeeded, and its output (stderr
    included)."""
    argv = [str(python), "-I", str(CHECKER)]
    out_file = Path(str(inp) + ".out") if inp else None
    argv += ["--input", str(inp), "--output", str(out_file)] if inp else ["--probe"]
    if out_file is not None:
        out_file.unlink(missing_ok=True)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    text = out.stdout + out.stderr
    ok = out.returncode == 0
    if out_file is not None:
        ok = ok and out_file.is_file()
        text += out_file.read_text() if out_file.is_file() else ""
    return ok, text


def _missing(text: str) -> str | None:
    """The last top-level module (or, where a package says which distribution it needs,
    ``dist:NAME``) named missing; vLLM's own compiled ops are left out (the CUDA wheel's
    ``vllm._C*`` fail to load on the CPU with a warning, which the checks do not need)."""
    found = [m for m in _MISSING.findall(text) if m != "vllm"]
    found += [f"dist:{d}" for d in _REQUIRES.findall(text)]
    return found[-1] if found else None


def _names(lock: Path) -> list[str]:
    """The distributions a lock file pins, vLLM and torch left out."""
    out = []
    for line in lock.read_text().splitlines():
        if "==" in line and _dist(line) not in ("", "vllm", "torch"):
            out.append(_dist(line))
    return out


def _origin(option: str, path: Path | None) -> str:
    """`` --like specdec_lab/contract/locks/vllm-X.txt`` (relative to the repository when in it)."""
    if path is None:
        return ""
    path = path.resolve()
    root = LOCKS.parents[2]
    return f" {option} {path.relative_to(root) if path.is_relative_to(root) else path}"


def derive(version: str, exclude_newer: str, seed: Path | None = None,
           like: Path | None = None, rounds: int = 60) -> Path:
    cache = cache_root()
    uv = ensure_uv(cache)
    env = uv_env(cache)
    venv = cache / f"lockgen-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    run([str(uv), "venv", "-q", "--python", sys.executable, str(venv)], "uv venv", env)
    python = venv / "bin" / "python"
    pip = [str(uv), "pip", "install", "-q", "--python", str(python), "--compile-bytecode"]
    run(pip + ["--no-deps", f"vllm=={version}"], f"install vllm=={version}", env)
    install_torch(uv, python, env)
    if seed is not None:
        run(pip + ["--no-deps", "-r", str(seed)], f"install seed {seed}", env)
    reqs = vllm_requirements(venv, version)
    if like is not None:  # another release's packages, at this release's requirements and era
        specs = [reqs.get(_norm(n), n) for n in _names(like)]
        run(pip + ["--exclude-newer", exclude_newer, *specs], f"install the names in {like}", env)
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "input.json"
        inp.write_text(json.dumps(checker_input(version)))
        tried: set[str] = set()
        full = False
        for _ in range(rounds):
            ok, text = _probe(python, inp if full else None)
            mod = _missing(text)
            if mod is None:
                if not ok:
                    tail = " | ".join(text.strip().splitlines()[-4:])
                    raise InstallError(f"vLLM {version}: the checker fails, no module missing: "
                                       f"{tail}")
                if full:
                    break
                full = True
                continue
            if mod in tried:
                raise InstallError(f"vLLM {version}: still missing {mod!r} after installing it:"
                                   f" {text.strip().splitlines()[-1:]}")
            tried.add(mod)
            dist = mod[len("dist:"):] if mod.startswith("dist:") else DISTS.get(mod, mod)
            spec = reqs.get(_norm(dist), dist)
            print(f"vLLM {version}: missing module {mod!r} -> {spec}", flush=True)
            run(pip + ["--exclude-newer", exclude_newer, spec], f"install {spec}", env)
        else:
            raise InstallError(f"vLLM {version}: no import-clean environment in {rounds} rounds")
    frozen = run([str(uv), "pip", "freeze", "--python", str(python)], "uv pip freeze", env)
    pins = sorted((x for x in frozen.splitlines() if _dist(x) not in ("", "torch")),
                  key=str.lower)
    lock = LOCKS / f"vllm-{version}.txt"
    lock.write_text(
        f"# vLLM {version} on a CPU-only machine: what its CLI parser and config classes import.\n"
        f"# Installed with --no-deps beside torch (specdec_lab.contract.installer). Derived by\n"
        f"# `python3 -m specdec_lab.contract.lockgen {version} --exclude-newer {exclude_newer}"
        f"{_origin('--seed', seed)}{_origin('--like', like)}`.\n"
        + "\n".join(pins) + "\n")
    shutil.rmtree(venv, ignore_errors=True)
    return lock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m specdec_lab.contract.lockgen",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("version", help="vLLM release, e.g. 0.14.0")
    ap.add_argument("--exclude-newer", required=True, metavar="DATE",
                    help="the release's date (YYYY-MM-DD): nothing newer is installed")
    ap.add_argument("--seed", type=Path, help="a lock file to start from (installed as pinned)")
    ap.add_argument("--like", type=Path, help="a lock file whose package names to start from "
                    "(installed at this release's requirements and date)")
    opts = ap.parse_args(argv)
    return cli(lambda: derive(opts.version, opts.exclude_newer, opts.seed, opts.like))


if __name__ == "__main__":
    sys.exit(main())
