"""NVIDIA Dynamo in the lab: the real frontend, router and runtime from PyPI, etcd from Debian,
and the engine emulator as the groups' vLLM workers.

* **The Dynamo venv** (`ensure_venv`): ``ai-dynamo-runtime`` and ``ai-dynamo`` at the release
  the catalog's Dynamo image carries, installed once into a venv under the lab cache (keyed by
  a hash of what goes in) by this machine's Debian ``/usr/bin/python3``, which is the lab
  hosts' Python (Debian 12, 3.11; the venv's interpreter is a link to it, so another Python
  here, e.g. pyenv's, would not exist inside the hosts). ``ai-dynamo`` installs without its
  dependencies, then with every
  ``Requires-Dist`` of its wheel that has no extra except two that cannot be satisfied from
  PyPI: ``aisimulate`` (a stub that downloads from a registry these machines cannot reach;
  only the mocker's AIS timing needs it) and ``certifi>=2026.10.19`` (newer than any certifi
  published; installed unpinned). Dynamo's lab hosts get the venv read-only at
  ``/opt/dynamo/venv``, where the deploy expects a native Dynamo.
* **The workers**: ``dynamo.vllm`` needs vLLM and a GPU, so a Dynamo host also gets
  ``dynamo/vllm/main.py`` bound over by a stand-in that runs `specdec_lab.emulator.dynamo_worker`
  (Dynamo's argument parsing, vLLM's refusals at the release Dynamo pins, the emulator's timing
  model and speculation, registered as a real Dynamo worker).
* **The group's network** is the lab's LAN (`specdec_lab.host.lan_routes`): every host of an
  instance reaches every other, group member or not, as on a shop floor; the group's firewall
  and certificates keep the others out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

from specdec.catalog import load_catalog
from specdec.host import layout
from specdec_lab.errors import LabError
from specdec_lab.filelock import locked
from specdec_lab.paths import CACHE_DIR
from specdec_lab.spec import LabHost

__all__ = ["MAIN_STANDIN", "ensure_venv", "nspawn_binds",
           "requirements", "venv_path"]

RUNTIME = "ai-dynamo-runtime"
PACKAGE = "ai-dynamo"
# Requires-Dist that cannot be met from PyPI (see the module doc): dropped / relaxed.
_DROP = {"aisimulate"}
_RELAX = {"certifi"}
HOST_PYTHON = "/usr/bin/python3"  # the lab hosts' interpreter (their rootfs is Debian 12 too)
MAIN_STANDIN = '''"""specdec lab: Dynamo's vLLM worker is the engine emulator (no vLLM, no GPU).
Bound over dynamo/vllm/main.py by the lab; see specdec_lab/dynamo.py."""
import sys

sys.path.insert(0, "/opt/specdec")
from specdec_lab.emulator.dynamo_worker import main as _main  # noqa: E402


def main():
    raise SystemExit(_main())
'''


def dynamo_release() -> str:
    """The Dynamo release of the catalog's Dynamo image (what the lab's Sparks run)."""
    versions = sorted(i.engine_version for i in load_catalog().images.values()
                      if i.engine == "dynamo" and i.channel == "ga")
    if not versions:
        raise LabError("the catalog has no Dynamo image (specdec/catalog/images.yaml)")
    return str(versions[-1])


def _key(version: str) -> str:
    doc = {"version": version, "python": _host_python_version(), "drop": sorted(_DROP),
           "relax": sorted(_RELAX), "recipe": 1}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]


def _host_python_version() -> str:
    try:
        out = subprocess.run([HOST_PYTHON, "--version"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError:
        raise LabError(f"Dynamo venv: {HOST_PYTHON} is missing (apt-get install python3 "
                       "python3-venv)") from None
    return out.stdout.strip().split()[-1] if out.returncode == 0 else "?"


def venv_path(version: str | None = None) -> Path:
    v = version or dynamo_release()
    return CACHE_DIR / f"dynamo-{v}-{_key(v)}" / "venv"


def requirements(metadata: str) -> list[str]:
    """``ai-dynamo``'s own requirements (no extras), minus the ones PyPI cannot meet."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        spec, _, marker = req.partition(";")
        if "extra ==" in marker:
            continue
        name = spec.strip().split("[")[0]
        for op in ("<", ">", "=", "!", "~", " "):
            name = name.split(op)[0]
        if name in _DROP or name == RUNTIME:
            continue
        out.append(name if name in _RELAX else spec.strip())
    return out


def _pip(venv: Path, *args: str, what: str, log: Path) -> None:
    with open(log, "ab") as out:
        proc = subprocess.run([str(venv / "bin" / "python3"), "-m", "pip", "--disable-pip-"
                               "version-check", "-q", *args], stdout=out, stderr=subprocess.STDOUT,
                              timeout=1800, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise LabError(f"Dynamo venv: {what} failed (exit {proc.returncode}): {tail[0]} "
                       f"(log: {log})")


def ensure_venv(version: str | None = None, log: Any = None) -> Path:
    """The lab's Dynamo venv, built once (concurrent callers wait); its directory."""
    v = version or dynamo_release()
    final = venv_path(v)
    with locked(CACHE_DIR / ".dynamo.lock"):
        if (final / "specdec-venv.json").is_file():
            return final
        root = final.parent
        work = root / "venv.building"
        if work.exists():
            shutil.rmtree(work)
        root.mkdir(parents=True, exist_ok=True)
        logf = root / "install.log"
        logf.write_text("")
        if log is not None:
            log(f"dynamo: installing {RUNTIME}=={v} and {PACKAGE}=={v} into {final} (once)")
        t0 = time.monotonic()
        proc = subprocess.run([HOST_PYTHON, "-m", "venv", str(work)], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise LabError(f"Dynamo venv: {HOST_PYTHON} -m venv failed: "
                           f"{proc.stderr.strip()[-200:]} "
                           "(apt-get install python3-venv)")
        _pip(work, "install", f"{RUNTIME}=={v}", what=f"pip install {RUNTIME}=={v}", log=logf)
        wheels = root / "wheels"
        _pip(work, "download", "--no-deps", "-d", str(wheels), f"{PACKAGE}=={v}",
             what=f"pip download {PACKAGE}=={v}", log=logf)
        wheel = next(wheels.glob(f"ai_dynamo-{v}-*.whl"), None)
        if wheel is None:
            raise LabError(f"Dynamo venv: no ai_dynamo-{v} wheel in {wheels}")
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            reqs = requirements(z.read(meta).decode())
        _pip(work, "install", "--no-deps", str(wheel), what=f"pip install {wheel.name}", log=logf)
        _pip(work, "install", *reqs, what=f"pip install {PACKAGE}'s requirements", log=logf)
        took = round(time.monotonic() - t0, 1)
        (work / "specdec-venv.json").write_text(json.dumps(
            {"dynamo": v, "requirements": reqs, "install_seconds": took}, indent=1) + "\n")
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        if log is not None:
            log(f"dynamo: venv ready in {took:.0f}s")
        return final


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise LabError(f"{venv}: no site-packages")
    return found[-1]


def nspawn_binds(h: LabHost, host_dir: Path) -> list[str]:
    """A Dynamo host's extra systemd-nspawn options: the venv at /opt/dynamo/venv (read-only)
    and the worker stand-in over its dynamo/vllm/main.py."""
    if h.engine != "dynamo":
        return []
    venv = venv_path()
    rel = site_packages(venv).relative_to(venv)
    standin = host_dir / "dynamo-vllm-main.py"
    standin.write_text(MAIN_STANDIN)
    return [f"--bind-ro={venv}:{layout.DYNAMO_VENV}",
            f"--bind-ro={standin}:{layout.DYNAMO_VENV}/{rel}/dynamo/vllm/main.py"]


