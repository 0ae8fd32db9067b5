"""benchmarks/heldout.py: a target is met only on held-out seeds, and only by the worst of them."""

from __future__ import annotations

from datetime import date

import pytest

from tests.benchmod import load

ho = load("heldout")

P90 = ho.Target("p90", 90.0)
RATIO = ho.Target("kept/best", 0.95, higher=True, fmt="{:.1%}")


def test_met_only_when_the_worst_held_out_seed_meets_it():
    verdict, line = ho.judge(P90, {11: 80.0, 12: 89.9, 13: 70.0})
    assert verdict == "met"
    assert "min 70.0 / median 80.0 / max 89.9" in line and "worst 89.9" in line
    verdict, line = ho.judge(P90, {11: 80.0, 12: 90.1, 13: 70.0})
    assert verdict == "NOT met" and "missed on seed 12" in line
    assert ho.judge(RATIO, {11: 0.97, 12: 0.951, 13: 0.99})[0] == "met"
    verdict, line = ho.judge(RATIO, {11: 0.97, 12: 0.949, 13: 0.99})
    assert verdict == "NOT met" and "worst 94.9%" in line


def test_development_seeds_never_count():
    # a development seed meeting the target does not make up for a missing held-out seed
    verdict, line = ho.judge(P90, {1: 50.0, 7: 50.0, 11: 80.0, 12: 85.0})
    assert verdict == "not judged" and "seeds 11, 12;" in line and "3 needed" in line
    # nor does one missing it fail a target its held-out seeds meet
    assert ho.judge(P90, {336: 120.0, 11: 80.0, 12: 85.0, 13: 60.0})[0] == "met"
    assert ho.judge(P90, {1: 50.0, 2: 60.0})[0] == "not judged"
    # a held-out seed missing it is NOT met however few were run
    assert ho.judge(P90, {1: 50.0, 12: 95.0})[0] == "NOT met"
    assert "1, 7" in ho.dev_warning([1, 5, 7]) and ho.dev_warning([5, 6]) == ""


def test_date_seeds_are_held_out_distinct_and_new_each_day():
    day = date(2026, 12, 2)
    a = ho.date_seeds(day, 3, "gate-power")
    assert len(set(a)) == 3 and not set(a) & ho.DEV_SEEDS
    assert a == ho.date_seeds(day, 3, "gate-power")  # printed, repeatable
    assert a != ho.date_seeds(date(2026, 12, 3), 3, "gate-power")
    assert a != ho.date_seeds(day, 3, "oracle-gap")
    assert {1, 2, 7, 336} <= ho.DEV_SEEDS


def test_seeds_flag():
    assert ho.parse_seeds("5, 6,7") == [5, 6, 7]
    for bad in ("", "a,b", "3,3", "-1"):
        with pytest.raises(ValueError, match="--seeds"):
            ho.parse_seeds(bad)
