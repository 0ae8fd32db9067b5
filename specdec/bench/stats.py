"""Pure-Python statistics for the benchmark and the gate (no numpy: it is not a dependency).

* `percentile` interpolates linearly between order statistics (numpy's default, which
  `vllm bench serve` uses), so the figures match vLLM's for the same samples.
* `summarize` gives mean, median, std (population, as numpy), p90, p99 and n.
* `median_ci` is the distribution-free (binomial order-statistic) CI of a median.
* `paired_median_ratio_ci`: median of per-pair ratios candidate/baseline with that CI.
* `paired_ratio_of_medians_ci`: p50(candidate)/p50(baseline) over paired per-prompt values (the
  gate's TPOT rule), and `paired_rate_ratio_ci`: ratio of token rates Σtokens/ΣE2EL (the gate's
  throughput CI); both with a seeded hierarchical bootstrap (rounds, then pairs).
* `ratio_of_means_ci`: ratio of run-level means (repeated runs per arm), bootstrap CI.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from specdec.bench.onhost import stats as core_stats

T = TypeVar("T")

__all__ = [
    "betainc",
    "hd_quantile",
    "median_ci",
    "paired_bootstrap_ci",
    "paired_median_ratio_ci",
    "paired_rate_ratio_ci",
    "paired_ratio_of_medians_ci",
    "percentile",
    "ratio_of_means_ci",
    "summarize",
]


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation; NaN for no values."""
    return float(core_stats.percentile(values, q))  # one definition, shipped to hosts too


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
          + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


_HD_WEIGHTS: dict[tuple[int, float], list[float]] = {}


def hd_quantile(values: Sequence[float], q: float = 0.5) -> float:
    """Harrell–Davis quantile: a Beta-weighted average of all order statistics.

    Smoother than the sample quantile (lower variance, no jumps between the modes of a bimodal
    sample), which is what a gate on per-prompt TPOT under speculation needs.
    """
    n = len(values)
    if n == 0:
        return float("nan")
    xs = sorted(float(v) for v in values)
    key = (n, q)
    w = _HD_WEIGHTS.get(key)
    if w is None:
        a, b = q * (n + 1), (1 - q) * (n + 1)
        cdf = [betainc(a, b, i / n) for i in range(n + 1)]
        w = [cdf[i + 1] - cdf[i] for i in range(n)]
        _HD_WEIGHTS[key] = w
    return math.fsum(wi * x for wi, x in zip(w, xs, strict=True))


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, median, std, p90, p99, min, max and n; None figures for an empty sample."""
    out: dict[str, float | int | None] = core_stats.summarize(values)
    return out


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    return math.fsum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2.0**n


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and a distribution-free CI from order statistics (at least ``confidence``).

    The CI is [x_(l), x_(n+1-l)] with the largest l such that P(l <= B <= n-l) >= confidence,
    B ~ Bin(n, 1/2). When n is too small for that coverage the CI is the sample range.
    """
    if not values:
        raise ValueError("median_ci needs at least one value")
    xs = sorted(float(v) for v in values)
    n = len(xs)
    med = percentile(xs, 50)
    alpha = 1.0 - confidence
    best = 0  # 0: full range
    for lo in range(1, n // 2 + 1):
        # coverage of [x_(lo), x_(n+1-lo)] = 1 - 2 * P(B <= lo - 1)
        if 1.0 - 2.0 * _binom_cdf(lo - 1, n) >= 1.0 - alpha:
            best = lo
        else:
            break
    if best == 0:
        return med, xs[0], xs[-1]
    return med, xs[best - 1], xs[n - best]


def paired_median_ratio_ci(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Median of per-pair ratios candidate/baseline and its order-statistic CI."""
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("paired samples must be non-empty and of equal length")
    if any(b <= 0 for b in baseline):
        raise ValueError("baseline values must be positive")
    ratios = [float(c) / float(b) for b, c in zip(baseline, candidate, strict=True)]
    return median_ci(ratios, confidence)


def _quantiles(xs: list[float], lo_q: float, hi_q: float) -> tuple[float, float]:
    return percentile(xs, lo_q * 100), percentile(xs, hi_q * 100)


def paired_bootstrap_ci(
    rounds: Sequence[Sequence[T]],
    statistic: Callable[[list[T]], float],
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``statistic`` of the pooled pairs and a hierarchical bootstrap percentile CI.

    ``rounds`` holds, per round (one baseline and one candidate run), the paired records. The
    bootstrap resamples rounds (when there are several), then pairs within each round, so
    run-to-run drift widens the interval.
    """
    rs = [list(r) for r in rounds if r]
    if not rs:
        raise ValueError("need at least one pair")
    point = statistic([x for r in rs for x in r])
    rng = random.Random(seed)
    boots: list[float] = []
    for _ in range(n_boot):
        picked = [rs[rng.randrange(len(rs))] for _ in rs] if len(rs) > 1 else rs
        boots.append(statistic([r[rng.randrange(len(r))] for r in picked for _ in r]))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = _quantiles(boots, alpha, 1.0 - alpha)
    return point, min(lo, point), max(hi, point)


def _rate_ratio(pairs: list[tuple[float, float, float, float]]) -> float:
    bt = math.fsum(p[0] for p in pairs)
    bs = math.fsum(p[1] for p in pairs)
    ct = math.fsum(p[2] for p in pairs)
    cs = math.fsum(p[3] for p in pairs)
    if bs <= 0 or cs <= 0 or bt <= 0:
        raise ValueError("token counts and durations must be positive")
    return (ct / cs) / (bt / bs)


def paired_rate_ratio_ci(
    rounds: Sequence[Sequence[tuple[float, float, float, float]]],
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Ratio of token rates candidate/baseline from paired per-request records.

    Records are ``(base_tokens, base_seconds, cand_tokens, cand_seconds)`` for the same prompt;
    an arm's rate is Σtokens/Σseconds. CI: `paired_bootstrap_ci`.
    """
    return paired_bootstrap_ci(rounds, _rate_ratio, confidence, n_boot, seed)


def _median_ratio(pairs: list[tuple[float, float]]) -> float:
    b = hd_quantile([p[0] for p in pairs])
    if b <= 0:
        raise ValueError("baseline values must be positive")
    return hd_quantile([p[1] for p in pairs]) / b


def paired_ratio_of_medians_ci(
    rounds: Sequence[Sequence[tuple[float, float]]],
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """p50(candidate)/p50(baseline) from paired ``(baseline, candidate)`` values, e.g. per-prompt
    TPOT: the seed's ``tpot_ms_p50`` ratio, with a paired hierarchical bootstrap CI. The medians
    are Harrell–Davis estimates (`hd_quantile`), which stay stable when acceptance makes the
    per-prompt TPOTs bimodal."""
    return paired_bootstrap_ci(rounds, _median_ratio, confidence, n_boot, seed)


def ratio_of_means_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """mean(candidate)/mean(baseline) from repeated runs, with an unpaired bootstrap CI.

    With a single run per arm the CI collapses to the point estimate.
    """
    if not baseline or not candidate:
        raise ValueError("need at least one run per arm")
    b = [float(x) for x in baseline]
    c = [float(x) for x in candidate]
    if any(x <= 0 for x in b):
        raise ValueError("baseline values must be positive")
    point = (math.fsum(c) / len(c)) / (math.fsum(b) / len(b))
    if len(b) == 1 and len(c) == 1:
        return point, point, point
    rng = random.Random(seed)
    boots = []
    for _ in range(n_boot):
        bm = math.fsum(b[rng.randrange(len(b))] for _ in b) / len(b)
        cm = math.fsum(c[rng.randrange(len(c))] for _ in c) / len(c)
        boots.append(cm / bm)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = _quantiles(boots, alpha, 1.0 - alpha)
    return point, min(lo, point), max(hi, point)
