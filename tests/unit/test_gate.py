from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from specdec.cli import main
from specdec.errors import GateError
from specdec.gate.decide import decide, load_policy, load_result
from specdec.gate.rounds import BenchSettings, pick, round_bench
from specdec.plan.types import GatePolicy
from tests.benchmod import load

# the gate's rounds without a host (benchmarks/gateloop.py, which the fingerprint drives too)
_gateloop = load("gateloop")
decide_adaptive = _gateloop.abab

N_TOK = 64
CATS = {"chat": 16, "code": 16, "summarization": 12, "repetitive": 8}
ORDER = ["chat", "code", "summarization", "repetitive"]


def level(tpot: float, speedup: dict[str, float], n: int, noise: float,
          rng: random.Random, run: float, chunks: bool = True) -> dict[str, Any]:
    """Requests whose TPOT is ``tpot / speedup[category]`` (one category after the other):
    ``max(1, speedup)`` tokens per engine step (one chunk each), the step time the rest."""
    reqs = []
    for i in range(n):
        cat = ORDER[i % len(ORDER)]
        sp = speedup.get(cat, 1.0)
        per_step = max(1.0, sp)
        steps = math.ceil((N_TOK - 1) / per_step)
        step = tpot * per_step / sp * math.exp(rng.gauss(0, noise)) * run
        e2e = 20.0 + step * steps
        r = {"index": i, "prompt_id": f"{cat}-{i}", "category": cat,
             "tpot_ms": (e2e - 20.0) / (N_TOK - 1), "ttft_ms": 20.0, "e2el_ms": e2e,
             "output_tokens": N_TOK, "error": None}
        if chunks:
            r["chunks"] = steps + 1
        reqs.append(r)
    e2e = sum(r["e2el_ms"] for r in reqs) / 1000
    return {"throughput_tok_s": n * N_TOK / e2e, "tpot_ms_p50": sorted(
        r["tpot_ms"] for r in reqs)[n // 2], "requests": reqs}


def result(s1: float | dict[str, float] = 1.0, s8: float | None = 1.0, *, n1: int = 4,
           n8: int = 8, noise: float = 0.02, run_noise: float = 0.0,
           seed: int = 0, chunks: bool = True) -> dict[str, Any]:
    """One arm's bench result: speedups vs a baseline of TPOT 50 ms at c=1, 60 ms at c=8
    (``s8`` None: no c=8 level in this round; ``chunks`` False: no chunk records)."""
    rng = random.Random(seed)
    sp1 = s1 if isinstance(s1, dict) else dict.fromkeys(ORDER, s1)
    runs = [math.exp(rng.gauss(0, run_noise)) for _ in range(2)]
    levels = {"1": level(50.0, sp1, n1, noise, rng, runs[0], chunks)}
    if s8 is not None:
        levels["8"] = level(60.0, dict.fromkeys(ORDER, s8), n8, noise, rng, runs[1], chunks)
    return {"config": {"max_tokens": N_TOK, "endpoint": "chat", "requests": [n1, n8]},
            "prompts": {"categories": CATS}, "concurrency": levels}


BASE = result(seed=1, n1=3)  # the baseline measures fewer c=1 requests (pooled)


def rule(d: Any, name: str) -> dict[str, Any]:
    return next(r for r in d.to_dict()["rules"] if r["name"] == name)


def test_clear_gain_keeps_in_one_round() -> None:
    d = decide(BASE, result(2.0, 1.6, seed=2))
    assert d.decision == "keep", d.reason
    r = rule(d, "throughput_gain_c1")
    assert r["measured"] == pytest.approx(0.96, abs=0.05) and r["threshold"] == 0.3
    assert r["verdict"] == "pass" and r["look"] == 1
    assert r["method"] == ("stratified-rate(4+3 requests, 1 rounds, baseline pooled, robust step "
                           "time)")
    assert rule(d, "tpot_p50_reduction_c1")["measured"] == pytest.approx(0.5, abs=0.03)
    assert {r["name"] for r in d.to_dict()["rules"]} == {
        "throughput_gain_c1", "tpot_p50_reduction_c1", "no_regression_c8"}
    assert d.code == "keep" and "indifference zone" in d.reason and d.pending == ()


def test_disable_low_gain() -> None:
    d = decide(BASE, result(0.8, 1.0, seed=3))
    assert d.decision == "disable" and d.code == "min_gain" and "below 10%" in d.reason


def test_shown_c8_regression_disables() -> None:
    d = decide(BASE, result(2.0, 0.7, seed=4))
    assert d.decision == "disable" and d.code == "c8_regression" and "c=8" in d.reason


def test_gain_between_thresholds_is_disabled_as_out_of_reach() -> None:
    # a true +12% lies below the zone (+17.6%..+43.7%): shown out of reach
    d = decide(BASE, result(1.12, 1.2, seed=5))
    assert d.decision == "disable" and d.code == "keep_out_of_reach", d.reason
    # a true +20% lies in it: a wrong disable has a 0.1% budget, one round does not spend it
    for seed in (5, 6, 7):
        d = decide(BASE, result(1.20, 1.2, seed=seed))
        assert d.decision == "inconclusive" and d.keep_possible, d.reason
    d = decide([BASE, result(seed=2, n1=3)], [result(1.12, 1.2, seed=5), result(1.12, 1.2, seed=6)])
    assert d.decision == "disable" and d.code == "keep_out_of_reach", d.reason


def test_near_threshold_adds_rounds_of_the_open_level_only() -> None:
    d = decide(BASE, result(1.30, 1.3, seed=6))
    assert d.decision == "inconclusive" and d.keep_possible and d.code == "more_rounds"
    assert d.pending == (1,)  # c=8 is clearly fine: not measured again
    assert rule(d, "no_regression_c8")["verdict"] == "pass"
    assert set(d.allocation) == set(ORDER) and sum(d.allocation.values()) == pytest.approx(1)
    # a round without the c=8 level still counts for c=1; c=8 keeps its first verdict
    d2 = decide([BASE, result(seed=7, n1=3, s8=None)],
                [result(1.30, 1.3, seed=6), result(1.30, None, seed=8)])
    assert rule(d2, "no_regression_c8")["look"] == 1 and d2.rounds == 2


def test_bimodal_tpot_is_judged_at_the_median_and_gets_the_requests() -> None:
    # n-gram-like: chat 1.0x, code 1.15x, summarization 2x, repetitive 3x. Throughput gains
    # >30% but the TPOT p50 (inside "code": 8 + 12 of 52 prompts are faster) improves ~13%.
    sp = {"chat": 1.0, "code": 1.15, "summarization": 2.0, "repetitive": 3.0}
    bases = [result(seed=10 + i, n1=2) for i in range(4)]
    cands = [result(sp, 1.4, seed=20 + i) for i in range(4)]
    d = decide(bases, cands)
    assert d.decision == "disable", d.reason
    assert rule(d, "tpot_p50_reduction_c1")["measured"] < 0.2
    assert rule(d, "throughput_gain_c1")["measured"] > 0.3
    # while open, the next round's candidate requests go to the category at the median
    sp2 = {"chat": 1.0, "code": 1.25, "summarization": 2.0, "repetitive": 3.0}
    d = decide(result(seed=30, n1=2), result(sp2, 1.4, seed=31))
    assert d.decision == "inconclusive", d.reason
    assert rule(d, "tpot_p50_reduction_c1")["verdict"] == "unclear"
    assert max(d.allocation, key=lambda c: d.allocation[c]) == "code"


@pytest.mark.parametrize("c8", [0.97, 1.0, 1.05])
def test_neutral_c8_keeps_with_noise(c8: float) -> None:
    """A clear c=1 gain with a neutral c=8 (or one 3% slower: within the 10% tolerance)
    under 5% request and 3% run noise keeps; the c=8 rule is never what disables it."""
    pol = GatePolicy()
    kept = 0
    for seed in range(40):
        bases: list[dict[str, Any]] = []
        cands: list[dict[str, Any]] = []
        for rnd in range(pol.max_rounds):
            bases.append(result(seed=1000 * seed + rnd, noise=0.05, run_noise=0.03, n1=3))
            cands.append(result(1.8, c8, seed=1000 * seed + 500 + rnd, noise=0.05,
                                run_noise=0.03))
            d = decide(bases, cands, pol)
            if d.decision != "inconclusive":
                break
        assert rule(d, "no_regression_c8")["verdict"] == "pass", d.reason
        kept += d.decision == "keep"
    assert kept >= 39, kept


def test_regression_beyond_tolerance_disables_with_noise() -> None:
    pol = GatePolicy()
    disabled = 0
    for seed in range(30):
        bases: list[dict[str, Any]] = []
        cands: list[dict[str, Any]] = []
        for rnd in range(pol.max_rounds):
            bases.append(result(seed=1000 * seed + rnd, noise=0.05, run_noise=0.03, n1=3))
            cands.append(result(1.6, 0.7, seed=1000 * seed + 500 + rnd, noise=0.05,
                                run_noise=0.03))
            d = decide(bases, cands, pol)
            if d.decision != "inconclusive":
                break
        disabled += d.decision == "disable" and d.code == "c8_regression"
    assert disabled == 30


def test_the_last_look_decides_every_open_rule_by_its_sign() -> None:
    """At the round limit a rule still open goes by its sign at the middle of its zone, with
    the chance of being wrong for a truth outside the zone reported: no open rule is left for
    a decision outside the error budget."""
    b = result(seed=1, n1=3, noise=0.0)
    early = GatePolicy(max_rounds=2, indifference=0.0)
    for s1, want in ((1.36, "keep"), (1.25, "disable")):
        c = result(s1, 1.6, seed=3, noise=0.0)
        d = decide(b, c, early)
        assert rule(d, "throughput_gain_c1")["verdict"] == "unclear"
        assert d.decision == "inconclusive" and d.code == "more_rounds" and d.pending == (1,)
        d = decide(b, c, GatePolicy(max_rounds=1, indifference=0.0))  # now the round limit
        gain = rule(d, "throughput_gain_c1")
        assert gain["basis"] == "sign" and gain["verdict"] == ("pass" if want == "keep"
                                                               else "fail")
        assert d.decision == want and d.code == "round_limit" and d.conservative
        assert "decided by its sign" in d.reason and d.pending == ()
        assert 0.0 <= gain["error_bound"] <= 0.5 and "at most" in d.reason


def test_an_open_c8_rule_at_the_round_limit_goes_by_the_middle_of_its_zone() -> None:
    b = result(seed=1, n1=3, noise=0.0)
    pol = GatePolicy(max_rounds=1)
    for s8, want in ((0.87, "keep"), (0.84, "disable")):  # zone 0.81..0.90, middle 0.855
        c = result(2.0, s8, seed=3, noise=0.0, run_noise=0.0)
        d = decide(b, c, pol)
        r8 = rule(d, "no_regression_c8")
        assert r8["basis"] == "sign" and d.decision == want, (s8, d.reason)


def test_zone_width_changes_what_is_decided_early() -> None:
    wide, narrow = GatePolicy(indifference=0.2), GatePolicy(indifference=0.0)
    c = result(1.42, 1.3, seed=9, noise=0.05)
    b = result(seed=10, n1=3, noise=0.05)
    assert rule(decide(b, c, wide), "throughput_gain_c1")["verdict"] != "unclear"
    assert rule(decide(b, c, narrow), "throughput_gain_c1")["verdict"] == "unclear"


def test_estimated_tokens_hold() -> None:
    cand = result(2.0, 1.6, seed=2)
    cand["concurrency"]["1"]["tokens_estimated"] = 4
    d = decide(BASE, cand)
    assert d.decision == "inconclusive" and d.held and d.code == "tokens_estimated"
    assert "tokens estimated" in d.reason and not d.rules
    calls: list[int] = []
    d = decide_adaptive(lambda arm, i, lv: calls.append(i) or (  # type: ignore[func-returns-value]
        BASE if arm == "baseline" else cand))
    assert d.held and calls == [0, 0]


def test_level_figures_without_records() -> None:
    def bare(thr: float, tpot: float, thr8: float) -> dict[str, Any]:
        return {"concurrency": {"1": {"throughput_tok_s": thr, "tpot_ms_p50": tpot},
                                "8": {"throughput_tok_s": thr8, "tpot_ms_p50": tpot}}}
    d = decide(bare(20, 50, 100), bare(40, 25, 160))
    assert d.decision == "keep" and "1+1 requests" in rule(d, "throughput_gain_c1")["method"]


def test_policy_is_data(tmp_path: Path) -> None:
    pol = tmp_path / "pol.yaml"
    pol.write_text("keep_min_throughput_gain: 0.5\nmax_rounds: 2\n")
    p = load_policy(pol)
    assert p.keep_min_throughput_gain == 0.5 and p.max_rounds == 2
    assert decide(BASE, result(1.25, 1.4, seed=2), p).decision == "disable"


@pytest.mark.parametrize(("text", "match"), [
    ("bogus: 1\n", "unknown field 'bogus'"),
    ("max_rounds: 1.5\n", "must be an integer"),
    ("confidence: 2\n", "confidence"),
    ("keep_min_throughput_gain: high\n", "must be a number"),
    ("[1, 2]\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
])
def test_bad_policy(tmp_path: Path, text: str, match: str) -> None:
    pol = tmp_path / "pol.yaml"
    pol.write_text(text)
    with pytest.raises(GateError, match=match) as ei:
        load_policy(pol)
    assert "\n" not in str(ei.value)


def test_malformed_results(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="throughput_tok_s"):
        decide({"concurrency": {"1": {"throughput_tok_s": "x"}}}, BASE)
    with pytest.raises(GateError, match="concurrency"):
        decide({"concurrency": {}}, BASE)
    with pytest.raises(GateError, match="different max_tokens"):
        other = result(2.0, 1.5)
        other["config"]["max_tokens"] = 128
        decide(BASE, other)
    p = tmp_path / "bad.json"
    for text, match in (("{not json", "not valid JSON"), ("[]", "empty list"),
                        ('{"a": 1}', "missing field 'concurrency'"),
                        ('{"concurrency": {"1": {"requests": 3}}}', "requests must be a list")):
        p.write_text(text)
        with pytest.raises(GateError, match=match) as ei:
            load_result(p)
        assert "\n" not in str(ei.value)
    with pytest.raises(GateError, match="cannot read"):
        load_result(tmp_path / "missing.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps([BASE, BASE]))  # rounds of one arm in one file
    assert isinstance(load_result(good), list)


def test_adaptive_measures_only_what_is_open() -> None:
    calls: list[tuple[str, int, tuple[int, ...]]] = []

    def run(arm: str, i: int, levels: tuple[int, ...]) -> dict[str, Any]:
        calls.append((arm, i, levels))
        if arm == "baseline":
            return result(seed=i, n1=3, s8=1.0 if 8 in levels else None)
        return result(1.33, 1.5 if 8 in levels else None, seed=100 + i)

    d = decide_adaptive(run, GatePolicy(max_rounds=3))
    assert d.decision in ("keep", "disable") and d.rounds == len(calls) // 2
    assert calls[0][2] == (1, 8) and all(lv == (1,) for _, i, lv in calls if i > 0)


def test_adaptive_stops_early() -> None:
    d = decide_adaptive(lambda arm, i, lv: BASE if arm == "baseline" else result(
        2.0, 1.6, seed=2))
    assert d.decision == "keep" and d.rounds == 1 and not d.conservative
    seen: list[int] = []
    d = decide_adaptive(lambda arm, i, lv: seen.append(i) or (  # type: ignore[func-returns-value]
        BASE if arm == "baseline" else result(1.05, 1.1, seed=3)))
    assert d.decision == "disable" and d.rounds == 1 and seen == [0, 0]


def test_round_bench_allocates_the_candidates_keep_level() -> None:
    bs, pol = BenchSettings(), GatePolicy()
    r0 = round_bench(bs, pol, "candidate", 0)
    assert r0.levels == (1, 8) and r0.requests == (4, 8) and r0.offsets == (0, 0)
    assert round_bench(bs, pol, "baseline", 1).requests == (3, 8)
    assert round_bench(bs, pol, "baseline", 1).offsets == (3, 8)
    # the keep level's scale is the candidate's: the baseline's c=1 runs only time its steps
    assert round_bench(bs, pol, "baseline", 1, scale={1: 2.0, 8: 2.0}).requests == (3, 16)
    assert round_bench(bs, pol, "candidate", 1, scale={1: 2.0}).requests == (8, 8)
    assert round_bench(bs, pol, "baseline", 1, scale={1: 1.0}, baseline_scale=2.0).requests \
        == (6, 8)
    assert round_bench(bs, pol, "candidate", 1, baseline_scale=2.0).requests == (4, 8)
    r = round_bench(bs, pol, "candidate", 1, (1,), {"code": 0.9, "chat": 0.1},
                    used=["code-01", "code-02"])
    assert r.levels == (1,) and r.ids == (("code-03", "code-04", "code-05", "code-06"),)
    r = round_bench(bs, pol, "candidate", 1, (1, 8), {"code": 0.6, "chat": 0.4})
    assert r.ids == (("code-01", "code-02", "chat-01", "chat-02"), ()) and r.requests == (4, 8)
    assert pick({"code": 1.0}, 2, []) == ("code-01", "code-02")


@pytest.mark.parametrize(("candidate", "code"), [
    (result(2.0, 1.6, seed=2), 0),      # keep
    (result(0.8, 1.0, seed=3), 3),      # disable
    (result(1.20, 1.2, seed=5), 4),     # inconclusive
])
def test_cli_gate_exits_by_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    candidate: dict[str, Any], code: int) -> None:
    (tmp_path / "b.json").write_text(json.dumps(BASE))
    (tmp_path / "c.json").write_text(json.dumps(candidate))
    rc = main(["gate", str(tmp_path / "b.json"), str(tmp_path / "c.json")])
    assert rc == code
    assert json.loads(capsys.readouterr().out)["decision"] == {
        0: "keep", 3: "disable", 4: "inconclusive"}[code]


def test_cli_gate_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b.json").write_text("{not json")
    rc = main(["gate", str(tmp_path / "b.json"), str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1
