"""A product install, as a user gets it: the wheel built from this checkout, installed into a
fresh virtual environment, the lab's package deleted from it, and `specdec plan` / `specdec
render` run from a directory outside the checkout on copies of the example inventories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", "-w", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    return next(dist.glob("specdec-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    env = tmp_path_factory.mktemp("wheel") / "venv"
    # not the checkout: with PYTHONPATH=<checkout> pip finds the specdec.egg-info that building
    # the wheel left there and installs nothing ("already satisfied")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    subprocess.run([str(env / "bin/python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(wheel)], check=True,
                   capture_output=True, timeout=900, env=clean)
    site = Path(subprocess.run([str(env / "bin/python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, env=clean
                               ).stdout.strip())
    shutil.rmtree(site / "specdec_lab")  # a product install needs none of the lab's files
    yield env


def test_the_wheel_ships_the_pyinfra_layer_and_not_the_lab_data_in_the_product(
        wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for must in ("specdec/deploys/specdec.py", "specdec/roles/serve.py",
                 "specdec/templates/specdec-engine.service.j2", "specdec/catalog/devices.yaml",
                 "specdec/engines/vllm/facts.py", "specdec/bench/prompts.yaml"):
        assert must in names, must
    assert not [n for n in names if n.startswith("specdec/") and n.endswith(".conf")]
    assert not [n for n in names if n.startswith("specdec/") and "/locks/" in n]


@pytest.mark.parametrize("inventory", ["jetsons.py", "spark.py"])
def test_plan_and_render_without_the_lab_from_any_directory(venv: Path, tmp_path: Path,
                                                             inventory: str) -> None:
    user = tmp_path / "fleet"
    (user / "inventories").mkdir(parents=True)
    shutil.copy(ROOT / "inventories" / inventory, user / "inventories" / inventory)
    shutil.copytree(ROOT / "group_data", user / "group_data")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    plan = subprocess.run([str(venv / "bin/specdec"), "plan", f"inventories/{inventory}",
                           "--json"], cwd=user, env=env, capture_output=True, text=True,
                          timeout=300)
    assert plan.returncode == 0, plan.stderr
    plans = json.loads(plan.stdout)
    host = plans[0]["host"]
    out = tmp_path / "out"
    render = subprocess.run([str(venv / "bin/specdec"), "render", f"inventories/{inventory}",
                             "--host", host, "--out", str(out)], cwd=user, env=env,
                            capture_output=True, text=True, timeout=300)
    assert render.returncode == 0, render.stderr
    assert list(out.rglob("specdec-engine.service"))
    helped = subprocess.run([str(venv / "bin/specdec"), "--help"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and " lab " not in helped.stdout
