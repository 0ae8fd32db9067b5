"""Statistics of both clients (one definition): numpy's linear percentile and the population
std; `finite` turns NaN and infinities into None for JSON."""

from __future__ import annotations

import math


def percentile(values, q):
    if not values:
        return float("nan")
    xs = sorted(float(v) for v in values)
    pos = (len(xs) - 1) * min(max(q, 0.0), 100.0) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values):
    n = len(values)
    if n == 0:
        return {"mean": None, "median": None, "std": None, "p90": None, "p99": None,
                "min": None, "max": None, "n": 0}
    xs = [float(v) for v in values]
    mean = math.fsum(xs) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / n)
    return {"mean": mean, "median": percentile(xs, 50), "std": std, "p90": percentile(xs, 90),
            "p99": percentile(xs, 99), "min": min(xs), "max": max(xs), "n": n}


def finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x
