from __future__ import annotations

import json

import pytest

from specdec.bench.metrics import (
    Counters,
    TrtllmAccumulator,
    parse_vllm,
    spec_delta,
    trtllm_entries,
)
from specdec.errors import BenchError


def prom(drafts: int, toks: int, acc: int, p0: int, p1: int, typed: bool = True) -> str:
    def t(name: str) -> str:
        return f"# TYPE vllm:spec_decode_{name} counter\n" if typed else ""

    lab = 'model_name="m",engine="0"'
    return (
        "# HELP vllm:num_requests_running running\n# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{lab}}} 1.0\n"
        f"{t('num_drafts')}vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}\n"
        f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9\n"
        f"{t('num_draft_tokens')}vllm:spec_decode_num_draft_tokens_total{{{lab}}} {toks}\n"
        f"{t('num_accepted_tokens')}vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {acc}\n"
        f"{t('num_accepted_tokens_per_pos')}"
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {p0}\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} {p1}\n'
    )


@pytest.mark.parametrize("typed", [True, False])
def test_vllm_delta(typed: bool) -> None:
    d = spec_delta(parse_vllm(prom(10, 20, 5, 3, 2, typed)),
                   parse_vllm(prom(110, 220, 155, 83, 72, typed)))
    assert d is not None
    assert d["num_drafts"] == 100 and d["accepted_tokens"] == 150
    assert d["acceptance_length"] == pytest.approx(2.5)
    assert d["acceptance_rate"] == pytest.approx(0.75)
    assert d["spec_decode_acceptance_rate"] == pytest.approx(75.0)  # vLLM's percentage
    assert d["per_position_acceptance_rates"] == pytest.approx([0.8, 0.7])


def test_counters_summed_over_engines() -> None:
    text = prom(10, 20, 5, 3, 2) + prom(10, 20, 5, 3, 2, typed=False).replace(
        'engine="0"', 'engine="1"').split("\n", 3)[3]
    c = parse_vllm(text)
    assert c.drafts == 20 and c.per_pos == {0: 6, 1: 4}


def test_backwards_raises() -> None:
    with pytest.raises(BenchError, match="backwards"):
        spec_delta(parse_vllm(prom(100, 200, 50, 30, 20)), parse_vllm(prom(5, 10, 2, 1, 1)))
    with pytest.raises(BenchError, match="restarted"):
        spec_delta(parse_vllm(prom(100, 200, 50, 30, 20)),
                   parse_vllm(prom(100, 200, 50, 30, 20).replace(" 20\n", " 19\n")))


def test_no_spec_is_none_but_idle_spec_is_zero() -> None:
    gauge_only = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    assert spec_delta(parse_vllm(gauge_only), parse_vllm(gauge_only)) is None
    d = spec_delta(parse_vllm(prom(5, 10, 2, 1, 1)), parse_vllm(prom(5, 10, 2, 1, 1)))
    assert d is not None and d["num_drafts"] == 0 and d["acceptance_length"] is None


def test_malformed_prometheus() -> None:
    with pytest.raises(BenchError, match="malformed Prometheus"):
        parse_vllm('vllm:spec_decode_num_drafts_total{model_name="m" 3\n')


def _summed(entries: list[dict[str, object]]) -> Counters:
    acc = TrtllmAccumulator()
    acc.add(entries)
    return acc.counters


def test_trtllm_entries_and_delta() -> None:
    it = {"iter": 1, "specDecodingStats": {"numRequestsWithDraftTokens": 4,
                                           "numDraftTokens": 12, "numAcceptedTokens": 6}}
    entries = trtllm_entries([it, json.dumps({**it, "iter": 2})])  # some versions send strings
    d = spec_delta(Counters(present=True, per_pos=None), _summed(entries))
    assert d is not None and d["acceptance_length"] == pytest.approx(2.5)
    assert d["acceptance_rate"] == pytest.approx(0.5) and d["per_position_acceptance_rates"] is None
    assert _summed([{"iter": 3, "numActiveRequests": 1}]).present is False
    with pytest.raises(BenchError):
        trtllm_entries({"not": "a list"})
    with pytest.raises(BenchError, match="not a number"):
        _summed([{"specDecodingStats": {"numDraftTokens": "x"}}])


def test_trtllm_accumulator_dedupes_and_detects_restart() -> None:
    def it(n: int) -> dict[str, object]:
        return {"iter": n, "timestamp": str(n), "specDecodingStats": {
            "numRequestsWithDraftTokens": 1, "numDraftTokens": 3, "numAcceptedTokens": 2}}

    acc = TrtllmAccumulator()
    acc.add([it(1), it(2)], prime=True)  # before the level: not counted
    acc.add([it(2), it(3), it(4)])  # a server that does not drain repeats iteration 2
    acc.add([it(5)])
    assert acc.counters.drafts == 3 and acc.counters.accepted == 6
    with pytest.raises(BenchError, match="backwards"):
        acc.add([{**it(1), "timestamp": "after restart"}])  # iteration numbers start again
