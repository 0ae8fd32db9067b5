"""`pyinfra INVENTORY deploys/specdec.py` through the real CLI against @fake hosts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.harness import identity_output as _as_output
from tests.unit.test_identify import AGX64

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = shutil.which("pyinfra")
pytestmark = pytest.mark.skipif(PYINFRA is None, reason="pyinfra CLI not on PATH")

GOOD = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}


def _inventory(tmp_path: Path, hosts: list[tuple[str, dict]]) -> Path:
    responses = {
        "@@specdec-file": _as_output(AGX64),
        "uname -s": "Linux",
        "command -v useradd": "/usr/sbin/useradd",
        "command -v groupadd": "/usr/sbin/groupadd",
    }
    fake = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}
    entries = ",\n    ".join(f"({name!r}, {{**_fake, **{data!r}}})" for name, data in hosts)
    path = tmp_path / "fleet.py"
    path.write_text(f"_fake = {fake!r}\n\nfleet = [\n    {entries},\n]\n")
    return path


def _pyinfra(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    assert PYINFRA is not None
    return subprocess.run([sys.executable, PYINFRA, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def test_bad_inventory_value_stops_with_one_line(tmp_path):
    inv = _inventory(tmp_path, [
        ("@fake/good-1", GOOD),
        ("@fake/bad-1", {**GOOD, "specdec_max_num_seqs": 0}),
    ])
    out = _pyinfra("-y", str(inv), "deploys/specdec.py")
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, text
    assert "@fake/bad-1: specdec_max_num_seqs=0: must be an integer in 1..1024" in errors[0]
    # nothing ran: the run stopped in prepare
    assert "Beginning operation run" not in text and "Starting operation" not in text


def test_good_fleet_dry_run_prepares_every_role(tmp_path):
    inv = _inventory(tmp_path, [("@fake/good-1", GOOD)])
    out = _pyinfra("--dry", str(inv), "deploys/specdec.py")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for role in ("Docker access", "HF token", "Ulimits", "Jetson tuning", "Images",
                 "Model prefetch", "Serve"):
        assert f"{role} |" in text
