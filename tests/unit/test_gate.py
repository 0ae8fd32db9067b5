from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from specdec.cli import main
from specdec.errors import GateError
from specdec.gate import decide, decide_adaptive, load_policy, load_result
from specdec.plan_types import GatePolicy

N_TOK = 128


def level(thr: float, tpot: float, n: int, spread: float, noise: float,
          seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        # per-prompt variation shared by both arms (the paired design cancels it) and noise
        t = tpot * (1 + spread * ((i * 7) % 5 - 2) / 2) * (1 + noise * rng.uniform(-1, 1))
        reqs.append({"index": i, "prompt_id": f"p{i}", "category": "chat", "tpot_ms": t,
                     "ttft_ms": 50.0, "e2el_ms": 50.0 + t * (N_TOK - 1),
                     "output_tokens": N_TOK, "error": None})
    return {"throughput_tok_s": thr, "tpot_ms_p50": tpot, "requests": reqs}


def result(thr1: float, tpot1: float, thr8: float, n: int = 30, spread: float = 0.1,
           noise: float = 0.005) -> dict[str, Any]:
    seed = int(thr1 * 1000 + tpot1)
    return {"config": {"max_tokens": N_TOK, "endpoint": "chat", "requests": n},
            "concurrency": {"1": level(thr1, tpot1, n, spread, noise, seed),
                            "8": level(thr8, tpot1 * 1.2, n, spread, noise, seed + 1)}}


BASE = result(20.0, 50.0, 100.0)


def rule(d: Any, name: str) -> dict[str, Any]:
    return next(r for r in d.to_dict()["rules"] if r["name"] == name)


def test_keep() -> None:
    d = decide(BASE, result(28.0, 35.0, 105.0))
    assert d.decision == "keep", d.reason
    r = rule(d, "throughput_gain_c1")
    assert r["measured"] == pytest.approx(0.4) and r["threshold"] == 0.3
    assert r["verdict"] == "pass" and r["ci"][0] >= 0.3 and "paired-requests(30)" in r["method"]
    t = rule(d, "tpot_p50_reduction_c1")
    assert t["measured"] == pytest.approx(0.3, abs=0.01) and t["n"] == 30
    assert {r["name"] for r in d.to_dict()["rules"]} == {
        "throughput_gain_c1", "tpot_p50_reduction_c1", "min_gain_c1", "no_regression_c8"}


def test_disable_low_gain() -> None:
    d = decide(BASE, result(21.0, 48.0, 101.0))
    assert d.decision == "disable" and "below 10%" in d.reason


def test_disable_c8_regression() -> None:
    d = decide(BASE, result(30.0, 30.0, 80.0))
    assert d.decision == "disable" and "c=8" in d.reason


def test_between_thresholds_is_inconclusive_and_keep_impossible() -> None:
    d = decide(BASE, result(24.0, 40.0, 101.0))
    assert d.decision == "inconclusive" and not d.keep_possible


def test_tpot_not_enough_is_not_keep() -> None:
    d = decide(BASE, result(28.0, 45.0, 101.0))
    assert d.decision == "inconclusive"
    assert rule(d, "tpot_p50_reduction_c1")["verdict"] == "fail"


def test_noisy_pairs_near_threshold_are_unclear() -> None:
    noisy_b = result(20.0, 50.0, 100.0, n=12, noise=0.3)
    d = decide(noisy_b, result(26.2, 39.0, 110.0, n=12, noise=0.3))
    assert d.decision == "inconclusive" and d.keep_possible


def test_rounds_straddle_inconclusive() -> None:
    bases = [result(20.0, 50.0, 100.0), result(20.0, 50.0, 100.0)]
    cands = [result(22.0, 35.0, 101.0), result(32.0, 35.0, 101.0)]
    assert decide(bases, cands).decision == "inconclusive"


def test_policy_is_data(tmp_path: Path) -> None:
    pol = tmp_path / "pol.yaml"
    pol.write_text("keep_min_throughput_gain: 0.5\nmax_rounds: 2\n")
    p = load_policy(pol)
    assert p.keep_min_throughput_gain == 0.5 and p.max_rounds == 2
    assert decide(BASE, result(28.0, 35.0, 105.0), p).decision == "inconclusive"


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
        other = result(28.0, 35.0, 105.0)
        other["config"]["max_tokens"] = 64
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


def test_adaptive_rounds_then_conservative() -> None:
    calls: list[tuple[str, int]] = []

    def run(arm: str, i: int) -> dict[str, Any]:
        calls.append((arm, i))
        if arm == "baseline":
            return result(20.0, 50.0, 100.0, n=12, noise=0.3)
        return result(26.2, 39.0, 110.0, n=12, noise=0.3)

    d = decide_adaptive(run, GatePolicy(max_rounds=2))
    assert d.decision == "disable" and d.conservative and "inconclusive after 2" in d.reason
    assert calls == [("baseline", 0), ("candidate", 0), ("baseline", 1), ("candidate", 1)]


def test_adaptive_stops_early() -> None:
    d = decide_adaptive(lambda arm, i: BASE if arm == "baseline" else result(28, 35, 105))
    assert d.decision == "keep" and d.rounds == 1 and not d.conservative
    seen: list[int] = []
    d = decide_adaptive(lambda arm, i: seen.append(i) or (  # type: ignore[func-returns-value]
        BASE if arm == "baseline" else result(24.0, 40.0, 101.0)))
    assert d.decision == "disable" and d.conservative and d.rounds == 1
    assert "out of reach" in d.reason and seen == [0, 0]


def test_gate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b, c, out = tmp_path / "b.json", tmp_path / "c.json", tmp_path / "d.json"
    b.write_text(json.dumps(BASE))
    c.write_text(json.dumps(result(28.0, 35.0, 105.0)))
    assert main(["gate", str(b), str(c), "--json", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "keep"
    assert json.loads(out.read_text())["decision"] == "keep"
    out.unlink()
    c.write_text('{"concurrency": ')
    assert main(["gate", str(b), str(c), "--json", str(out)]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and "not valid JSON" in cap.err
    assert not out.exists()
