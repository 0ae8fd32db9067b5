"""The real Hugging Face client in the lab: each ``huggingface_hub`` release the catalog's images
carry (``hub_version`` in ``specdec/catalog/images.yaml``), installed once from PyPI.

`ensure_client` installs a release (with its requirements, as pip resolves them for CPython 3.11
on Linux x86_64, the lab's Debian 12 python3) into ``CACHE_DIR/hub-client-<version>/site``
with ``pip install --target``. The lab puts that tree into an image's layer at
``/usr/local/lib/python3.11/dist-packages`` (`layer_files`), and binds it read-only into a
native host at `HOST_DIR` (with a ``.pth`` file naming it); in both the CLI the release ships
(``hf`` from 0.34.0, ``huggingface-cli`` before 1.0.0: its ``entry_points.txt``) is a script in
``/usr/local/bin`` run by ``/usr/bin/python3``.
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path

from specdec.catalog import load_catalog
from specdec_lab.errors import LabError
from specdec_lab.filelock import locked
from specdec_lab.paths import CACHE_DIR

__all__ = ["CLIS", "HOST_DIR", "PTH", "client_dir", "ensure_client", "layer_files",
           "scripts", "versions"]

HOST_DIR = "/opt/huggingface_hub"  # a native lab host's bind of the client tree
PTH = "usr/local/lib/python3.11/dist-packages/specdec-lab-huggingface-hub.pth"
SITE = "usr/local/lib/python3.11/dist-packages"
CLIS = ("hf", "huggingface-cli")


def versions() -> list[str]:
    """Every huggingface_hub release the catalog's images carry."""
    return sorted({str(i.hub_version) for i in load_catalog().images.values()
                   if i.hub_version is not None})


def client_dir(version: str) -> Path:
    return CACHE_DIR / f"hub-client-{version}"


def ensure_client(version: str, log: object = None) -> Path:
    """``huggingface_hub==version`` and its requirements under the lab cache (once; concurrent
    callers wait); returns the directory whose ``site/`` holds them."""
    final = client_dir(version)
    with locked(CACHE_DIR / ".hub-client.lock"):
        if (final / "specdec-client.json").is_file():
            return final
        work = final.with_name(final.name + ".building")
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        if callable(log):
            log(f"hub client: installing huggingface_hub=={version} from PyPI (once)")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
             "--no-compile", "--no-warn-script-location", "--target", str(work / "site"),
             "--python-version", "3.11", "--implementation", "cp", "--only-binary=:all:",
             "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux2014_x86_64", f"huggingface_hub=={version}"],
            capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            tail = " ".join(proc.stderr.split())[-300:]
            raise LabError(f"hub client: pip install huggingface_hub=={version} failed: {tail}")
        shutil.rmtree(work / "site" / "bin", ignore_errors=True)
        (work / "specdec-client.json").write_text(json.dumps(
            {"huggingface_hub": version, "scripts": scripts(work / "site", version)},
            indent=1, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        return final


def scripts(site: Path, version: str) -> dict[str, str]:
    """The release's Hub CLIs as scripts for ``/usr/bin/python3`` (its console_scripts)."""
    ep = site / f"huggingface_hub-{version}.dist-info" / "entry_points.txt"
    cfg = configparser.ConfigParser()
    cfg.read_string(ep.read_text())
    out = {}
    for name, target in cfg["console_scripts"].items():
        if name not in CLIS:
            continue
        module, _, func = target.strip().partition(":")
        out[name] = (f"#!/usr/bin/python3\n# huggingface_hub {version} ({name}); specdec lab\n"
                     f"import sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    if not out:
        raise LabError(f"hub client {version}: no Hub CLI in {ep}")
    return out


def layer_files(version: str) -> dict[str, tuple[bytes, int]]:
    """An image layer's files: the client tree in dist-packages and its CLIs on PATH."""
    root = client_dir(version)
    site = root / "site"
    out: dict[str, tuple[bytes, int]] = {}
    for p in sorted(site.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[f"{SITE}/{p.relative_to(site).as_posix()}"] = (p.read_bytes(), 0o644)
    for name, text in scripts(site, version).items():
        out[f"usr/local/bin/{name}"] = (text.encode(), 0o755)
    return out


def host_version(device_id: str, engine: str) -> str | None:
    """The release a native install of ``engine`` on the device has: the one its default
    catalog image carries (a pip install of the same engine release resolves the same way)."""
    cat = load_catalog()
    dev = cat.device(device_id)
    img = cat.default_image(dev, engine, "36.4.3" if dev.is_jetson else None)
    return str(img.hub_version) if img is not None and img.hub_version is not None else None


def host_setup(device_id: str, engine: str, runtime: str) -> tuple[list[str], dict[str, str]]:
    """A native lab host's systemd-nspawn options (the client tree, read-only, at `HOST_DIR`)
    and files (the ``.pth`` naming it, the CLIs); nothing for the docker runtime, where the
    image has the client."""
    version = host_version(device_id, engine) if runtime == "native" else None
    if version is None:
        return [], {}
    site = ensure_client(version) / "site"
    files = {PTH: HOST_DIR + "\n"}
    files.update({f"usr/local/bin/{n}": t for n, t in scripts(site, version).items()})
    return [f"--bind-ro={site}:{HOST_DIR}"], files


def cli_argv(version: str, cli: str, python: str = sys.executable) -> list[str]:
    """Run a release's CLI here (the control node's Python 3.11; its tree first on the path):
    how the tests and benchmarks call the exact client an image carries."""
    site = ensure_client(version) / "site"
    text = scripts(site, version).get(cli)
    if text is None:
        raise LabError(f"huggingface_hub {version} has no {cli}")
    line = next(ln for ln in text.splitlines() if ln.startswith("from "))
    module, func = line.removeprefix("from ").split(" import ")
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); sys.argv[0] = {cli!r}; "
            f"from {module} import {func}; sys.exit({func}())")
    return [python, "-s", "-c", code]
