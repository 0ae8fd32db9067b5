"""specdec.bench.device_time: an emulator's wall figures become device figures, labelled."""

from __future__ import annotations

import pytest

from specdec.bench.device_time import to_device_time

WALL = {
    "concurrency": {"1": {
        "duration": 2.0, "output_throughput": 50.0, "throughput_tok_s": 50.0,
        "request_throughput": 2.0, "steady_output_throughput": 51.0,
        "median_tpot_ms": 10.0, "tpot_ms_p50": 10.0, "p99_ttft_ms": 30.0, "completed": 4,
        "total_output_tokens": 100, "mean_tokens_per_chunk": 1.0,
        "steady_window": {"start_s": 0.5, "end_s": 1.5, "tokens": 50},
        "per_category": {"chat": {"tpot_ms_p50": 10.0, "completed": 4}},
        "requests": [{"start_s": 0.1, "ttft_ms": 20.0, "tpot_ms": 10.0, "e2el_ms": 500.0,
                      "output_tokens": 25}],
    }},
    "spec_decode": {"acceptance_length": 2.5, "num_drafts": 10},
}


def test_durations_grow_and_rates_shrink_by_the_time_scale() -> None:
    dev = to_device_time(WALL, 0.1)
    lvl = dev["concurrency"]["1"]
    assert lvl["tpot_ms_p50"] == pytest.approx(100.0) and lvl["duration"] == pytest.approx(20.0)
    assert lvl["throughput_tok_s"] == pytest.approx(5.0)
    assert lvl["request_throughput"] == pytest.approx(0.2)
    assert lvl["steady_window"] == {"start_s": pytest.approx(5.0), "end_s": pytest.approx(15.0),
                                    "tokens": 50}
    assert lvl["requests"][0]["e2el_ms"] == pytest.approx(5000.0)
    assert lvl["per_category"]["chat"]["tpot_ms_p50"] == pytest.approx(100.0)
    # counts and ratios do not change
    assert lvl["completed"] == 4 and lvl["total_output_tokens"] == 100
    assert dev["spec_decode"] == WALL["spec_decode"]
    assert dev["device_time"]["emulated"] is True and dev["device_time"]["time_scale"] == 0.1
    assert WALL["concurrency"]["1"]["tpot_ms_p50"] == 10.0  # the input is not modified
    assert to_device_time(dev, 0.1) == dev  # converted once


def test_bench_cli_labels_an_emulator_result(tmp_path) -> None:
    import json
    import subprocess
    import sys
    import urllib.request

    from specdec_lab.emulator.local import emulator

    env = {"SPECDEC_EMU_DEVICE": "agx-orin-64gb", "SPECDEC_EMU_TIME_SCALE": "0.05"}
    with emulator("vllm", "Qwen/Qwen3-0.6B", (), env) as url:
        out = tmp_path / "r.json"
        p = subprocess.run([sys.executable, "-m", "specdec.cli", "bench", url, "--concurrency",
                            "1", "--requests", "2", "--max-tokens", "16", "--warmup", "0",
                            "--no-progress", "--json", str(out)], capture_output=True,
                           text=True, timeout=300, check=False)
        assert p.returncode == 0, p.stderr
        doc = json.loads(out.read_text())
        truth = json.loads(urllib.request.urlopen(url + "/lab/truth", timeout=30).read())
    assert doc["device_time"]["time_scale"] == 0.05
    # device time: a 0.6B model on an AGX Orin decodes in milliseconds (its roofline ~6 ms), a
    # floor the wall / 0.05 never goes under; within 3x of the same requests as the emulator
    # timed them, side by side (a busy machine slows both), not scaled twice (x20) nor left
    # as wall (/20)
    tpot, served = doc["concurrency"]["1"]["tpot_ms_p50"], truth["unscaled"]["tpot_ms_p50"]
    assert tpot > 3.0 and served / 3 < tpot < 3 * served, (tpot, served)
