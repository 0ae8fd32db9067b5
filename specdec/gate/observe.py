"""What the gate reads of a benchmark result: one `Obs` per measured request of a level (or
one from the level's figures), and the measured prompt set's categories."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specdec.errors import GateError
from specdec.gate.estimators import Obs

__all__ = ["Result", "level_of", "observations", "population"]

Result = Mapping[str, Any]


def _num(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool) and x == x and x > 0:
        return float(x)
    return None


def level_of(result: Result, conc: int) -> Mapping[str, Any] | None:
    levels = result.get("concurrency")
    lvl = levels.get(str(conc)) if isinstance(levels, Mapping) else None
    return lvl if isinstance(lvl, Mapping) else None


def _intrinsic(r: Mapping[str, Any]) -> float:
    """Variance of log(seconds per token) its own chunk sizes imply: CV² of tokens per engine
    step over its decode steps (0 without speculation: one token per step)."""
    sd, mean, chunks = _num(r.get("chunk_tokens_sd")), _num(r.get("tokens_per_chunk")), \
        _num(r.get("chunks"))
    if sd is None or mean is None or chunks is None or chunks < 2:
        return 0.0
    return (sd / mean) ** 2 / (chunks - 1)


def observations(results: Sequence[Result], conc: int, what: str) -> list[Obs]:
    """One `Obs` per successful request of level ``conc``, round = index in ``results``; a
    result without usable per-request records gives one from its level figures."""
    out: list[Obs] = []
    for rnd, res in enumerate(results):
        lvl = level_of(res, conc)
        if lvl is None:
            continue
        reqs = [r for r in (lvl.get("requests") or []) if isinstance(r, Mapping)]
        got = False
        for r in reqs:
            tok, e2e = _num(r.get("output_tokens")), _num(r.get("e2el_ms"))
            if r.get("error") is not None or tok is None or e2e is None:
                continue
            tpot, ttft, chunks = _num(r.get("tpot_ms")), _num(r.get("ttft_ms")), \
                _num(r.get("chunks"))
            out.append(Obs(str(r.get("category") or "all"), rnd, tok, e2e / 1000,
                           tpot / 1000 if tpot else None, _intrinsic(r),
                           str(r.get("prompt_id") or ""), (ttft or 0.0) / 1000,
                           chunks - 1 if chunks and chunks >= 2 and ttft else None))
            got = True
        if got:
            continue
        thr = _num(lvl.get("throughput_tok_s"))
        if thr is None:
            raise GateError(f"{what}: field concurrency.{conc}.throughput_tok_s must be a "
                            f"positive number, got {lvl.get('throughput_tok_s')!r}")
        tp = _num(lvl.get("tpot_ms_p50"))
        out.append(Obs("all", rnd, thr, 1.0, tp / 1000 if tp else None))
    return out


def population(results: Sequence[Result]) -> dict[str, float] | None:
    """Category counts of the measured prompt set (the population the rule is about)."""
    pops = []
    for r in results:
        p = r.get("prompts")
        cats = p.get("categories") if isinstance(p, Mapping) else None
        if not isinstance(cats, Mapping) or not cats:
            return None
        pops.append({str(k): float(v) for k, v in cats.items() if _num(v)})
    return pops[0] if all(p == pops[0] for p in pops) else None
