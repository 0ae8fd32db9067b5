"""The emulator's physical timing and memory models (pure logic)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from specdec.catalog import GIB
from specdec_lab.emulator.acceptance import SPREAD_CLIP, prompt_offset
from specdec_lab.emulator.core import SimPrompt, simulate
from specdec_lab.emulator.memory import EngineFailure, trtllm_memory, vllm_memory
from specdec_lab.emulator.setup import setup_for
from specdec_lab.emulator.textgen import stable_int
from specdec_lab.emulator.timing import StepLoad

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
PROMPTS = [SimPrompt(key=stable_int("p", i), prompt_tokens=100 + (i * 37) % 400,
                     category="chat") for i in range(64)]


# -- timing ---------------------------------------------------------------------------------------
def test_decode_step_is_weight_bytes_over_bandwidth() -> None:
    s = setup_for("agx-orin-64gb", LLAMA8)
    tm = s.timing()
    cost = tm.step_time(StepLoad(decode_seqs=1, kv_tokens=0))
    dev = s.device
    expect = s.target.decode_bytes / dev.bandwidth_bps + dev.graph_launch_s
    assert cost.target_s == pytest.approx(expect, rel=1e-6)
    assert cost.draft_s == 0.0 and cost.overhead_s == dev.sched_overhead_s
    # AGX Orin (204.8 GB/s) reads ~15 GiB of bf16 weights per token: about 100 ms
    assert 0.085 < cost.total_s < 0.115


def test_decode_memory_bound_then_compute_bound() -> None:
    tm = setup_for("agx-orin-64gb", LLAMA8).timing()
    t1 = tm.target_forward(1, 0)
    t8 = tm.target_forward(8, 0)
    t4096 = tm.target_forward(4096, 0)
    assert t8 == pytest.approx(t1, rel=0.01)  # small batches ride on the weight read
    assert t4096 > 5 * t1  # prefill-sized batches are compute-bound


def test_kv_reads_cost_bandwidth() -> None:
    tm = setup_for("agx-orin-64gb", LLAMA8).timing()
    assert tm.target_forward(1, 100_000) > tm.target_forward(1, 0) * 1.2


def test_eager_is_slower_than_cuda_graphs() -> None:
    graphs = setup_for("orin-nano-8gb", "meta-llama/Llama-3.2-1B-Instruct").timing()
    eager = setup_for("orin-nano-8gb", "meta-llama/Llama-3.2-1B-Instruct",
                      enforce_eager=True).timing()
    load = StepLoad(decode_seqs=1)
    dev = eager.device
    extra = eager.target.layers * 12 * dev.kernel_launch_s - dev.graph_launch_s
    assert extra > 0.001
    assert eager.step_time(load).total_s == pytest.approx(
        graphs.step_time(load).total_s + extra, rel=1e-6)


def test_draft_cost_grows_with_k_and_model_size() -> None:
    head = setup_for("agx-orin-64gb", LLAMA8, "eagle3", 3).timing()
    draft = setup_for("agx-orin-64gb", "meta-llama/Llama-3.2-3B-Instruct", "draft_model", 3,
                      "meta-llama/Llama-3.2-1B-Instruct").timing()
    l3 = StepLoad(decode_seqs=1, drafting_seqs=1, draft_tokens=3, k=3, kv_tokens=500)
    l5 = StepLoad(decode_seqs=1, drafting_seqs=1, draft_tokens=5, k=5, kv_tokens=500)
    assert head.draft_time(l5) > head.draft_time(l3) > 0
    # an EAGLE head is a small fraction of a target step; a draft model is not
    assert head.draft_time(l3) < 0.25 * head.target_forward(4, 500)
    assert draft.draft_time(l3) > 0.3 * draft.target_forward(4, 500)


def test_time_scale_does_not_enter_the_model() -> None:
    s = setup_for("dgx-spark", "Qwen/Qwen3-8B", "eagle3", 5)
    a = simulate(s.engine_model(), PROMPTS, concurrency=2, num_requests=4, max_tokens=64)
    b = simulate(s.engine_model(), PROMPTS, concurrency=2, num_requests=4, max_tokens=64)
    assert a.throughput_tok_s == b.throughput_tok_s  # seeded: deterministic


def speedup(device: str, model: str, method: str, k: int, draft: str | None,
            concurrency: int, tokens: int = 128) -> float:
    base = setup_for(device, model, max_num_seqs=64)
    spec = setup_for(device, model, method, k, draft, max_num_seqs=64)
    n = max(8, concurrency * 3)
    rb = simulate(base.engine_model(), PROMPTS, concurrency=concurrency, num_requests=n,
                  max_tokens=tokens)
    rs = simulate(spec.engine_model(), PROMPTS, concurrency=concurrency, num_requests=n,
                  max_tokens=tokens)
    return rs.throughput_tok_s / rb.throughput_tok_s


def test_speculation_helps_at_1_and_regresses_at_16_for_a_draft_model() -> None:
    args = ("orin-nx-16gb", "meta-llama/Llama-3.2-3B-Instruct", "draft_model", 3,
            "meta-llama/Llama-3.2-1B-Instruct")
    assert speedup(*args, concurrency=1) > 1.05
    assert speedup(*args, concurrency=16) < 1.0


def test_eagle_gain_shrinks_with_concurrency() -> None:
    args = ("agx-orin-64gb", LLAMA8, "eagle3", 3, None)
    s1, s16 = speedup(*args, concurrency=1), speedup(*args, concurrency=16)
    assert s1 > 1.8 and s16 < s1 - 0.3


def test_mismatched_head_collapses_acceptance() -> None:
    s = setup_for("dgx-spark", "Qwen/Qwen3-8B", "eagle3", 3, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    r = simulate(s.engine_model(), PROMPTS, concurrency=1, num_requests=4, max_tokens=64)
    assert r.acceptance_length is not None and r.acceptance_length < 1.3


# -- memory ---------------------------------------------------------------------------------------
def test_vllm_memory_budget_adds_up() -> None:
    s = setup_for("agx-orin-64gb", LLAMA8, "eagle3", 3, max_num_seqs=8, max_model_len=8192)
    rep = vllm_memory(s.memory_inputs(), 0.65)
    assert rep.budget_gib == pytest.approx(rep.total_gib * 0.65)
    assert rep.kv_gib == pytest.approx(rep.budget_gib - rep.weights_gib - rep.peak_gib
                                       - rep.non_torch_gib)
    head = s.drafter
    assert head is not None
    assert rep.weights_gib == pytest.approx((s.target.weight_bytes + head.weight_bytes) / GIB)
    per_token = s.target_kv_bytes_per_token + s.draft_kv_bytes_per_token
    assert rep.kv_tokens == pytest.approx(rep.kv_gib * GIB / per_token, abs=16)


def test_vllm_8b_does_not_fit_orin_nano() -> None:
    s = setup_for("orin-nano-8gb", LLAMA8, max_num_seqs=4, max_model_len=4096)
    with pytest.raises(EngineFailure) as info:
        vllm_memory(s.memory_inputs(), 0.8)
    assert "CUDA out of memory" in info.value.root and info.value.stage == "load"


def test_vllm_free_memory_below_utilization() -> None:
    s = setup_for("agx-orin-64gb", LLAMA8, max_num_seqs=8, max_model_len=8192)
    with pytest.raises(EngineFailure, match="Free memory on device cuda:0 .* is less than desired "
                                            "GPU memory utilization"):
        vllm_memory(s.memory_inputs(reserved_gib=20.0), 0.9)


def test_vllm_max_model_len_needs_kv() -> None:
    s = setup_for("orin-nano-8gb", "meta-llama/Llama-3.2-1B-Instruct", max_num_seqs=4,
                  max_model_len=131072)
    with pytest.raises(EngineFailure) as info:
        vllm_memory(s.memory_inputs(), 0.45)
    assert "estimated maximum model length is" in info.value.root
    assert "To serve at least one request with the models's max seq len (131072)" in (
        info.value.root)


def test_speculation_costs_memory() -> None:
    base = setup_for("agx-orin-64gb", LLAMA8, max_num_seqs=8, max_model_len=8192)
    spec = setup_for("agx-orin-64gb", LLAMA8, "eagle3", 3, max_num_seqs=8, max_model_len=8192)
    a, b = vllm_memory(base.memory_inputs(), 0.65), vllm_memory(spec.memory_inputs(), 0.65)
    assert b.kv_tokens < a.kv_tokens


def test_trtllm_memory_reduces_max_seq_len() -> None:
    s = setup_for("dgx-spark", "openai/gpt-oss-120b", max_num_seqs=16, max_model_len=131072)
    rep = trtllm_memory(s.memory_inputs(reserved_gib=35.0), 0.05)
    assert rep.max_model_len == min(131072, rep.kv_tokens) and rep.kv_tokens < 131072


def test_prompt_spread_is_each_prompts_own_within_its_category() -> None:
    """Per-prompt acceptance spread (a stated stress): a prompt's acceptance is its own in every
    run (the ALs of two seeds agree prompt by prompt), which without it they do not; off, it
    changes nothing."""
    assert prompt_offset(123, 0.0) == 0.0
    assert prompt_offset(123, 0.05) == prompt_offset(123, 0.05)
    assert max(abs(prompt_offset(i, 0.05)) for i in range(2000)) <= SPREAD_CLIP * 0.05

    def per_prompt(spread: float, seed: int) -> list[float]:
        s = setup_for("dgx-spark", "Qwen/Qwen3-8B", "eagle3", 5, seed=seed,
                      prompt_spread=spread)
        out = []
        for p in PROMPTS[:24]:
            r = simulate(s.engine_model(), [p], concurrency=1, num_requests=1, max_tokens=256)
            assert r.acceptance_length is not None
            out.append(r.acceptance_length)
        return out

    assert statistics.correlation(per_prompt(0.05, 1), per_prompt(0.05, 2)) > 0.5
    assert abs(statistics.correlation(per_prompt(0.0, 1), per_prompt(0.0, 2))) < 0.4
    base = setup_for("dgx-spark", "Qwen/Qwen3-8B", "eagle3", 5, seed=1)
    assert replace(base, prompt_spread=0.0).engine_model() == base.engine_model()
