from __future__ import annotations

import random

import pytest

from specdec.bench.stats import (
    median_ci,
    paired_median_ratio_ci,
    paired_rate_ratio_ci,
    percentile,
    ratio_of_means_ci,
    summarize,
)


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


def test_median_ci_ranks() -> None:
    # n=50: the distribution-free 95% CI spans ranks 18..33 (reference note)
    xs = list(range(1, 51))
    med, lo, hi = median_ci(xs)
    assert med == 25.5 and (lo, hi) == (18, 33)
    # too few values for 95%: the whole range
    assert median_ci([3.0, 1.0, 2.0])[1:] == (1.0, 3.0)


def test_median_ci_coverage() -> None:
    rng = random.Random(3)
    covered = 0
    for _ in range(400):
        xs = [rng.lognormvariate(0.0, 0.3) for _ in range(40)]  # true median 1.0
        _, lo, hi = median_ci(xs)
        covered += lo <= 1.0 <= hi
    assert covered / 400 >= 0.93


def test_paired_median_ratio() -> None:
    med, lo, hi = paired_median_ratio_ci([10.0] * 20, [7.0] * 20)
    assert (med, lo, hi) == pytest.approx((0.7, 0.7, 0.7))
    with pytest.raises(ValueError):
        paired_median_ratio_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        paired_median_ratio_ci([0.0], [1.0])


def test_paired_rate_ratio() -> None:
    pairs = [(100, 10.0, 100, 8.0)] * 10  # candidate 25% faster on every request
    r, lo, hi = paired_rate_ratio_ci([pairs])
    assert (r, lo, hi) == pytest.approx((1.25, 1.25, 1.25))
    rng = random.Random(1)
    noisy = [(100, 10.0 * rng.uniform(0.9, 1.1), 100, 8.0 * rng.uniform(0.9, 1.1))
             for _ in range(30)]
    r, lo, hi = paired_rate_ratio_ci([noisy], seed=2)
    assert lo < r < hi and lo > 1.1 and hi < 1.4
    # two rounds that disagree widen the interval
    slow = [(100, 10.0, 100, 9.5)] * 30
    _, lo2, hi2 = paired_rate_ratio_ci([noisy, slow], seed=2)
    assert hi2 - lo2 > hi - lo


def test_ratio_of_means() -> None:
    assert ratio_of_means_ci([100.0], [130.0]) == pytest.approx((1.3, 1.3, 1.3))
    point, lo, hi = ratio_of_means_ci([100, 102, 98], [120, 125, 115])
    assert lo < point < hi and lo > 1.0
    with pytest.raises(ValueError):
        ratio_of_means_ci([0.0], [1.0])


def test_betainc_and_harrell_davis() -> None:
    from specdec.bench.stats import betainc, hd_quantile, paired_ratio_of_medians_ci

    assert betainc(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - sum_{k<2} C(4,k) .4^k .6^(4-k)
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)
    assert hd_quantile([1, 2, 3, 4, 5]) == pytest.approx(3.0)
    assert hd_quantile(list(range(1, 101))) == pytest.approx(50.5)
    # bimodal sample: the sample median jumps between the modes, Harrell-Davis moves smoothly
    a = [1.0] * 10 + [10.0] * 11
    b = [1.0] * 11 + [10.0] * 10
    assert percentile(a, 50) == 10.0 and percentile(b, 50) == 1.0
    assert abs(hd_quantile(a) - hd_quantile(b)) < 3.0
    r, lo, hi = paired_ratio_of_medians_ci([[(10.0, 7.0)] * 12])
    assert (r, lo, hi) == pytest.approx((0.7, 0.7, 0.7))
