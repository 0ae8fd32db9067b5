"""`specdec plan` reports every mistake of an inventory at once, one line each, exit 2; a gated
model without a token stops `plan` and `rollout` before any host is contacted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NANO = {"specdec_device": "orin-nano-8gb", "specdec_model": "Qwen/Qwen3-0.6B"}


def specdec(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH")}
    clean["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p)
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=cwd,
                          env={**clean, **env}, capture_output=True, text=True, timeout=300,
                          check=False)


def test_five_mistakes_are_five_lines(tmp_path: Path) -> None:
    hosts = [
        ("nano-1", {**NANO, "specdec_modle": "Qwen/Qwen3-0.6B"}),  # a key misspelt
        ("nano-2", {**NANO, "specdec_runtime": "dockr"}),  # an enumerated value misspelt
        ("nano-3", {**NANO, "specdec_model": "Qwen/Qwen3-0.6"}),  # a model id not in the catalog
        ("nano-4", {**NANO, "specdec_model": "Qwen/Qwen3-8B"}),  # does not fit an 8 GB Nano
        ("nano-5", {**NANO, "specdec_port": 99999}),  # out of range
        ("nano-6", NANO),  # fine
    ]
    rows = [(n, {"ssh_hostname": f"192.0.2.{i}", **d}) for i, (n, d) in enumerate(hosts, 1)]
    (tmp_path / "inventory.py").write_text(f"hosts = {rows!r}\n")
    out = specdec("plan", "inventory.py", cwd=tmp_path, HF_HOME=str(tmp_path / "hf"))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 5, out.stderr
    assert all(line.startswith(f"specdec: error: nano-{i}: ") for i, line in
               enumerate(lines, 1)), lines
    assert "did you mean specdec_model?" in lines[0]
    assert "did you mean docker?" in lines[1]
    assert "Qwen/Qwen3-0.6B" in lines[2]  # the closest id
    assert "would fit: specdec_model: RedHatAI/Qwen3-4B-quantized.w4a16" in lines[3]
    assert "specdec_port=99999" in lines[4]
    assert out.stdout == ""  # no plan is printed while any host is wrong


def test_a_gated_model_without_a_token_stops_before_any_host(tmp_path: Path) -> None:
    gated = {"specdec_device": "orin-nano-8gb", "specdec_model": "meta-llama/Llama-3.2-1B-Instruct"}
    rows = [("nano-1", {"ssh_hostname": "192.0.2.1", **gated})]
    (tmp_path / "inventory.py").write_text(f"hosts = {rows!r}\n")
    env = {"HF_HOME": str(tmp_path / "hf"), "SPECDEC_STATE_DIR": str(tmp_path / "state")}
    out = specdec("plan", "inventory.py", cwd=tmp_path, **env)
    assert out.returncode == 2 and "gated on Hugging Face" in out.stderr, out.stderr
    # the rollout's own check refuses it too: pyinfra never starts, no run is written
    out = specdec("rollout", "inventory.py", "--reports", str(tmp_path / "reports"),
                  cwd=tmp_path, **env)
    assert out.returncode == 2 and "gated on Hugging Face" in out.stderr, out.stderr
    assert "Connecting" not in out.stdout
    assert not any((tmp_path / "reports").glob("*/*.json"))
    # with the token `hf auth login` saves, the plan goes through
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("hf_" + "a1" * 17 + "\n")
    out = specdec("plan", "inventory.py", cwd=tmp_path, **env)
    assert out.returncode == 0, out.stderr
