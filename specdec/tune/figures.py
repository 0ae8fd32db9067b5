"""A bench result's figures as the tune curve needs them (`level_fit`: step time, tokens,
time to first token and chunk-size histogram per category), and repeated measurements pooled
(`merged`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LevelFit", "cut_mean", "level_fit", "merged"]


@dataclass(frozen=True)
class LevelFit:
    """One level of one bench result, as the curve needs it."""

    step_s: float  # mean seconds per decode step
    tokens: float  # output tokens per request
    ttft: dict[str, float]  # seconds, per category
    hist: dict[str, dict[int, int]]  # chunk size -> count, per category (decode chunks)
    seconds: float  # mean end-to-end seconds per request

    def tokens_per_step(self, cat: str, k: int) -> float:
        mean = cut_mean(self.hist.get(cat) or {}, k)
        return 1.0 if mean is None else mean

    def truncated(self, cat: str, k: int) -> tuple[int, float, float]:
        """Steps, mean and variance of the chunk sizes cut at ``k + 1`` (category ``cat``)."""
        h = self.hist.get(cat) or {}
        mean = cut_mean(h, k)
        if mean is None:
            return 0, 0.0, 0.0
        n = sum(h.values())
        return n, mean, sum(c * (min(s, k + 1) - mean) ** 2 for s, c in h.items()) / n


def cut_mean(hist: Mapping[int, int], k: int) -> float | None:
    """Tokens per step had ``k`` been drafted: the mean chunk size of a histogram (size ->
    count) with every size cut at ``k + 1`` (None: no chunks)."""
    n = sum(hist.values())
    return sum(c * min(s, k + 1) for s, c in hist.items()) / n if n else None


def merged(results: Sequence[Mapping[str, Any]], levels: Sequence[int]) -> dict[str, Any]:
    """One bench result holding the requests of several (repeated measurements)."""
    out: dict[str, Any] = {}
    for c in levels:
        reqs: list[Any] = []
        for r in results:
            lvl = (r.get("concurrency") or {}).get(str(c))
            if isinstance(lvl, Mapping):
                reqs += list(lvl.get("requests") or [])
        out[str(c)] = {"requests": reqs}
    return {"concurrency": out}


def _f(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x > 0 else None


def level_fit(result: Mapping[str, Any], conc: int) -> LevelFit | None:
    """The figures of level ``conc`` of a bench JSON (None when it has no usable records)."""
    lvl = (result.get("concurrency") or {}).get(str(conc))
    if not isinstance(lvl, Mapping):
        return None
    dec_s = steps = tok = sec = 0.0
    n = 0
    ttft: dict[str, list[float]] = {}
    hist: dict[str, dict[int, int]] = {}
    for r in lvl.get("requests") or []:
        if not isinstance(r, Mapping) or r.get("error") is not None:
            continue
        t, e2e, first = _f(r.get("output_tokens")), _f(r.get("e2el_ms")), _f(r.get("ttft_ms"))
        chunks = _f(r.get("chunks"))
        if t is None or e2e is None or first is None or chunks is None or chunks < 2:
            continue
        cat = str(r.get("category") or "all")
        dec_s += (e2e - first) / 1000
        steps += chunks - 1
        tok += t
        sec += e2e / 1000
        n += 1
        ttft.setdefault(cat, []).append(first / 1000)
        h = hist.setdefault(cat, {})
        sizes = r.get("chunk_hist")
        if isinstance(sizes, Sequence):
            for s, c in enumerate(sizes):
                if isinstance(c, int) and c > 0:
                    h[s] = h.get(s, 0) + c
        else:  # no histogram: the mean only (exact for L at the measured k, not below it)
            size = max(1, round((t - 1) / (chunks - 1)))
            h[size] = h.get(size, 0) + int(chunks - 1)
    if not n or steps <= 0:
        return None
    return LevelFit(dec_s / steps, tok / n, {c: sum(v) / len(v) for c, v in ttft.items()},
                    hist, sec / n)
