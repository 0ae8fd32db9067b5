"""The measurement core's statistics (`specdec.bench.onhost.stats`, shipped to hosts) and the
benchmarks' Harrell–Davis quantile."""

from __future__ import annotations

import pytest

from specdec.bench.onhost.stats import percentile, summarize
from tests.benchmod import load

hdq = load("hdquantile")


def test_percentile_matches_numpy_linear() -> None:
    # values numpy.percentile gives for these inputs (linear interpolation)
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert percentile([10, 0, 5], 99) == pytest.approx(9.9)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_summarize() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["median"] == 2.5 and s["n"] == 4
    assert s["std"] == pytest.approx(1.118033988)  # population std, as numpy
    assert summarize([])["median"] is None


def test_betainc_and_harrell_davis() -> None:
    assert hdq.betainc(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - sum_{k<2} C(4,k) .4^k .6^(4-k)
    assert hdq.betainc(1, 1, 0.3) == pytest.approx(0.3)
    assert hdq.hd_quantile([1, 2, 3, 4, 5]) == pytest.approx(3.0)
    assert hdq.hd_quantile(list(range(1, 101))) == pytest.approx(50.5)
    # bimodal sample: the sample median jumps between the modes, Harrell-Davis moves smoothly
    a = [1.0] * 10 + [10.0] * 11
    b = [1.0] * 11 + [10.0] * 10
    assert percentile(a, 50) == 10.0 and percentile(b, 50) == 1.0
    assert abs(hdq.hd_quantile(a) - hdq.hd_quantile(b)) < 3.0
