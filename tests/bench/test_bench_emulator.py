"""Bench client against the engine emulator on loopback (child processes, our PIDs only)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.bench.client import BenchConfig, run_bench
from specdec.errors import ConfigError
from specdec_lab.emulator.local import emulator, lab_truth, reset_truth

ORIN = {"SPECDEC_EMU_DEVICE": "agx-orin-64gb", "SPECDEC_EMU_TIME_SCALE": "0.02",
        "SPECDEC_EMU_SEED": "7"}
SPARK = {**ORIN, "SPECDEC_EMU_DEVICE": "dgx-spark"}
MODEL = "Qwen/Qwen3-8B"
HEAD = "RedHatAI/Qwen3-8B-speculator.eagle3"
TRT_HEAD = "Tengyunw/qwen3_8b_eagle3"  # original format: what TensorRT-LLM loads
EAGLE = ["--speculative-config",
         json.dumps({"method": "eagle3", "model": HEAD, "num_speculative_tokens": 3})]


@pytest.fixture(scope="module")
def vllm_spec() -> Iterator[str]:
    with emulator("vllm", MODEL, EAGLE, ORIN) as url:
        yield url


def test_vllm_eagle3_matches_truth(vllm_spec: str) -> None:
    reset_truth(vllm_spec)
    res = run_bench(BenchConfig(url=vllm_spec, concurrency=(1, 4), requests=8, max_tokens=32,
                                fill=False,
                                warmup=0))
    truth = lab_truth(vllm_spec)
    assert res["server"]["kind"] == "vllm" and res["model"] == MODEL
    sd = res["spec_decode"]
    acc = truth["acceptance"]
    # the counters the client differenced are exactly what the engine did
    assert sd["num_drafts"] == acc["drafts"] and sd["accepted_tokens"] == acc["accepted_tokens"]
    assert sd["acceptance_length"] == pytest.approx(acc["acceptance_length"], abs=1e-3)
    assert 1.0 < sd["acceptance_length"] <= 4.0
    assert len(sd["per_position_acceptance_rates"]) == 3
    for c in ("1", "4"):
        lvl = res["concurrency"][c]
        assert lvl["completed"] == 8 and lvl["length_mismatches"] == 0
        assert lvl["mean_tokens_per_chunk"] > 1.2  # speculation bundles tokens per chunk
    assert truth["requests"] == 16


def test_vllm_per_level_truth(vllm_spec: str) -> None:
    reset_truth(vllm_spec)
    res = run_bench(BenchConfig(url=vllm_spec, concurrency=(1,), requests=8, max_tokens=48,
                                warmup=0))
    truth = lab_truth(vllm_spec)
    lvl = res["concurrency"]["1"]
    assert lvl["tpot_ms_p50"] == pytest.approx(truth["tpot_ms_p50"], rel=0.05)
    assert lvl["throughput_tok_s"] == pytest.approx(truth["throughput_tok_s"], rel=0.05)


def test_wrong_model_against_emulator(vllm_spec: str) -> None:
    with pytest.raises(ConfigError, match="is not served"):
        run_bench(BenchConfig(url=vllm_spec, model="Qwen/Qwen3-4B", warmup=0))


def test_baseline_has_no_spec_decode() -> None:
    with emulator("vllm", MODEL, [], ORIN) as url:
        res = run_bench(BenchConfig(url=url, concurrency=(2,), requests=4, max_tokens=16,
                                    fill=False,
                                    warmup=1, endpoint="completions"))
    assert res["spec_decode"] is None and res["concurrency"]["2"]["completed"] == 4


def test_trtllm_iteration_stats(tmp_path: Path) -> None:
    opts = tmp_path / "extra.yaml"
    opts.write_text("enable_iter_perf_stats: true\nspeculative_config:\n  decoding_type: Eagle3\n"
                    f"  max_draft_len: 3\n  speculative_model_dir: {TRT_HEAD}\n")
    # A release that takes decoding_type Eagle3 and a Hub id (PR #10124, #10099)
    env = {**SPARK, "SPECDEC_EMU_ENGINE_VERSION": "1.3.0rc15"}
    with emulator("trtllm-serve", MODEL, ["--extra_llm_api_options", str(opts)], env) as url:
        reset_truth(url)
        res = run_bench(BenchConfig(url=url, concurrency=(1, 4), requests=8, max_tokens=32,
                                fill=False,
                                    warmup=0))
        truth = lab_truth(url)
    assert res["server"]["kind"] == "trtllm" and res["server"]["metrics"] == "trtllm-json"
    sd = res["spec_decode"]
    assert sd["num_drafts"] == truth["acceptance"]["drafts"]
    assert sd["acceptance_length"] == pytest.approx(truth["acceptance"]["acceptance_length"],
                                                    abs=1e-3)
    assert sd["per_position_acceptance_rates"] is None


def test_5xx_burst_fails_with_one_line_and_no_json(tmp_path: Path) -> None:
    env = {**ORIN, "SPECDEC_EMU_FAULT": "5xx_burst:1:1000"}
    out = tmp_path / "r.json"
    with emulator("vllm", MODEL, [], env) as url:
        p = subprocess.run([sys.executable, "-m", "specdec.cli", "bench", url, "--concurrency",
                            "1", "--requests", "4", "--warmup", "0", "--max-tokens", "8",
                            "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and not out.exists()
    assert p.stderr.count("\n") == 1 and "4/4 requests failed (http_5xx 4" in p.stderr
