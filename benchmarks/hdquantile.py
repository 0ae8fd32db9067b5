"""The Harrell–Davis quantile (a Beta-weighted average of all order statistics) and the
regularised incomplete Beta function it needs: the simulated lab's truth of a TPOT median
(`simlab.py`). Pure Python (no numpy or scipy)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["betainc", "hd_quantile"]


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
