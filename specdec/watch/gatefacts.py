"""What the gate decided and measured for a host, from the control node's reports: the decision
and when, the acceptance length and gains it measured, the tokens per sequence-step of its
candidate, and the step cost of speculation relative to the baseline per batch size.

The step cost comes from the tune's fitted curve at the running k (``tune.curves[].points[]``
``cost_c1``/``cost_c8``, `specdec.tune.search`) when the tuned configuration is what runs; else from
the gate's own benchmark files of the candidate and the baseline (mean seconds per decode step
at each level, `specdec.tune.search.level_fit`). Both are device time, and only their ratio is used.
A measured cost below 1 is timing noise (a speculative step verifies at least the token a plain
decode step computes, and drafts besides; the tune's step fit holds to the same), so it is read
as 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from specdec.report.fleet import CACHE_DIR, load_reports, safe_name
from specdec.tune.search import level_fit
from specdec.verify.verifier import VERIFIED

__all__ = ["Cost", "GateFacts", "gate_facts", "load_gate_report"]


@dataclass(frozen=True)
class Cost:
    """Speculative step time over the baseline's, at the batch sizes the gate measured."""

    points: tuple[tuple[int, float], ...]  # (batch size, cost), batch sizes ascending
    source: str

    def at(self, batch: float) -> tuple[float, bool]:
        """The cost at ``batch`` (linear between the measured sizes and, beyond them, along the
        last segment, never below 0.05); True when extrapolated."""
        pts = self.points
        if len(pts) == 1:
            return pts[0][1], batch != pts[0][0]
        for (b0, c0), (b1, c1) in zip(pts, pts[1:], strict=False):
            if batch <= b1 or (b1, c1) == pts[-1]:
                c = c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
                return max(0.05, c), not pts[0][0] <= batch <= pts[-1][0]
        return pts[-1][1], True  # pragma: no cover - the loop returns


@dataclass(frozen=True)
class GateFacts:
    outcome: str
    decided_at: datetime | None
    run_id: str
    release: str | None  # the release the decision left running
    candidate_release: str | None
    method: str
    k: int
    al: float | None  # acceptance length the gate's candidate showed
    gain_c1: float | None
    gain_c8: float | None
    tokens_per_step: float | None  # the candidate's tokens per sequence-step (bonus included)
    cost: Cost | None
    path: str
    answered: str | None = None  # the release re-verified for a watch mark (its report's)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x == x \
        else None


def load_gate_report(root: Path, host: str, state: Path | None = None
                     ) -> tuple[dict[str, Any], Path] | None:
    """The host's last deciding report: ``cache/<host>/last-verified.json`` of the inventory's
    ``state`` (written by the deploy for every verified outcome; else under ``root``), else the
    newest run's report under ``root`` (the reports) with such an outcome."""
    last = (state or root) / CACHE_DIR / safe_name(host) / "last-verified.json"
    try:
        doc = json.loads(last.read_text())
        if isinstance(doc, dict) and doc.get("outcome") in VERIFIED:
            return doc, last
    except (OSError, ValueError):
        pass
    runs = sorted((p for p in root.iterdir() if p.is_dir() and p.name != CACHE_DIR),
                  key=lambda p: p.stat().st_mtime, reverse=True) if root.is_dir() else []
    for run in runs:
        for rep in load_reports(run):
            if rep.get("host") == host and rep.get("outcome") in VERIFIED:
                return rep, run / f"{safe_name(host)}.json"
    return None


def _files(arm: Any) -> list[dict[str, Any]]:
    out = []
    for f in (arm or {}).get("files") or [] if isinstance(arm, Mapping) else []:
        try:
            doc = json.loads(Path(str(f)).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _mean_step(results: Sequence[Mapping[str, Any]], level: int) -> float | None:
    steps = [f.step_s for r in results if (f := level_fit(r, level)) is not None]
    return sum(steps) / len(steps) if steps else None


def _tokens_per_step(results: Sequence[Mapping[str, Any]]) -> float | None:
    tokens = chunks = 0.0
    for r in results:
        for lvl in (r.get("concurrency") or {}).values():
            for q in (lvl or {}).get("requests") or [] if isinstance(lvl, Mapping) else []:
                t, c = _num(q.get("output_tokens")), _num(q.get("chunks"))
                if q.get("error") is None and t and c:
                    tokens, chunks = tokens + t, chunks + c
    return tokens / chunks if chunks else None


def _tune_cost(rep: Mapping[str, Any], levels: Sequence[int]) -> Cost | None:
    tune = rep.get("tune")
    if not isinstance(tune, Mapping) or rep.get("k_by_batch"):
        return None
    if tune.get("release") not in (rep.get("candidate_release"), rep.get("active_release")):
        return None
    k = rep.get("num_speculative_tokens")
    for curve in tune.get("curves") or []:
        if (curve.get("method"), curve.get("draft")) != (rep.get("method"), rep.get("draft")):
            continue
        for row in curve.get("points") or []:
            if row.get("k") == k:
                pts = [(c, _num(row.get(f"cost_c{c}"))) for c in levels]
                if all(v is not None and v > 0 for _, v in pts):
                    return Cost(tuple((c, max(1.0, float(v or 0))) for c, v in pts),
                                f"tune curve, {rep.get('method')} k={k}")
    return None


def _bench_cost(cands: Sequence[Mapping[str, Any]], bases: Sequence[Mapping[str, Any]],
                levels: Sequence[int]) -> Cost | None:
    pts = []
    for c in levels:
        sc, sb = _mean_step(cands, c), _mean_step(bases, c)
        if sc is None or sb is None or sb <= 0:
            return None
        pts.append((c, max(1.0, sc / sb)))
    return Cost(tuple(pts), "gate benchmarks (step time, candidate / baseline)")


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def gate_facts(rep: Mapping[str, Any], path: Path, levels: Sequence[int]) -> GateFacts:
    """The figures the watch compares with, from a deciding report."""
    cands, bases = _files(rep.get("candidate")), _files(rep.get("baseline"))
    cost = _tune_cost(rep, levels) or _bench_cost(cands, bases, levels)
    acc = rep.get("acceptance") if isinstance(rep.get("acceptance"), Mapping) else {}
    b1 = _num(((rep.get("baseline") or {}).get("c1") or {}).get("throughput_tok_s"))
    c1 = _num(((rep.get("candidate") or {}).get("c1") or {}).get("throughput_tok_s"))
    b8 = _num(((rep.get("baseline") or {}).get("c8") or {}).get("throughput_tok_s"))
    c8 = _num(((rep.get("candidate") or {}).get("c8") or {}).get("throughput_tok_s"))
    return GateFacts(
        outcome=str(rep.get("outcome")), decided_at=_time(rep.get("finished_at")),
        run_id=str(rep.get("run_id") or ""), release=rep.get("active_release"),
        candidate_release=rep.get("candidate_release"), method=str(rep.get("method") or "none"),
        k=int(rep.get("num_speculative_tokens") or 0), al=_num((acc or {}).get("length")),
        gain_c1=c1 / b1 - 1 if c1 and b1 else None, gain_c8=c8 / b8 - 1 if c8 and b8 else None,
        tokens_per_step=_tokens_per_step(cands), cost=cost, path=str(path),
        answered=_answered(rep))


def _answered(rep: Mapping[str, Any]) -> str | None:
    """The release this report re-verified because `specdec watch` marked the host."""
    mark = rep.get("watch_mark")
    return str(rep.get("active_release")) if isinstance(mark, Mapping) else None
