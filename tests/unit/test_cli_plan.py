"""`specdec plan|render|identify` via subprocess, inventories and group_data."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from specdec.config.inventory import load_inventory
from specdec.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent.parent
INVENTORIES = sorted((ROOT / "inventories").glob("*.py"))


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH: this checkout's specdec, also when cwd is elsewhere (not an installed one).
    env = dict(os.environ, HF_TOKEN="hf_MARKERtoken123456789abcd",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p))
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def test_plan_json_jetsons() -> None:
    out = run("plan", "inventories/jetsons.py", "--json")
    assert out.returncode == 0, out.stderr
    recs = {r["host"]: r for r in json.loads(out.stdout)}
    assert set(recs) == {"agx-orin-01", "orin-nx-01", "orin-nano-01", "orin-nano-02"}
    for r in recs.values():
        for key in ("host", "device", "engine", "runtime", "model", "method", "draft",
                    "num_speculative_tokens", "image", "fit", "gate", "release_id"):
            assert key in r
    assert (recs["agx-orin-01"]["device"], recs["agx-orin-01"]["method"]) == (
        "agx-orin-64gb", "eagle3")
    assert (recs["orin-nx-01"]["method"], recs["orin-nx-01"]["draft"]) == (
        "draft_model", "meta-llama/Llama-3.2-1B-Instruct")
    assert recs["orin-nano-01"]["method"] == "ngram"
    assert recs["orin-nano-02"]["model"] == "Qwen/Qwen3-0.6B"
    assert "hf_MARKERtoken123" not in out.stdout + out.stderr


def test_plan_json_spark() -> None:
    out = run("plan", "inventories/spark.py", "--json")
    assert out.returncode == 0, out.stderr
    recs = {r["host"]: r for r in json.loads(out.stdout)}
    assert recs["spark-01"]["engine"] == "trtllm" and recs["spark-01"]["method"] == "eagle3"
    assert recs["spark-01"]["model"] == "openai/gpt-oss-120b"
    assert recs["spark-02"]["draft"] == "nvidia/Llama-3.1-8B-Instruct-FP4"


def test_plan_table_and_limit() -> None:
    out = run("plan", "inventories/jetsons.py", "--limit", "orin_nano")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("HOST")
    assert "orin-nano-01" in out.stdout and "agx-orin-01" not in out.stdout
    out = run("plan", "inventories/jetsons.py", "--limit", "agx-*", "--json")
    assert [r["host"] for r in json.loads(out.stdout)] == ["agx-orin-01"]


def test_render_writes_files(tmp_path: Path) -> None:
    out = run("render", "inventories/spark.py", "--host", "spark-01", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    units = list(tmp_path.glob("var/lib/specdec/releases/*/specdec-engine.service"))
    assert len(units) == 1
    assert (units[0].parent / "engine.yaml").is_file()
    assert (tmp_path / "etc/security/limits.d/90-specdec.conf").is_file()
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert "hf_MARKERtoken123" not in f.read_text()


def _bad_inventory(tmp_path: Path, host_data: str) -> Path:
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = [('bad-1', {host_data})]\n")
    return inv


@pytest.mark.parametrize(
    ("host_data", "fragments"),
    [
        ("{'specdec_device': 'orin-nano-8gb', 'specdec_model': "
         "'meta-llama/Llama-3.1-8B-Instruct'}", ["bad-1", "specdec_model=", "exceed 7.44 GiB"]),
        ("{'specdec_device': 'orin-nano-8gb', 'specdec_model': "
         "'nvidia/Llama-3.3-70B-Instruct-FP4'}", ["bad-1", "nvfp4 weights do not run on "
                                                  "orin-nano-8gb"]),
        ("{'specdec_device': 'orin-nano-8gb', 'specdec_model': 'Qwen/Qwen3-0.6B', "
         "'specdec_metod': 'ngram'}", ["bad-1", "specdec_metod", "did you mean specdec_method"]),
        ("{'specdec_device': 'jetson-tx2', 'specdec_model': 'Qwen/Qwen3-0.6B'}",
         ["bad-1", "specdec_device='jetson-tx2'"]),
        ("{'specdec_device': 'orin-nano-8gb', 'specdec_model': 'Qwen/Qwen3-0.6B', "
         "'specdec_port': 'eighty'}", ["bad-1", "specdec_port='eighty'"]),
        ("{'specdec_model': 'Qwen/Qwen3-0.6B'}", ["bad-1", "specdec_device is not set"]),
        ("{'specdec_device': 'dgx-spark', 'specdec_model': 'Qwen/Qwen3-0.6B', "
         "'specdec_image': 'nvcr.io/nvidia/vllm'}", ["bad-1", "specdec_image=", "not pinned"]),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path: Path, host_data: str, fragments: list[str]) -> None:
    inv = _bad_inventory(tmp_path, host_data)
    out = run("plan", str(inv), cwd=tmp_path)
    assert out.returncode == 2  # bad input
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("specdec: error: ")
    assert "Traceback" not in out.stderr
    for frag in fragments:
        assert frag in out.stderr


def test_missing_and_broken_inventory(tmp_path: Path) -> None:
    out = run("plan", str(tmp_path / "nope.py"))
    assert out.returncode == 2 and "no such file" in out.stderr and "Traceback" not in out.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("hosts = [('a', {})\n")
    out = run("plan", str(broken), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    out = run("plan", "inventories/jetsons.py", "--limit", "nothing-here")
    assert out.returncode == 2 and "--limit='nothing-here'" in out.stderr
    out = run("render", "inventories/jetsons.py", "--host", "ghost", "--out", str(tmp_path))
    assert out.returncode == 2 and "--host='ghost'" in out.stderr


def test_load_inventory_applies_group_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    hosts = dict(load_inventory("inventories/jetsons.py"))
    assert hosts["orin-nx-01"]["specdec_gpu_memory_utilization"] == 0.70  # group_data/orin_nx.py
    assert hosts["orin-nx-01"]["specdec_engine"] == "vllm"  # group_data/all.py
    assert hosts["orin-nano-02"]["specdec_model"] == "Qwen/Qwen3-0.6B"  # host data wins
    assert hosts["orin-nx-01"]["ssh_hostname"] == "192.0.2.21"
    with pytest.raises(ConfigError, match="no such file"):
        load_inventory("inventories/missing.py")


def _inventory_groups(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    groups = {path.stem, "all"}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_"):
                    groups.add(t.id)
    return groups


def test_every_group_data_file_names_a_real_group() -> None:
    groups: set[str] = set()
    for inv in INVENTORIES:
        groups |= _inventory_groups(inv)
    files = sorted((ROOT / "group_data").glob("*.py"))
    assert files
    for f in files:
        assert f.stem in groups, f"group_data/{f.name} matches no inventory group ({groups})"


def test_inventory_addresses_are_documentation_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    # The lab inventory uses the addresses of the network namespaces the lab creates.
    for inv in (i for i in INVENTORIES if i.name != "lab.py"):
        for name, data in load_inventory(str(inv.relative_to(ROOT))):
            assert str(data.get("ssh_hostname", "")).startswith("192.0.2."), name


def test_load_inventory_does_not_patch_caller() -> None:
    code = ("import sys; from specdec.config.inventory import load_inventory; "
            "h = load_inventory('inventories/spark.py'); "
            "sys.exit(0 if len(h) == 2 and 'pyinfra_cli' not in sys.modules "
            "and 'gevent' not in sys.modules else 1)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def test_load_inventory_in_process_under_pyinfra() -> None:
    code = ("import sys, pyinfra_cli; from specdec.config.inventory import load_inventory; "
            "h = dict(load_inventory('inventories/jetsons.py', 'orin_nx')); "
            "sys.exit(0 if h['orin-nx-01']['specdec_device'] == 'orin-nx-16gb' else 1)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def test_version_and_help_list_the_lab_apart() -> None:
    out = run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"specdec {version('specdec')}"
    text = run("--help").stdout
    product, _, plugins = text.partition("test infrastructure (installed plugins):")
    assert "  plan " in product and "  rollout " in product and "  lab " not in product
    assert plugins.strip().startswith("lab ")
    assert "2  bad input" in product and "4  gate: inconclusive" in product


def test_plan_help_explains_its_columns() -> None:
    text = run("plan", "--help").stdout
    for column in ("KV GiB", "MEM", "RELEASE", "LEN", "SEQS", "K "):
        assert f"\n  {column}" in text, column
