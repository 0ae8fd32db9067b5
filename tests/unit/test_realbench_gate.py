"""benchmarks/realbench's gate and tune sections, their pure parts: the truth's estimators and
classification, agreement counting, the results file's resume logic, the schedules of gate runs,
truth blocks and sweep passes, and the printed tables."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from realbench import gatebench, gatereport  # noqa: E402
from realbench.gatebench import bench_config, next_step, tag  # noqa: E402
from realbench.results import Results, obs_of  # noqa: E402
from realbench.truth import (  # noqa: E402
    RULES,
    agreement,
    classify,
    median_tpot,
    rate,
    ratios,
    rule_side,
    thetas,
    truth_of,
)
from realbench.tunebench import c1_k, ks_arg, sweep_todo  # noqa: E402

from specdec.bench.prompts import builtin_prompts  # noqa: E402
from specdec.gate.rounds import round_bench  # noqa: E402
from specdec.plan.planner import baseline  # noqa: E402
from specdec.plan.types import K_MAX, GatePolicy  # noqa: E402
from tests.unit.verify_fakes import FAST, PLAIN, PLAN, SLOW8  # noqa: E402

POL = GatePolicy()
W = {"chat": 16.0, "code": 16.0, "summarization": 12.0, "repetitive": 8.0}
CATS = tuple(W)


def _obs(speed: dict[str, float], tpot: float, n: int = 1) -> list[list[Any]]:
    """48 tokens per request at ``speed[cat]`` tok/s; TPOT ``tpot`` s."""
    return [[c, 48.0, 48.0 / speed[c], tpot] for c in CATS for _ in range(n)]


def _block(c1: float, tpot: float, c8: float, jitter: float = 1.0) -> dict[str, Any]:
    base = dict.fromkeys(CATS, 10.0 * jitter)
    return {"baseline": {"1": _obs(base, 0.1), "8": _obs(dict.fromkeys(CATS, 5.0), 0.2)},
            "candidate": {"1": _obs({c: v * c1 for c, v in base.items()}, 0.1 * tpot),
                          "8": _obs(dict.fromkeys(CATS, 5.0 * c8), 0.2)}}


def _truth_recs(c1: float, tpot: float, c8: float, n: int = 6, bench_s: float = 100.0
                ) -> list[dict[str, Any]]:
    return [{"kind": "truth", "config": "x", "index": i, "seed": 1, "commit": "abc",
             "arms": _block(c1, tpot, c8, 1.0 + 0.02 * (i % 3 - 1)), "bench_s": bench_s}
            for i in range(n)]


# -- the truth ----------------------------------------------------------------------------------
def test_rate_is_stratified_by_the_populations_weights() -> None:
    obs = [["chat", 48.0, 4.8, None], ["repetitive", 48.0, 1.2, None],
           ["repetitive", 48.0, 1.2, None], ["repetitive", 48.0, 1.2, None]]
    # chat weighs 16, repetitive 8: (16*48 + 8*48) / (16*4.8 + 8*1.2), not 4*48 / 8.4
    assert rate(obs, W) == pytest.approx(24 * 48 / (16 * 4.8 + 8 * 1.2))
    assert rate(obs, {}) == pytest.approx(96 / 6.0)  # unknown weights: equal per category


def test_median_tpot_weighs_each_category_by_its_share_not_its_count() -> None:
    obs = [["chat", 1, 1, 0.05]] + [["repetitive", 1, 1, 0.01]] * 5
    assert median_tpot(obs, {"chat": 3.0, "repetitive": 1.0}) == 0.05
    assert median_tpot(obs, {}) == 0.01  # equal weights: the categories tie, the lower half wins
    with pytest.raises(ValueError):
        median_tpot([["chat", 1, 1, None]], W)


def test_thetas_and_sides_follow_the_policy() -> None:
    th = thetas({"c1": 1.3, "tpot": 0.8, "c8": 0.9}, POL)
    assert all(abs(v) < 1e-12 for v in th.values())
    th = thetas({"c1": 2.0, "tpot": 0.5, "c8": 1.0}, POL)
    assert th[RULES[0]] == pytest.approx(math.log(2.0 / 1.3))
    assert th[RULES[1]] == pytest.approx(math.log(0.8 / 0.5))
    assert th[RULES[2]] == pytest.approx(math.log(1.0 / 0.9))
    # a keep rule's zone is ±m around its threshold; the c=8 rule's is [-m, 0) only
    assert rule_side(RULES[0], 0.05, POL) == "zone" and rule_side(RULES[0], 0.11, POL) == "pass"
    assert rule_side(RULES[0], -0.11, POL) == "fail"
    assert rule_side(RULES[2], 0.0, POL) == "pass" and rule_side(RULES[2], -0.05, POL) == "zone"
    assert rule_side(RULES[2], -0.11, POL) == "fail"


def test_classify_keep_disable_zone() -> None:
    def cls(c1: float, tpot: float, c8: float) -> str:
        return classify(thetas({"c1": c1, "tpot": tpot, "c8": c8}, POL), POL)

    assert cls(2.0, 0.5, 1.0) == "keep"
    assert cls(0.8, 1.3, 0.7) == "disable"
    assert cls(2.0, 0.5, 0.7) == "disable"  # one rule below its zone disables
    assert cls(0.9, 0.75, 1.0) == "disable"  # TPOT within the zone, the gain far below it
    assert cls(1.35, 0.5, 1.0) == "zone"  # the gain inside its zone, nothing failing
    assert cls(2.0, 0.5, 0.87) == "zone"  # c=8 a little below the tolerance
    with pytest.raises(ValueError):
        classify({RULES[0]: 1.0}, POL)


def test_truth_of_recovers_the_ratios_with_a_block_interval() -> None:
    t = truth_of(_truth_recs(2.0, 0.5, 1.0), W, POL, boot=200)
    assert t is not None
    assert t.ratios["c1"] == pytest.approx(2.0) and t.ratios["tpot"] == pytest.approx(0.5)
    assert t.ratios["c8"] == pytest.approx(1.0)
    assert t.verdict == "keep" and t.firm and t.blocks == 6 and t.bench_s == 600.0
    lo, hi = t.ci["c1"]
    assert lo <= 2.0 <= hi
    assert truth_of([], W, POL) is None
    near = truth_of(_truth_recs(1.3 * math.exp(0.105), 0.5, 1.0), W, POL, boot=200)
    assert near is not None and near.verdict == "keep"
    assert ratios([_block(1.5, 1.0, 1.0)], W)["c1"] == pytest.approx(1.5)
    one = truth_of(_truth_recs(2.0, 0.5, 1.0, n=1), W, POL)
    assert one is not None and one.verdict == "keep" and not one.firm  # no interval: not firm


# -- agreement ----------------------------------------------------------------------------------
def _runs(*decisions: str) -> list[dict[str, Any]]:
    return [{"decision": d} for d in decisions]


def test_agreement_statuses() -> None:
    a = agreement(_runs(*["disable"] * 19, "keep"), "disable")
    assert (a.agree, a.runs, a.status) == (19, 20, "met") and a.rate == 0.95
    assert agreement(_runs(*["disable"] * 18, "keep", "keep"), "disable").status == "NOT met"
    assert agreement(_runs("disable", "disable"), "disable").status == "incomplete (2 of 20)"
    assert agreement(_runs(*["keep"] * 20), "zone").status.startswith("n/a")
    assert agreement(_runs(*["keep"] * 20), None).status.startswith("incomplete (no truth")
    assert agreement(_runs(*["keep"] * 20), "keep", truth_complete=False).status == \
        "incomplete (truth budget)"
    assert agreement([], "keep").rate is None


# -- the results file ---------------------------------------------------------------------------
def test_results_resume_skips_what_is_done_and_survives_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    res = Results.load(path)
    res.append({"kind": "gate", "config": "ngram", "index": 0, "seed": 7, "commit": "abc"})
    res.append({"kind": "gate", "config": "ngram", "index": 2, "seed": 7, "commit": "abc"})
    res.append({"kind": "truth", "config": "ngram", "index": 0, "seed": 7, "commit": "abc"})
    with pytest.raises(ValueError):
        res.append({"kind": "gate", "config": "ngram", "index": 0})
    with pytest.raises(ValueError):
        res.append({"kind": "nope", "config": "ngram", "index": 9})
    with open(path, "a") as f:
        f.write('{"kind": "gate", "config": "ngram", "ind')  # a run killed mid-line
    again = Results.load(path)
    assert len(again.records) == 3 and again.count("gate", "ngram") == 2
    assert again.next_index("gate", "ngram") == 1 and again.next_index("gate", "eagle3") == 0
    assert again.has("truth", "ngram", 0) and not again.has("truth", "eagle3", 0)
    assert all("time" in r for r in again.records)
    again.append({"kind": "truth", "config": "ngram", "index": 1, "seed": 7, "commit": "abc"})
    third = Results.load(path)  # the record after the cut line is a line of its own
    assert len(third.records) == 4 and third.has("truth", "ngram", 1)


def test_obs_of_keeps_successful_requests() -> None:
    res = {"concurrency": {"1": {"requests": [
        {"category": "code", "output_tokens": 48, "e2el_ms": 4000.0, "tpot_ms": 70.0},
        {"category": "chat", "output_tokens": 48, "e2el_ms": 4000.0, "error": "boom"},
        {"category": "chat", "output_tokens": 0, "e2el_ms": 4000.0}]}}}
    assert obs_of(res, 1) == [["code", 48.0, 4.0, 0.07]]
    assert obs_of(res, 8) == []


# -- schedules ----------------------------------------------------------------------------------
def _g(bench_s: float, n: int) -> list[dict[str, Any]]:
    return [{"bench_s": bench_s}] * n


def test_next_step_interleaves_truth_with_the_gate_runs() -> None:
    assert next_step([], [], 20, 10, 4) == "gate"
    # one run of 100 s done: the truth is due 10 x 100 x 1/20 = 50 s and ceil(4/20) = 1 block
    assert next_step(_g(100, 1), [], 20, 10, 4) == "truth"
    assert next_step(_g(100, 1), _g(50, 1), 20, 10, 4) == "gate"
    assert next_step(_g(100, 20), _g(50, 19), 20, 10, 4) == "truth"
    assert next_step(_g(100, 20), _g(50, 20), 20, 10, 4) is None
    assert next_step(_g(100, 2), _g(400, 2), 2, 10, 2) == "truth"
    assert next_step(_g(100, 2), _g(500, 2), 2, 10, 2) is None
    assert next_step([], [], 0, 10, 2) == "truth"  # no gate runs asked: only min blocks
    assert next_step([], _g(1, 2), 0, 10, 2) is None


def test_sweep_todo_passes_rotate_and_stop_at_the_budget() -> None:
    ks = {1: 0, 2: 0, 3: 0}
    assert sweep_todo(ks, 0, 100, 2, 5) == [1, 2, 3]
    assert sweep_todo({1: 2, 2: 2, 3: 0}, 0, 100, 2, 5) == [3]  # resume inside a pass
    assert sweep_todo({1: 2, 2: 2, 3: 2}, 50, 100, 2, 5) == [2, 3, 1]  # pass 2, rotated
    assert sweep_todo({1: 2, 2: 2, 3: 2}, 100, 100, 2, 5) == []  # budget met, pass complete
    assert sweep_todo({1: 4, 2: 2, 3: 2}, 999, 100, 2, 5) == [2, 3]  # finish the pass first
    assert sweep_todo({1: 10, 2: 10, 3: 10}, 0, 100, 2, 5) == []  # max passes
    assert sweep_todo({}, 0, 1, 2, 5) == []


def test_bench_config_is_the_round_as_specdec_bench_reads_it() -> None:
    from specdec.gate.rounds import BenchSettings

    rb = round_bench(BenchSettings(), POL, "candidate", 1, allocation={"code": 1.0})
    cfg = bench_config("http://127.0.0.1:1", "m", rb, builtin_prompts())
    assert cfg.concurrency == (1, 8) and cfg.requests == rb.requests
    assert cfg.prompt_offset == rb.offsets and cfg.ramp_tokens == 32 and cfg.max_tokens == 48
    assert cfg.prompt_ids and cfg.prompt_ids[0][0] == 1 and len(cfg.prompt_ids[0][1]) == 4
    assert bench_config("http://x:1", "m", round_bench(BenchSettings(), POL, "baseline", 0),
                        builtin_prompts()).prompt_ids == ()
    assert len({len(tag("g", c, s, i)) for c in ("ngram", "eagle3", "3")
                for s in (1, 65535) for i in (0, 999)}) == 1
    assert c1_k({"k": 8, "k_by_batch": [[1, 2, 4], [3, 8, 0]]}) == 4 and c1_k({"k": 3}) == 3
    assert ks_arg("3,1,3") == [1, 3]
    for bad in ("", "0,2", f"1,{K_MAX + 1}"):  # k >= 10 would share k=1's prompt tags
        with pytest.raises(ValueError):
            ks_arg(bad)


# -- the tables ---------------------------------------------------------------------------------
def _gate_file(decisions: list[str], truth: tuple[float, float, float], n_truth: int,
               bench_s: float = 100.0) -> Results:
    res = Results(None)
    for i, d in enumerate(decisions):
        res.append({"kind": "gate", "config": "ngram", "index": i, "seed": 7, "commit": "c1",
                    "label": "ngram k=4", "decision": d, "code": "x", "rounds": 2,
                    "bench_s": 20.0})
    for r in _truth_recs(*truth, n=n_truth, bench_s=bench_s):
        res.append({**r, "config": "ngram"})
    return res


def test_gate_report_says_met_not_met_and_incomplete() -> None:
    def status(res: Results) -> str:
        return gatereport.gate_report(res, ["ngram"], W, 10.0).splitlines()[-1]

    keep = (2.0, 0.5, 1.0)
    assert status(_gate_file(["keep"] * 20, keep, 4)).endswith("| met |")
    assert "| NOT met |" in status(_gate_file(["keep"] * 18 + ["disable"] * 2, keep, 4))
    assert "incomplete (5 of 20)" in status(_gate_file(["keep"] * 5, keep, 2))
    short = _gate_file(["keep"] * 20, keep, 1, bench_s=150.0)  # 150 s < 10 x 20 s
    text = gatereport.gate_report(short, ["ngram"], W, 10.0)
    assert "incomplete (truth budget)" in text and "incomplete (150 of 200 s)" in text
    assert "+100.0%" in text and "commits c1 (20)" in text
    small = gatereport.gate_report(_gate_file(["keep"] * 2, keep, 2), ["ngram"], W, 1.0, 2)
    assert small.splitlines()[-1].endswith("| incomplete (2 of 20) |")


def _tune_file(speeds: dict[int, float], blocks: int = 2) -> Results:
    res = Results(None)
    res.append({"kind": "tune", "config": "ngram", "index": 0, "seed": 7, "commit": "c1",
                "label": "ngram k=4", "k_c1": 4, "bench_s": 10.0, "engine_starts": 3,
                "wall_s": 99.0, "measured": [{"k": 4, "rounds": 6}]})
    for k, speed in speeds.items():
        for i in range(blocks):
            b = _block(speed, 1.0, 1.0)
            res.append({"kind": "sweep", "config": f"ngram k={k}", "index": i, "seed": 7,
                        "commit": "c1", "bench_s": 30.0,
                        "arms": {a: {"1": v["1"]} for a, v in b.items()}})
    return res


def test_tune_report_fraction_of_the_best_k() -> None:
    speeds = {k: 1.0 + 0.05 * k for k in range(1, K_MAX + 1)}
    speeds[4], speeds[8] = 1.44, 1.6
    ks = list(speeds)
    text = gatereport.tune_report(_tune_file(speeds), ks, W, 10.0)
    assert "k=4 gives 90.0% of the best k's (k=8)" in text and "**NOT met**" in text
    assert f"480 bench s of 100 (10x the tuner's), {K_MAX} of the {K_MAX} k measured: " \
        "complete (" in text
    speeds[4] = 1.55  # 96.9% of the best
    assert "c=1 throughput (bar 95%): **met**" in gatereport.tune_report(
        _tune_file(speeds), ks, W, 10.0)
    part = gatereport.tune_report(_tune_file({2: 1.2, 4: 1.44, 8: 1.6}), [2, 4, 8], W, 10.0)
    assert "measured: incomplete" in part and "**incomplete** (so far: NOT met)" in part
    one = gatereport.tune_report(_tune_file(speeds, blocks=1), ks, W, 1.0)  # bar: 10x at least
    assert "240 bench s of 100 (10x" in one and "- (one block)" in one


# -- a gate run is the product's gate loop -----------------------------------------------------
def _served(rid: str, url: str, plan: Any) -> gatebench.Served:
    case = SimpleNamespace(id=f"{plan.model}: {rid}", plan=plan)
    return gatebench.Served(case, rid, SimpleNamespace(url=url), 0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("cand", "decision", "code"), [(FAST, "keep", "keep"),
                                                        (SLOW8, "disable", "c8_regression")])
def test_a_gate_run_is_run_gate_on_the_arms_engines(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cand: dict[str, Any], decision: str,
        code: str) -> None:
    calls: list[tuple[str, str]] = []

    def bench(cfg: Any) -> dict[str, Any]:
        calls.append((cfg.url, cfg.prompts.measured[0].text))
        return copy.deepcopy(cand if cfg.url == "http://cand" else PLAIN)

    monkeypatch.setattr(gatebench, "run_bench_sync", bench)
    monkeypatch.setattr(gatebench.device_time, "apply", lambda url, res: res)
    base, cnd = _served("b0", "http://base", baseline(PLAN)), _served("c0", "http://cand", PLAN)
    rec = gatebench.gate_run("ngram", base, cnd, 3, 7, "abc", tmp_path, log=lambda _: None)
    assert (rec["decision"], rec["code"], rec["rounds"]) == (decision, code, 1)
    assert [u for u, _ in calls] == ["http://cand", "http://base"]  # the candidate runs first
    assert rec["tag"] == tag("g", "ngram", 7, 3)
    assert [t.split(" ", 1)[0] for _, t in calls] == [f"[{rec['tag']}.01", f"[{rec['tag']}.02"]
    assert {r["name"] for r in rec["rules"]} == set(RULES)
