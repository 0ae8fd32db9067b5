"""Estimates and verdicts: the speed-up from live counters and the step cost, the gate's
indifference logic, hysteresis, the minimum of drafted tokens, speculation off."""

from __future__ import annotations

import math
import random

import pytest

from specdec.gate.decide import z_for
from specdec.plan.types import GatePolicy
from specdec.watch.estimate import estimate
from specdec.watch.gatefacts import Cost
from specdec.watch.verdict import (
    CANNOT_TELL,
    FAVOURABLE,
    MARGINAL,
    NO_TRAFFIC,
    NOT_PAYING,
    PAYING,
    Levels,
    Tracker,
    clears,
)
from specdec.watch.window import Sample, Window

POL = GatePolicy()
LV = Levels.of(POL, confirm=2, min_draft_tokens=1000)


def _sample(t: float, gen: float, acc: float, drafts: float, busy: dict[int, float],
            secs: float = 10.0) -> Sample:
    return Sample(t=t, wall_s=secs, device_s=secs,
                  counts={"generated": gen, "accepted": acc, "drafts": drafts,
                          "draft_tokens": drafts * 4, "requests": 1.0}, busy=busy)


def test_cost_interpolates_and_flags_extrapolation() -> None:
    c = Cost(((1, 1.1), (8, 1.5)), "t")
    assert c.at(1) == (pytest.approx(1.1), False)
    assert c.at(4.5)[0] == pytest.approx(1.3)
    v, extra = c.at(16)
    assert extra and v == pytest.approx(1.1 + 0.4 / 7 * 15)
    assert c.at(0.5)[1] is True


def test_speedup_is_tokens_per_step_over_the_cost_at_the_batch_mix() -> None:
    w = Window(1000)
    for i in range(5):  # E = 300 / 200 = 1.5 tokens per sequence-step
        w.add(_sample(i, gen=300, acc=100, drafts=100, busy={0: 2, 1: 4, 8: 4}))
    est = estimate(w, Cost(((1, 1.0), (8, 1.5)), "t"), 0.03, True)
    assert est.tokens_per_step == pytest.approx(1.5)
    assert est.al == pytest.approx(2.0) and est.rate == pytest.approx(0.25)
    assert est.batch_mix == {1: pytest.approx(0.5), 8: pytest.approx(0.5)}
    assert est.busy_share == pytest.approx(0.8)
    # half the busy time at b=1 (1.5x), half at b=8 (1.0x): S = 1.5 * (0.5/1 + 0.5/1.5)
    assert est.speedup == pytest.approx(1.5 * (0.5 + 0.5 / 1.5))
    assert est.se_log == pytest.approx(math.sqrt(2) * 0.03)  # samples agree: the model term
    assert est.tokens_s == pytest.approx(1500 / 50)


def test_speculation_off_uses_the_gates_tokens_per_step() -> None:
    w = Window(1000)
    for i in range(4):
        w.add(_sample(i, gen=200, acc=0, drafts=0, busy={1: 10}))
    est = estimate(w, Cost(((1, 1.05), (8, 1.4)), "t"), 0.03, False, gate_tokens_per_step=2.1)
    assert est.hypothetical and est.al is None
    assert est.speedup == pytest.approx(2.1 / 1.05)


def test_no_cost_no_speedup() -> None:
    w = Window(1000)
    w.add(_sample(0, 300, 100, 100, {1: 10}))
    assert estimate(w, None, 0.03, True).speedup is None


def test_window_slides_in_device_time_and_skips_deploys() -> None:
    w = Window(30)
    for i in range(6):
        w.add(_sample(i, 100, 10, 10, {1: 10}))
    assert len(w.samples) == 3 and w.device_s == 30
    w.samples[-1].deploying = True
    assert w.device_s == 20


def test_clearing_a_level_is_the_gates_test_and_the_estimate_beyond_the_edge() -> None:
    z, m = z_for(POL), POL.indifference
    assert clears(2.0, 0.01, 0.01, 1.3, 0.0, True, m, z)
    assert clears(1.0, 0.01, 0.01, 1.3, 0.0, False, m, z)
    assert not clears(1.3, 0.01, 0.01, 1.3, 0.0, True, m, z)  # on the level: no
    assert not clears(1.6, 0.5, 0.0, 1.3, 0.0, True, m, z)  # the gate would not pass it
    assert clears(1.3 * math.exp(m), 0.0, 0.0, 1.3, m, True, m, z)
    # above the zone, but not by more than the estimate's own sampling noise
    assert not clears(1.3 * math.exp(m + 0.01), 0.05, 0.02, 1.3, m, True, m, z)


def test_first_verdict_needs_the_minimum_of_drafted_tokens() -> None:
    t = Tracker()
    assert t.update(0, LV, 999, 2.0, 0.01, True) == NO_TRAFFIC
    assert t.update(1, LV, 1000, 2.0, 0.01, True) == PAYING
    # back to no traffic only below half the minimum (no flapping at the threshold)
    assert t.update(2, LV, 600, 2.0, 0.01, True) == PAYING
    assert t.update(3, LV, 400, 2.0, 0.01, True) == NO_TRAFFIC


def test_a_change_needs_confirming_looks_and_a_decisive_one() -> None:
    t = Tracker()
    t.update(0, LV, 5000, 1.6, 0.05, True)
    assert t.verdict == PAYING
    assert t.update(1, LV, 5000, 0.85, 0.02, True) == PAYING  # one look is not enough
    assert t.update(2, LV, 5000, 0.85, 0.02, True) == NOT_PAYING
    # in the floor's zone: the verdict stays
    for i in range(10):
        assert t.update(3 + i, LV, 5000, 1.15, 0.01, True) == NOT_PAYING
    # clearly above the floor's zone, below the keep level: marginal after two looks
    t.update(20, LV, 5000, 1.25, 0.001, True)
    assert t.update(21, LV, 5000, 1.25, 0.001, True) == MARGINAL
    # back into paying only from above the keep zone
    for i in range(5):
        assert t.update(30 + i, LV, 5000, 1.4, 0.001, True) == MARGINAL
    t.update(40, LV, 5000, 1.5, 0.001, True)
    assert t.update(41, LV, 5000, 1.5, 0.001, True) == PAYING
    assert [c["to"] for c in t.changes] == [PAYING, NOT_PAYING, MARGINAL, PAYING]
    assert t.total_changes == 4


def test_paying_is_left_below_the_keep_level_and_not_paying_below_the_floor() -> None:
    t = Tracker()
    t.update(0, LV, 5000, 1.5, 0.01, True)
    for i in range(5):
        assert t.update(1 + i, LV, 5000, 1.31, 0.01, True) == PAYING
    t.update(10, LV, 5000, 1.22, 0.005, True, se_noise=0.005)
    assert t.update(11, LV, 5000, 1.22, 0.005, True, se_noise=0.005) == MARGINAL
    # +9%: below the floor by more than the noise, the gate's keep rule failed
    t.update(20, LV, 5000, 1.05, 0.005, True, se_noise=0.005)
    assert t.update(21, LV, 5000, 1.05, 0.005, True, se_noise=0.005) == NOT_PAYING
    # +15%: in the floor's zone, not paying stays
    for i in range(5):
        assert t.update(30 + i, LV, 5000, 1.15, 0.005, True) == NOT_PAYING


def test_an_interrupted_streak_starts_again() -> None:
    t = Tracker()
    t.update(0, LV, 5000, 1.6, 0.01, True)
    t.update(1, LV, 5000, 0.85, 0.01, True)
    t.update(2, LV, 5000, 1.3, 0.01, True)  # inside the keep zone: not decisive, streak reset
    assert t.update(3, LV, 5000, 0.85, 0.01, True) == PAYING
    assert t.update(4, LV, 5000, 0.85, 0.01, True) == NOT_PAYING


def _steady(true_s: float, looks: int = 3000, sd: float = 0.25) -> Tracker:
    """Steady traffic: samples whose tokens per step scatter (sd per sample: requests of every
    category), a sliding window of 30 of them, the estimate and its SE as the watch computes
    them, a look per sample."""
    rng = random.Random(int(true_s * 1000))
    cost = Cost(((1, 1.0), (8, 1.0)), "t")
    w = Window(300)
    t = Tracker()
    for i in range(looks):
        e = max(1.0, true_s + rng.gauss(0, sd))
        w.add(_sample(i, gen=e * 200, acc=(e - 1) * 200, drafts=200, busy={1: 10}))
        est = estimate(w, cost, POL.run_noise, True)
        t.update(i, LV, 5000, est.speedup, est.se_log, True, full=len(w.samples) >= 30,
                 se_noise=est.se_noise or 0.0)
    return t


@pytest.mark.parametrize("true_s", [1.05, 1.1, 1.18, 1.2, 1.3, 1.43, 1.6])
def test_steady_traffic_never_goes_back_and_forth(true_s: float) -> None:
    """Anywhere, the levels and the zones' edges included: after the first verdict at most one
    change (a first verdict on the edge settling), never back to a verdict it left."""
    t = _steady(true_s)
    seen = [c["to"] for c in t.changes]
    assert len(seen) <= 2 and len(set(seen)) == len(seen), t.changes


@pytest.mark.parametrize(("true_s", "verdict"), [(1.6, PAYING), (0.85, NOT_PAYING)])
def test_steady_traffic_away_from_the_levels_keeps_its_first_verdict(true_s: float,
                                                                     verdict: str) -> None:
    t = _steady(true_s)
    assert t.total_changes == 1 and t.verdict == verdict, t.changes


def test_a_shift_is_told_within_the_window() -> None:
    """1.45 (paying) for a while, then 0.9 (speculation slower than without): the window holds
    30 samples; the verdict goes to not paying within it, through at most one stop."""
    rng = random.Random(5)
    cost = Cost(((1, 1.0), (8, 1.0)), "t")
    w, t = Window(300), Tracker()
    seen_at = None
    for i in range(200):
        true_s = 1.45 if i < 100 else 0.9
        e = true_s * math.exp(rng.gauss(0, 0.15))
        w.add(_sample(i, gen=e * 200, acc=(e - 1) * 200, drafts=200, busy={1: 10}))
        est = estimate(w, cost, POL.run_noise, True)
        t.update(i, LV, 5000, est.speedup, est.se_log, True, se_noise=est.se_noise or 0.0)
        if i == 99:
            assert t.verdict == PAYING
        if t.verdict == NOT_PAYING and seen_at is None:
            seen_at = i
    assert seen_at is not None and seen_at - 100 <= 30, t.changes
    assert t.total_changes <= 3


def test_speculation_off_favourable_or_cannot_tell() -> None:
    t = Tracker()
    assert t.update(0, LV, 5000, 1.8, 0.04, False) == FAVOURABLE
    t2 = Tracker()
    assert t2.update(0, LV, 5000, 1.05, 0.04, False) == CANNOT_TELL
    assert Tracker().update(0, LV, 5000, None, None, True, readable=False) == CANNOT_TELL


def test_tracker_round_trips_and_refuses_garbage() -> None:
    t = Tracker()
    t.update(0, LV, 5000, 1.6, 0.01, True)
    assert Tracker.from_dict(t.to_dict()) == t
    assert Tracker.from_dict({"verdict": "bogus"}) == Tracker()
    assert Tracker.from_dict("x") == Tracker()
