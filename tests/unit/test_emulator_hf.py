"""The emulated `hf download`, and the emulator's dependency boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_lab.emulator import hf

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
SECRET = "hf_unit_test_secret"


def hf_cli(tmp_path: Path, *argv: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"),
           "SPECDEC_EMU_TIME_SCALE": "0.0001"}
    if token:
        (tmp_path / "token").write_text(SECRET)
        env["HF_TOKEN_PATH"] = str(tmp_path / "token")
    return subprocess.run([sys.executable, "-m", "specdec_lab.emulator.hf", *argv], env=env,
                          capture_output=True, text=True, timeout=60)


def test_hf_download_writes_the_hub_cache_layout(tmp_path: Path) -> None:
    r = hf_cli(tmp_path, "download", LLAMA8)
    assert r.returncode == 0, r.stderr
    snap = Path(r.stdout.strip())
    assert snap == hf.cached_snapshot(LLAMA8, tmp_path / "hf" / "hub")
    cfg = json.loads((snap / "config.json").read_text())
    assert cfg["_name_or_path"] == LLAMA8 and (snap / "config.json").is_symlink()
    assert SECRET not in r.stdout + r.stderr
    again = hf_cli(tmp_path, "download", LLAMA8)  # idempotent
    assert again.returncode == 0 and again.stdout == r.stdout


@pytest.mark.parametrize(("repo", "token", "message"), [
    (LLAMA8, False, "401 Client Error. Cannot access gated repo"),
    ("nobody/no-such-model", True, "404 Client Error. Repository Not Found"),
])
def test_hf_download_errors(tmp_path: Path, repo: str, token: bool, message: str) -> None:
    r = hf_cli(tmp_path, "download", repo, token=token)
    assert r.returncode == 1 and message in r.stderr


def test_emulator_imports_only_stdlib_yaml_and_allowed_specdec_modules() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import specdec_lab.emulator.server, specdec_lab.emulator.cli_vllm\n"
        "import specdec_lab.emulator.cli_trtllm\n"
        "import specdec_lab.emulator.hf, specdec_lab.emulator.startup\n"
        "new = sorted(set(sys.modules) - before)\n"
        "print('\\n'.join(new))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    third_party = {m.split(".")[0] for m in out} - set(sys.stdlib_module_names)
    third_party -= {m for m in third_party if "cython" in m}  # PyYAML's C loader runtime
    assert third_party <= {"specdec", "specdec_lab", "yaml", "_yaml"}, third_party
    ours = {m for m in out if m.startswith(("specdec.", "specdec_lab."))}
    allowed = ("specdec.catalog", "specdec.errors", "specdec_lab.emulator", "specdec.engines",
               "specdec.config", "specdec.host", "specdec.config.hygiene", "specdec.host.power")
    assert all(m.startswith(allowed) for m in ours), ours
