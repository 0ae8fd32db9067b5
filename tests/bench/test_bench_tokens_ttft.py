"""Usage-less servers (tokens counted with the tokenizer, or estimated and never gated) and TTFT
measured from the moment the request is on the wire."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from fakeserver import TTFT_S, serve, serve_process

from specdec.bench.client import BenchConfig, run_bench
from specdec.gate.decide import decide
from specdec_lab.emulator.textgen import tokenizer_json

pytest.importorskip("tokenizers")  # the optional dependency (pip install 'specdec[tokens]')


def cfg(url: str, **kw: object) -> BenchConfig:
    base: dict[str, object] = {"url": url, "concurrency": (1, 8), "requests": (4, 8),
                               "max_tokens": 12, "warmup": 1}
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def test_usage_less_server_without_tokenizer_is_estimated_and_held(tmp_path: Path) -> None:
    with serve("nousage3") as (url, st):
        res = run_bench(cfg(url, tokenizer=str(tmp_path / "none")))
    lvl = res["concurrency"]["1"]
    # 12 tokens in chunks of 3: counting chunks would say 4
    assert lvl["tokens_estimated"] == 4 and lvl["tokens_counted"] == 0
    assert {r["tokens_source"] for r in lvl["requests"]} == {"estimated"}
    assert res["tokens"]["estimated"] == 12 and not res["tokens"]["tokenizer_found"]
    assert any("tokens estimated" in w for w in res["warnings"])
    assert all(b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
               for b in st.bodies)
    d = decide(res, res)
    assert d.decision == "inconclusive" and d.held and "tokens estimated" in d.reason


def test_usage_less_server_is_counted_with_the_models_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(tokenizer_json())
    with serve("nousage3") as (url, _):
        res = run_bench(cfg(url, tokenizer=str(tmp_path)))
    for c in ("1", "8"):
        lvl = res["concurrency"][c]
        assert lvl["tokens_counted"] == lvl["completed"] and lvl["tokens_estimated"] == 0
        assert lvl["total_output_tokens"] == 12 * lvl["completed"]  # not 4 per request
        assert lvl["length_mismatches"] == 0
    assert decide(res, res).decision != "inconclusive" or not decide(res, res).held


def test_tokenizer_found_in_the_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec.bench.tokens import find_tokenizer_file, load_counter

    snap = tmp_path / "hub" / "models--org--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_text(tokenizer_json())
    (tmp_path / "hub" / "models--org--m" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--m" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert find_tokenizer_file("org/m") == snap / "tokenizer.json"
    count = load_counter("org/m")
    assert count is not None and count(" the the.\n    return value") == 6
    assert load_counter("org/other") is None


def test_ttft_starts_when_the_request_is_on_the_wire() -> None:
    """The server answers its first token TTFT_S after reading the request; at c=8 the
    measured TTFT p50 stays near it (the client's queueing is not counted)."""
    with serve_process("ttft") as url:
        res = run_bench(cfg(url, concurrency=(8,), requests=(32,), max_tokens=2, warmup=0))
    lvl = res["concurrency"]["8"]
    ttfts = [r["ttft_ms"] for r in lvl["requests"]]
    p50 = statistics.median(ttfts)
    assert p50 >= TTFT_S * 1000, p50
    # 32 requests in 4 waves of 8: counting the client's queue (a TTFT from when the run began)
    # would put the last wave's TTFT behind its start (three waves, at least three TTFTs, in);
    # from the wire it stays one TTFT plus overheads, which a slow machine adds to both
    last = [r for r in lvl["requests"] if r["index"] >= 24]
    start_ms = min(r["start_s"] for r in last) * 1000
    assert start_ms >= 3 * TTFT_S * 1000
    assert statistics.median(r["ttft_ms"] for r in last) < start_ms + TTFT_S * 1000
    assert lvl["ttft_ms_p50"] == pytest.approx(p50)
    assert all(r["client_queue_ms"] >= 0 for r in lvl["requests"])
