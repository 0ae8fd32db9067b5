"""Ground truth for ``GET /lab/truth``: what the emulator actually did, on the client's timeline.

Every timestamp is ``time.perf_counter()`` taken by the server at the moment the request was read
(arrival) and right after a chunk was written to the socket (first/last token), so a correct
benchmark client that uses the same definitions agrees with these figures:

* ``tpot_ms_p50``: median over requests (with more than one token) of ``(last - first)/(n - 1)``;
* ``ttft_ms_p50``: median of ``first - arrival``;
* ``throughput_tok_s``: output tokens / (last completion - first arrival).

These are wall-clock (scaled) figures. ``unscaled`` gives the same divided by the time scale: what
the emulated device itself would show.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RequestRecord", "Truth"]


@dataclass
class RequestRecord:
    arrival: float
    category: str
    first: float | None = None
    last: float | None = None
    end: float | None = None
    tokens: int = 0
    chunks: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    status: int = 200
    extra: dict[str, Any] = field(default_factory=dict)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


class Truth:
    def __init__(self, time_scale: float, info: dict[str, Any]) -> None:
        self.time_scale = time_scale
        self.info = info
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._reset_state()

    def _reset_state(self) -> None:
        self._records = []
        self._steps = 0
        self._batch_sum = 0
        self._drafts = 0
        self._draft_tokens = 0
        self._accepted = 0
        self._per_pos: list[int] = []
        self._preemptions = 0
        self._step_wall_s = 0.0
        self._step_model_s = 0.0

    def reset(self) -> None:
        with self._lock:
            self._reset_state()

    def add(self, rec: RequestRecord) -> None:
        with self._lock:
            self._records.append(rec)

    def step(self, *, batch: int, drafts: int, draft_tokens: int, accepted: int,
             per_pos: tuple[int, ...], preemptions: int, wall_s: float, model_s: float) -> None:
        with self._lock:
            self._steps += 1
            self._batch_sum += batch
            self._drafts += drafts
            self._draft_tokens += draft_tokens
            self._accepted += accepted
            if len(self._per_pos) < len(per_pos):
                self._per_pos += [0] * (len(per_pos) - len(self._per_pos))
            for i, v in enumerate(per_pos):
                self._per_pos[i] += v
            self._preemptions += preemptions
            self._step_wall_s += wall_s
            self._step_model_s += model_s

    def summary(self) -> dict[str, Any]:
        with self._lock:
            recs = [r for r in self._records if r.end is not None and r.status == 200]
            failed = sum(1 for r in self._records if r.status != 200)
            tpots = [(r.last - r.first) / (r.tokens - 1) * 1000 for r in recs
                     if r.first is not None and r.last is not None and r.tokens > 1]
            ttfts = [(r.first - r.arrival) * 1000 for r in recs if r.first is not None]
            e2es = [((r.last or r.end or r.arrival) - r.arrival) * 1000 for r in recs]
            tokens = sum(r.tokens for r in recs)
            span = (max(r.end or 0.0 for r in recs) - min(r.arrival for r in recs)) if recs else 0
            thr = tokens / span if span > 0 else None
            cats: dict[str, dict[str, Any]] = {}
            for r in recs:
                c = cats.setdefault(r.category, {"requests": 0, "tpots": [], "drafts": 0,
                                                 "accepted": 0})
                c["requests"] += 1
                c["drafts"] += r.drafts
                c["accepted"] += r.accepted
                if r.first is not None and r.last is not None and r.tokens > 1:
                    c["tpots"].append((r.last - r.first) / (r.tokens - 1) * 1000)
            per_cat = {
                k: {"requests": v["requests"], "tpot_ms_p50": _r(_median(v["tpots"])),
                    "acceptance_length": _r(1 + v["accepted"] / v["drafts"], 4)
                    if v["drafts"] else None}
                for k, v in sorted(cats.items())
            }
            s = self.time_scale
            tpot, ttft = _median(tpots), _median(ttfts)
            acc: dict[str, Any] | None = None
            if self._drafts:
                acc = {
                    "drafts": self._drafts, "draft_tokens": self._draft_tokens,
                    "accepted_tokens": self._accepted,
                    "acceptance_length": round(1 + self._accepted / self._drafts, 4),
                    "acceptance_rate": round(self._accepted / self._draft_tokens, 4)
                    if self._draft_tokens else 0.0,
                    "per_position": [round(v / self._drafts, 4) for v in self._per_pos],
                }
            return {
                **self.info,
                "time_scale": s,
                "requests": len(recs),
                "failed": failed,
                "output_tokens": tokens,
                "duration_s": _r(span, 6),
                "tpot_ms_p50": _r(tpot),
                "ttft_ms_p50": _r(ttft),
                "e2el_ms_p50": _r(_median(e2es)),
                "throughput_tok_s": _r(thr),
                "unscaled": {
                    "tpot_ms_p50": _r(tpot / s if tpot is not None else None),
                    "ttft_ms_p50": _r(ttft / s if ttft is not None else None),
                    "throughput_tok_s": _r(thr * s if thr is not None else None),
                },
                "acceptance": acc,
                "per_category": per_cat,
                "steps": self._steps,
                "mean_batch": _r(self._batch_sum / self._steps if self._steps else 0.0),
                "preemptions": self._preemptions,
                "step_time_s": {"wall": _r(self._step_wall_s, 6),
                                "model": _r(self._step_model_s, 6)},
            }
