"""The gate's robust estimators, its noise estimates and its sample-size plan
(specdec.gate.estimators,
specdec.gate.sequential), on synthetic bench results (tests/unit/test_gate.py's helper)."""

from __future__ import annotations

import copy
import math
import random
import statistics

import pytest
from test_gate import BASE, result

from specdec.gate.decide import decide, observations
from specdec.gate.estimators import Estimate, Obs, arm_median, below_gap, huber, pairwise_sd, timing
from specdec.gate.sequential import bounds, closing_se, next_scale, projected_var
from specdec.plan.types import GatePolicy


def _gain(d) -> float:  # type: ignore[no-untyped-def]
    return next(r.measured for r in d.rules if r.name == "throughput_gain_c1")


def test_huber_location_and_pairwise_sd_survive_a_stray_value() -> None:
    assert huber([0.0, 0.01, -0.01, 1.1], 0.05) == pytest.approx(0.0, abs=0.03)
    assert huber([0.0, 1.1, 0.02], 0.05) == pytest.approx(0.02, abs=0.03)
    rng = random.Random(1)
    est = [pairwise_sd([[rng.gauss(0, 0.1) for _ in range(n)] for n in (3, 4)])
           for _ in range(3000)]
    assert statistics.median(est) == pytest.approx(0.1, rel=0.1)  # unbiased for runs of 3-4
    clean = [[0.0, 0.1, -0.1, 0.05], [0.02, -0.05, 0.08]]
    dirty = [[0.0, 0.1, -0.1, 1.1], [0.02, -0.05, 0.08]]
    assert pairwise_sd(dirty) < 1.6 * pairwise_sd(clean)


@pytest.mark.parametrize("arm", ["baseline", "candidate"])
def test_a_stray_slow_request_does_not_swing_the_decision(arm: str) -> None:
    base, cand = copy.deepcopy(BASE), result(2.0, 1.6, seed=2)
    clean = decide(base, cand)
    hit = base if arm == "baseline" else cand
    r = hit["concurrency"]["1"]["requests"][1]
    r["e2el_ms"] = 20.0 + (r["e2el_ms"] - 20.0) * 3  # one request 3x slower
    r["tpot_ms"] *= 3
    stray = decide(base, cand)
    assert stray.decision == clean.decision == "keep"
    assert _gain(stray) == pytest.approx(_gain(clean), abs=0.06)
    # counted per request (no chunk records), the same stray moves the estimate far more
    assert abs(_gain(decide(_no_chunks(base), _no_chunks(cand))) - _gain(clean)) > 0.15


def _no_chunks(res: dict) -> dict:  # type: ignore[type-arg]
    out = copy.deepcopy(res)
    for lvl in out["concurrency"].values():
        for r in lvl["requests"]:
            r.pop("chunks", None)
    return out


def test_a_category_measured_once_takes_the_spread_between_requests_of_the_others() -> None:
    # one code request: its own chunks say nothing of how far its prompt lies from the code
    # prompts' mean; the chat requests' spread (sd 0.112) is its prior, not the model's 0.05
    offs = (-0.15, -0.05, 0.0, 0.05, 0.15)
    obs = [Obs("chat", 0, 48.0, 2.4, tpot=0.05 * math.exp(d)) for d in offs]
    obs.append(Obs("code", 0, 48.0, 2.4, tpot=0.04))
    fig = arm_median(obs, {"chat": 1.0, "code": 1.0}, 0.05)
    assert fig.sd["code"] == pytest.approx(math.sqrt(0.0125), rel=0.01)
    assert fig.sd["chat"] == pytest.approx(math.sqrt(0.0125), rel=0.01)
    # the allocation then sees the code category's uncertainty and measures it again
    score = fig.allocation_score()
    assert score["code"] > 0.5 * score["chat"]


def test_two_stray_slow_requests_of_four_do_not_move_the_runs_step_time() -> None:
    # 3% of requests 3x slow: two of a run's four now and then (0.5% of runs), where a
    # median of four follows them half-way
    assert below_gap([0.0, 0.03, 1.1, 1.15], 0.3) == [0.0, 0.03]
    assert below_gap([0.0, 0.1, 0.2, 0.35], 0.3) == [0.0, 0.1, 0.2, 0.35]  # no gap: all
    step = math.log(0.05)

    def obs(offs: tuple[float, ...]) -> list[Obs]:
        return [Obs("chat", 0, 48.0, 48 * 0.05 * math.exp(d), steps=48.0) for d in offs]

    t = timing({"candidate": obs((0.0, 0.02, 1.1, 1.12)), "baseline": obs((0.0, 0.01, 0.02))},
               0.05, 0.03)
    assert t.location[("candidate", 0)] == pytest.approx(step + 0.01, abs=0.005)
    assert t.count[("candidate", 0)] == 2  # its location's variance from what it rests on


def test_a_two_peaked_tpot_measured_once_per_category_is_not_taken_as_known() -> None:
    # n-gram at look 1: two categories accept nothing (TPOT 70 ms), two a lot (25 ms), one
    # request each; each request's own chunks say its spread is tiny, but where the mixture's
    # median falls between the peaks depends on the spreads no category has shown: they are
    # read from the categories paired in order (collapsed strata), pooled with the chunks'
    tpots = {"chat": 0.070, "code": 0.066, "summarization": 0.030, "repetitive": 0.022}
    obs = [Obs(c, 0, 48.0, 48 * t, tpot=t, intrinsic=0.0004) for c, t in tpots.items()]
    fig = arm_median(obs, dict.fromkeys(tpots, 1.0), 0.05)
    pairs = (math.log(70 / 66) ** 2 + math.log(30 / 22) ** 2) / 2
    # no chunk records: each request's model is the request noise and its chunks' spread
    assert fig.sd["chat"] ** 2 == pytest.approx((4 * (0.05 ** 2 + 0.0004) + pairs) / 6)
    assert math.sqrt(fig.var) > 0.06, fig.var
    # once a category is measured twice, its own spread speaks instead
    assert arm_median([*obs, obs[0]], dict.fromkeys(tpots, 1.0), 0.05).sd["code"] < fig.sd["code"]


def test_noise_is_estimated_from_what_was_measured_with_the_prior_as_a_floor() -> None:
    pol = GatePolicy()
    quiet = [observations([result(1.5, seed=s, noise=0.01)], 1, "x") for s in (1, 2)]
    loud = [observations([result(1.5, seed=s, noise=0.15)], 1, "x") for s in (1, 2)]
    t = timing({"candidate": quiet[0], "baseline": quiet[1]}, pol.request_noise, pol.run_noise)
    assert t.sd == pol.request_noise and t.run_sd == pol.run_noise  # the floors
    t = timing({"candidate": loud[0], "baseline": loud[1]}, pol.request_noise, pol.run_noise)
    assert t.sd_raw > 2 * pol.request_noise
    assert t.run_sd == pytest.approx(pol.run_noise * t.sd / pol.request_noise)  # scaled prior


def test_runs_that_disagree_raise_the_run_noise() -> None:
    pol = GatePolicy()
    rounds = [result(1.5, seed=s, noise=0.02) for s in range(3)]
    obs: list[Obs] = []
    for i, res in enumerate(rounds):
        f = (1.0, 1.25, 0.8)[i]  # each run's speed shifts as a whole
        for r in res["concurrency"]["1"]["requests"]:
            r["e2el_ms"] = 20.0 + (r["e2el_ms"] - 20.0) * f
        obs += [Obs(o.category, i, o.tokens, o.seconds, o.tpot, o.intrinsic, o.key, o.ttft,
                    o.steps) for o in observations([res], 1, "x")]
    t = timing({"candidate": obs, "baseline": []}, pol.request_noise, pol.run_noise)
    assert t.run_df == 2 and t.run_sd > 0.15


def test_more_noise_than_planned_asks_for_more_requests_not_an_early_answer() -> None:
    pol = GatePolicy()
    quiet = decide(BASE, result(1.3, 1.6, seed=6, noise=0.05))
    loud_b = result(seed=1, n1=3, noise=0.15)
    loud = decide(loud_b, result(1.3, 1.6, seed=6, noise=0.15))
    assert quiet.decision == loud.decision == "inconclusive"
    assert quiet.scale.get(1, 1.0) == 1.0
    # the loud baseline's step time is most of the variance: its requests grow, not only the
    # candidate's
    assert loud.baseline_scale > 1.0 and loud.to_dict()["baseline_scale"] == loud.baseline_scale
    assert quiet.baseline_scale == 1.0
    gain = next(r for r in loud.rules if r.name == "throughput_gain_c1")
    assert gain.se > 1.5 * next(r.se for r in quiet.rules if r.name == "throughput_gain_c1")
    keep, guard = bounds(pol, False), bounds(pol, True)
    assert keep.down[-1] > keep.up  # a wrong disable gets the smaller error budget
    assert keep.down[0] > keep.down[-1]  # and the first looks, whose noise is least known, more
    # a c=8 fail disables too: the same budget and shape as a c=1 rule's wrong disable
    assert guard.down == keep.down and guard.up == keep.up
    assert closing_se(guard) < closing_se(keep) / 2 * 1.2
    # closed, the middle leaves each error its own z: a truth at either edge of the zone
    se = closing_se(keep)
    assert (keep.mid + pol.indifference) / se == pytest.approx(keep.up)
    assert (pol.indifference - keep.mid) / se == pytest.approx(keep.down[-1])


def test_projected_variance_shrinks_with_rounds_and_requests() -> None:
    pol = GatePolicy()
    d = decide(BASE, result(1.3, 1.6, seed=6, noise=0.05))
    obs_c = observations([result(1.3, 1.6, seed=6, noise=0.05)], 1, "c")
    assert obs_c
    from specdec.gate.decide import _rule, _specs  # the rule's estimate, as decide computes it
    spec = _specs(pol, True)[0]
    got = _rule(spec, obs_c, observations([BASE], 1, "b"), None, pol, 2.39, 1)
    assert got is not None
    e = got[1]
    v1 = projected_var(e, 1, 1.0, 1.0)
    assert v1 < e.se ** 2 and projected_var(e, 3, 1.0, 1.0) < v1
    assert projected_var(e, 1, 2.0, 1.0) < v1
    assert next_scale(e, pol, bounds(pol, False), 1, 1.0) == (1.0, 1.0)
    assert d.rounds == 1 and math.isfinite(e.se)


def test_a_rule_leaning_to_fail_is_measured_alone_and_without_more_requests() -> None:
    # c=1 well below the keep thresholds, c=8 open near its tolerance: one failed rule
    # disables, so the next round measures c=1 only, and one plain round can close it there
    d = decide(result(seed=1, n1=3, noise=0.1), result(1.05, 0.95, seed=6, noise=0.1))
    open_ = {r.name: r for r in d.rules if r.verdict == "unclear"}
    assert set(open_) == {"throughput_gain_c1", "tpot_p50_reduction_c1", "no_regression_c8"}
    assert open_["throughput_gain_c1"].distance < -0.2
    assert d.decision == "inconclusive" and d.pending == (1,)
    assert d.scale == {} and d.baseline_scale == 1.0
    # no rule leaning to fail: every open level, as before
    d = decide(result(seed=1, n1=3, noise=0.1), result(1.45, 0.95, seed=6, noise=0.1))
    assert d.decision == "inconclusive" and d.pending == (1, 8), d.rules


def test_the_plan_grows_the_arm_whose_variance_it_is() -> None:
    pol = GatePolicy()
    b = bounds(pol, False)
    # the candidate's acceptance is most of the request part: the candidate grows alone
    e = Estimate(1.3, 1.0, 1.7, 0.11, 7, 1, "", {}, None, 0.0018, 0.11 ** 2 - 0.0018)
    assert next_scale(e, pol, b, 1, 1.0, 0.05, 0.0) == (2.0, 1.0)
    # the baseline's step time is most of it: the baseline grows instead
    assert next_scale(e, pol, b, 1, 1.0, 0.95, 0.0) == (1.0, 2.0)
    # at the guard level (no split) both arms by one factor
    assert next_scale(e, pol, b, 1, 1.0, 0.0, 0.0) == (2.0, 2.0)
    # far below the zone: one plain round reaches the fail boundary where θ̂ lies
    assert next_scale(e, pol, b, 1, 1.0, 0.05, -0.35) == (1.0, 1.0)
    assert projected_var(e, 1, 1.0, 1.0, 0.05) > projected_var(e, 1, 2.0, 1.0, 0.05) > \
        projected_var(e, 1, 2.0, 1.0, 0.05, 2.0)
