"""Bench client against tiny fake servers on 127.0.0.1 (threads in this process, no extra PIDs)."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakeserver import serve

from specdec.bench.client import BenchConfig, run_bench
from specdec.bench.prompts import builtin_prompts
from specdec.cli import main
from specdec.errors import BenchError, ConfigError


def cfg(url: str, **kw: object) -> BenchConfig:
    base: dict[str, object] = {"url": url, "concurrency": (1, 4), "requests": 8,
                               "max_tokens": 6, "warmup": 1}
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def test_vllm_flavour_figures_and_spec_decode() -> None:
    with serve("vllm") as (url, st):
        res = run_bench(cfg(url, requests=12, fill=False))  # counters of measured ones only
    assert res["model"] == "m" and res["server"]["kind"] == "vllm"
    for c in ("1", "4"):
        lvl = res["concurrency"][c]
        assert lvl["completed"] == 12 and lvl["failed"] == 0
        assert lvl["total_output_tokens"] == 72
        assert lvl["throughput_tok_s"] == lvl["output_throughput"] > 0
        assert lvl["steady_output_throughput"] > 0
        assert lvl["steady_window"]["exact_token_times"] is True
        assert lvl["tpot_ms_p50"] == lvl["median_tpot_ms"] > 0
        assert lvl["mean_tokens_per_chunk"] == pytest.approx(2.5)  # (N-1)/(chunks-1)
        assert lvl["length_mismatches"] == 0
        sd = lvl["spec_decode"]
        assert sd["num_drafts"] == 12 * 3  # only this level's requests, not warmup
        assert sd["acceptance_length"] == pytest.approx(2.0)
        assert sd["acceptance_rate"] == pytest.approx(1 / 3)
        assert sd["per_position_acceptance_rates"] == pytest.approx([1.0, 0.0, 0.0])
    assert res["spec_decode"]["num_drafts"] == 72
    assert res["spec_decode"]["acceptance_length"] == pytest.approx(2.0)
    # same prompts in the same order at every level, none of them a warmup prompt
    ids1 = [r["prompt_id"] for r in res["concurrency"]["1"]["requests"]]
    assert ids1 == [r["prompt_id"] for r in res["concurrency"]["4"]["requests"]]
    assert ids1 == [p.id for p in builtin_prompts().measured[:12]]
    warm = {p.text for p in builtin_prompts().warmup}
    sent = [b["messages"][0]["content"] for b in st.bodies]
    assert sent[0].split("] ", 1)[1] in warm
    assert not any(s.split("] ", 1)[1] in warm for s in sent[1:])
    body = st.bodies[-1]
    assert body["temperature"] == 0 and body["ignore_eos"] is True
    assert body["min_tokens"] == body["max_tokens"] == 6
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_trtllm_flavour_completions_endpoint() -> None:
    with serve("trtllm") as (url, st):
        res = run_bench(cfg(url, endpoint="completions", continuous_usage=False, fill=False))
    assert res["server"]["kind"] == "trtllm"
    assert all(b["path"] == "/v1/completions" and "prompt" in b for b in st.bodies)
    lvl = res["concurrency"]["4"]
    assert lvl["completed"] == 8
    assert lvl["steady_window"]["exact_token_times"] is False
    sd = lvl["spec_decode"]
    assert sd["num_drafts"] == 24 and sd["acceptance_length"] == pytest.approx(2.0)
    assert sd["per_position_acceptance_rates"] is None


def test_no_speculation_is_null() -> None:
    for mode in ("vllm-nospec", "openai"):
        with serve(mode) as (url, _):
            res = run_bench(cfg(url, concurrency=(2,), requests=4, warmup=0))
        assert res["spec_decode"] is None
        assert res["concurrency"]["2"]["spec_decode"] is None


def test_length_mismatch_is_reported() -> None:
    with serve("short") as (url, _):
        res = run_bench(cfg(url, concurrency=(1,), requests=3, warmup=0))
    assert res["concurrency"]["1"]["length_mismatches"] == 3
    assert any("completion_tokens" in w for w in res["warnings"])


@pytest.mark.parametrize(("mode", "kind"), [("500", "http_5xx"), ("errstream", "stream_error"),
                                            ("badsse", "malformed_sse"),
                                            ("drop", "connection")])
def test_broken_server_fails_clearly(mode: str, kind: str) -> None:
    with serve(mode) as (url, _), pytest.raises(BenchError) as ei:
        run_bench(cfg(url, concurrency=(1,), requests=4, warmup=0))
    msg = str(ei.value)
    assert "4/4 requests failed" in msg and kind in msg and "\n" not in msg


def test_warmup_all_failing_stops_early() -> None:
    with serve("500") as (url, st), pytest.raises(BenchError, match="warmup"):
        run_bench(cfg(url, warmup=2))
    assert len(st.bodies) == 2


def test_timeout_counts_as_error() -> None:
    with serve("slow") as (url, _), pytest.raises(BenchError, match="timeout"):
        run_bench(cfg(url, concurrency=(2,), requests=2, warmup=0, request_timeout_s=0.2))


def test_some_failures_within_budget_pass() -> None:
    with serve("vllm") as (url, _):
        res = run_bench(cfg(url, concurrency=(1,), requests=2, warmup=0, max_failed_fraction=0.5))
    assert res["concurrency"]["1"]["failed"] == 0


def test_counters_backwards() -> None:
    with serve("backwards") as (url, _), pytest.raises(BenchError, match="backwards"):
        run_bench(cfg(url, concurrency=(1, 2), requests=2, warmup=0))


def test_not_openai_wrong_model_unreachable() -> None:
    with serve("notopenai") as (url, _), pytest.raises(BenchError, match="not an OpenAI"):
        run_bench(cfg(url))
    with serve("vllm") as (url, st), pytest.raises(ConfigError, match="'other' is not served"):
        run_bench(cfg(url, model="other"))
    assert st.bodies == []  # checked before any generation request
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(BenchError, match="cannot connect"):
        run_bench(cfg(f"http://127.0.0.1:{port}"))


def test_progress_only_when_asked_or_tty() -> None:
    with serve("vllm") as (url, _):
        quiet = io.StringIO()
        run_bench(cfg(url, concurrency=(1,), requests=2, warmup=0), stderr=quiet)
        assert quiet.getvalue() == ""
        loud = io.StringIO()
        run_bench(cfg(url, concurrency=(1,), requests=2, warmup=0, progress=True), stderr=loud)
        assert "c1" in loud.getvalue() and "2/2" in loud.getvalue()


def test_cli_writes_json_only_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    out = tmp_path / "r.json"
    with serve("vllm") as (url, _):
        rc = main(["bench", url, "--concurrency", "1,2", "--requests", "3", "--max-tokens", "4",
                   "--warmup", "0", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert set(data["concurrency"]) == {"1", "2"}
    bad = tmp_path / "bad.json"
    with serve("badsse") as (url, _):
        rc = main(["bench", url, "--concurrency", "1", "--requests", "2", "--warmup", "0",
                   "--json", str(bad)])
    err = capsys.readouterr().err
    assert rc == 1 and not bad.exists()
    assert err.count("\n") == 1 and err.startswith("specdec: error: concurrency 1: 2/2")
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left behind


def test_cli_subprocess_unreachable(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "specdec.cli", "bench", f"http://127.0.0.1:{port}",
                        "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and not out.exists()
    assert p.stderr.count("\n") == 1 and "cannot connect" in p.stderr
    p = subprocess.run([sys.executable, "-m", "specdec.cli", "bench", "ftp://x",
                        "--concurrency", "1,x"], capture_output=True, text=True, timeout=60)
    # bad input (ConfigError): exit 2
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--concurrency" in p.stderr


def test_per_level_requests_and_prompt_offset() -> None:
    with serve("vllm") as (url, _):
        res = run_bench(cfg(url, concurrency=(1, 2), requests=(2, 3), warmup=0, prompt_offset=50))
    ids = [p.id for p in builtin_prompts().measured]
    assert [r["prompt_id"] for r in res["concurrency"]["1"]["requests"]] == ids[50:52]
    assert [r["prompt_id"] for r in res["concurrency"]["2"]["requests"]] == [*ids[50:52], ids[0]]
    assert res["config"]["requests"] == [2, 3]
    with pytest.raises(ConfigError, match="one per concurrency"):
        run_bench(cfg("http://127.0.0.1:1", concurrency=(1, 2), requests=(2,)))
    with pytest.raises(ConfigError, match="max-tokens"):
        run_bench(cfg("http://127.0.0.1:1", max_tokens=1))
