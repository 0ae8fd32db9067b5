"""The plan's memory check must not be more optimistic than the engine: every vLLM plan the
planner says fits starts in the engine emulator's memory model (vLLM's startup accounting)."""

from __future__ import annotations

import pytest

from specdec.catalog import load_catalog
from specdec.engines.vllm.engine import VllmEngine
from specdec.errors import SpecdecError
from specdec.plan.planner import baseline, make_plan
from specdec.plan.types import Plan
from specdec_lab.emulator.memory import EngineFailure, vllm_cpu_memory, vllm_memory
from specdec_lab.emulator.profiles import device_profile
from specdec_lab.emulator.setup import setup_for

CAT = load_catalog()
SMALL = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B",
         "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct",
         "meta-llama/Llama-3.1-8B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"]


def _starts(device: str, p: Plan) -> None:
    """The emulated engine's startup memory check for the plan (its CPU worker's on a CPU
    device, with the unit's VLLM_CPU_KVCACHE_SPACE)."""
    setup = setup_for(device, p.model, p.method if p.speculative else "none",
                      p.num_speculative_tokens, p.draft if p.method != "eagle3" else None,
                      max_num_seqs=p.max_num_seqs, max_model_len=p.max_model_len,
                      weight_scale=CAT.devices[device].dtype_scale)
    if CAT.devices[device].is_cpu:
        env = dict(VllmEngine().environment(p))
        vllm_cpu_memory(setup.memory_inputs(0.0), p.gpu_memory_utilization,
                        int(env["VLLM_CPU_KVCACHE_SPACE"]))
    else:
        vllm_memory(setup.memory_inputs(0.0), p.gpu_memory_utilization)


@pytest.mark.parametrize("device", sorted(CAT.devices))
def test_catalog_memtotal_is_what_the_emulated_device_reports(device: str) -> None:
    assert CAT.devices[device].memtotal_gib == device_profile(device).memtotal_gib


@pytest.mark.parametrize("device", sorted(d for d, v in CAT.devices.items()
                                          if "vllm" in v.engines))
def test_every_plan_that_fits_starts_in_the_engine(device: str) -> None:
    checked = 0
    for model in (m for m in SMALL if m in CAT.models):
        try:
            plan = make_plan("h", {"specdec_device": device, "specdec_model": model}, CAT)
        except SpecdecError:
            continue  # the planner refused it: nothing is deployed
        for p in (plan, baseline(plan)):
            try:
                _starts(device, p)
            except EngineFailure as exc:
                pytest.fail(f"{device} {p.model} {p.method}: the plan fits "
                            f"({p.fit}) but the engine says: {exc}")
            checked += 1
    assert checked > 0


@pytest.mark.usefixtures("hf_token")
def test_every_lab_host_plans_and_starts(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The whole lab fleet (all 8 hosts and the Dynamo group): each plans, and each vLLM plan
    (Dynamo's workers run vLLM) starts."""
    import json
    from pathlib import Path

    import specdec_lab.images as images
    from specdec.fleet.plans import plan_fleet

    # as on a machine whose lab images were built (whatever ran before): each mirror pinned
    pinned = {img.ref: "sha256:" + "0" * 64 for img in images.lab_images()}
    path = tmp_path / "images.json"
    path.write_text(json.dumps(pinned))
    monkeypatch.setenv(images.DIGESTS_ENV, str(path))  # the inventory loads in a child
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("SPECDEC_LAB_HOSTS", "8")
    plans = plan_fleet("inventories/lab.py").plans
    assert len(plans) == 10
    assert [p.host for p in plans if p.dynamo] == ["lab-dyn1", "lab-dyn2"]
    for plan in plans:
        if plan.engine not in ("vllm", "dynamo"):
            continue
        for p in (plan, baseline(plan)):
            setup = setup_for(p.device, p.model, p.method if p.speculative else "none",
                              p.num_speculative_tokens, p.draft if p.method != "eagle3" else None,
                              max_num_seqs=p.max_num_seqs, max_model_len=p.max_model_len)
            vllm_memory(setup.memory_inputs(0.0), p.gpu_memory_utilization)
