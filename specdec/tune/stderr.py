"""The standard error of a tune point's fitted c=1 value, from the point's own data
(`specdec.tune.search.Search.tied`: which points are too close to tell apart)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.tune.figures import cut_mean

__all__ = ["point_se", "tokens_per_step"]


def tokens_per_step(results: Sequence[Mapping[str, Any]], conc: int, k: int
                    ) -> dict[str, list[float]]:
    """Each request's tokens per step when drafting k (its chunk sizes cut at ``k + 1``), per
    category, at level ``conc`` of the bench results (requests without a histogram: left out)."""
    out: dict[str, list[float]] = {}
    for r in results:
        lvl = (r.get("concurrency") or {}).get(str(conc))
        for q in (lvl.get("requests") or []) if isinstance(lvl, Mapping) else []:
            if not isinstance(q, Mapping) or q.get("error") is not None:
                continue
            h = q.get("chunk_hist")
            sizes = {z: c for z, c in enumerate(h) if isinstance(c, int)} if isinstance(
                h, list) else {}
            mean = cut_mean(sizes, k)
            if mean is not None:
                out.setdefault(str(q.get("category") or "all"), []).append(mean)
    return out


def point_se(step_s: Sequence[float], results: Sequence[Mapping[str, Any]], conc: int, k: int,
             weights: Mapping[str, float]) -> float:
    """The relative standard error of a point's throughput at k: its rounds' step times
    (``step_s``, one a round: their spread is the run-level noise) and its requests' tokens
    per step (the spread between requests per category, ``weights`` the population's shares;
    a prompt's acceptance holds over its steps, so they are not independent draws)."""
    se_t = (statistics.stdev(step_s) / statistics.fmean(step_s) / math.sqrt(len(step_s))
            if len(step_s) > 1 else 0.0)
    per = tokens_per_step(results, conc, k)
    tps = var = 0.0
    for cat, wt in weights.items():
        xs = per.get(cat) or []
        tps += wt * (statistics.fmean(xs) if xs else 0.0)
        var += wt * wt * (statistics.variance(xs) / len(xs) if len(xs) > 1 else 0.0)
    return math.hypot(se_t, math.sqrt(var) / tps if tps > 0 else 0.0)
