"""Speculation counters: vLLM's Prometheus text and TRT-LLM's iteration stats, and their
differences over a level. The one implementation: the on-host client (a zipapp, stdlib, Python
3.8+) and the control node (`specdec.bench.metrics`, its errors as the control node's) use it.

Both servers' counters become one shape, `Counters`, and `spec_delta(before, after)` gives the
acceptance figures over a level the way `vllm bench serve` computes them:

* acceptance length ``AL = 1 + Δaccepted / Δdrafts`` (tokens per verify step, bonus included);
* acceptance rate ``Δaccepted / Δdraft_tokens``;
* per-position rate ``Δaccepted_at_pos[k] / Δdrafts`` (vLLM only; TRT-LLM has no per-position
  counters, so that list is None there).

vLLM's counters are cumulative: a counter that goes down between two scrapes means the server
restarted during the run (`BenchError`). TRT-LLM's ``GET /metrics`` returns the recent iteration
stats (and drains them); `TrtllmAccumulator` polls during a level, keeps iterations it has not
seen (by ``iter``) and treats a falling iteration number as a restart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import BenchError

RESTARTED = "server counters went backwards between scrapes (the server restarted during the run)"
_PREFIX = "vllm:spec_decode_"


@dataclass
class Counters:
    """Cumulative speculation counters; ``present`` False: the server has no speculation;
    ``per_pos`` None: the server has no per-position counters (TRT-LLM)."""

    present: bool = False
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] | None = field(default_factory=dict)


_PROM = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_vllm(text: str) -> Counters:
    """Sum vLLM's spec-decode counters over label sets (engines, model names)."""
    out, per_pos = Counters(), {}  # type: Counters, dict[int, float]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if m is None or value is None:
            raise BenchError(f"/metrics: malformed Prometheus text: {line[:100]}")
        name = m.group(1)
        if not name.startswith(_PREFIX) or not name.endswith("_total"):
            continue
        key = name[len(_PREFIX):-len("_total")]
        if key == "num_drafts":
            out.drafts += value
        elif key == "num_draft_tokens":
            out.draft_tokens += value
        elif key == "num_accepted_tokens":
            out.accepted += value
        elif key == "num_accepted_tokens_per_pos":
            labels = dict(_LABEL.findall(m.group(2) or ""))
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                raise BenchError(f"/metrics: {name} has a bad position label "
                                 f"{labels.get('position')!r}") from None
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        else:
            continue
        out.present = True
    out.per_pos = per_pos
    return out


def trtllm_entries(payload: Any) -> list[dict[str, Any]]:
    """TRT-LLM's ``/metrics`` body → iteration dicts (some versions send JSON strings)."""
    if not isinstance(payload, list):
        raise BenchError("/metrics: TRT-LLM iteration stats must be a JSON list")
    out = []
    for it in payload:
        if isinstance(it, str):
            try:
                it = json.loads(it)
            except ValueError:
                raise BenchError(f"/metrics: malformed iteration stats entry {it[:60]!r}") \
                    from None
        if not isinstance(it, dict):
            raise BenchError(f"/metrics: iteration stats entry is not an object: {it!r:.60}")
        out.append(it)
    return out


def _num(d: dict[str, Any], key: str) -> float:
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BenchError(f"/metrics: specDecodingStats.{key} is not a number: {v!r}")
    return float(v)


class TrtllmAccumulator:
    """Collects TRT-LLM iterations across polls of a draining (or non-draining) /metrics."""

    def __init__(self) -> None:
        self.seen = set()  # type: set
        self.max_iter = -1.0
        self.counters = Counters(per_pos=None)

    @staticmethod
    def _key(it: dict[str, Any]) -> Any:
        if "iter" in it:
            return ("iter", it.get("iter"), it.get("timestamp"))
        return ("raw", json.dumps(it, sort_keys=True, default=str))

    def add(self, entries: list[dict[str, Any]], prime: bool = False) -> None:
        """Count the entries not seen before (``prime``: entries from before the level,
        remembered and not counted)."""
        for it in entries:
            key = self._key(it)
            if key in self.seen:
                continue
            n = it.get("iter")
            if isinstance(n, (int, float)) and not isinstance(n, bool):
                if float(n) < self.max_iter and not prime:
                    raise BenchError(RESTARTED)
                self.max_iter = max(self.max_iter, float(n))
            self.seen.add(key)
            sd = it.get("specDecodingStats")
            if isinstance(sd, dict):
                self.counters.present = True
                if not prime:
                    self.counters.drafts += _num(sd, "numRequestsWithDraftTokens")
                    self.counters.draft_tokens += _num(sd, "numDraftTokens")
                    self.counters.accepted += _num(sd, "numAcceptedTokens")


def spec_delta(before: Counters, after: Counters) -> dict[str, Any] | None:
    """Acceptance figures between two snapshots; None when the server has no speculation."""
    if not (before.present or after.present):
        return None
    d_drafts, d_tokens = after.drafts - before.drafts, after.draft_tokens - before.draft_tokens
    d_acc = after.accepted - before.accepted
    if d_drafts < 0 or d_tokens < 0 or d_acc < 0:
        raise BenchError(RESTARTED)
    per_pos = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        deltas = {p: v - prev.get(p, 0.0) for p, v in after.per_pos.items()}
        if any(v < 0 for v in deltas.values()) or any(p not in after.per_pos for p in prev):
            raise BenchError(RESTARTED)
        per_pos = ([deltas[p] / d_drafts for p in sorted(deltas)] if d_drafts > 0
                   else [0.0 for _ in deltas])
    al = 1.0 + d_acc / d_drafts if d_drafts > 0 else None
    rate = d_acc / d_tokens if d_tokens > 0 else None
    # with vLLM `bench serve` --save-result's names (its acceptance rate is a percentage)
    return {"num_drafts": int(d_drafts), "draft_tokens": int(d_tokens),
            "accepted_tokens": int(d_acc), "acceptance_length": al, "acceptance_rate": rate,
            "per_position_acceptance_rates": per_pos, "spec_decode_acceptance_length": al,
            "spec_decode_acceptance_rate": None if rate is None else 100.0 * rate}


def diff_counters(before: Counters, after: Counters) -> Counters:
    """after − before as a Counters value (checked by `spec_delta` first)."""
    pp = None  # type: dict[int, float] | None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        pp = {k: v - prev.get(k, 0.0) for k, v in after.per_pos.items()}
    return Counters(before.present or after.present, after.drafts - before.drafts,
                    after.draft_tokens - before.draft_tokens, after.accepted - before.accepted,
                    pp)


def add_counters(a: Counters, b: Counters) -> Counters:
    """Sum of two deltas-as-counters (used to aggregate levels)."""
    pp = None  # type: dict[int, float] | None
    if a.per_pos is not None and b.per_pos is not None:
        pp = dict(a.per_pos)
        for k, v in b.per_pos.items():
            pp[k] = pp.get(k, 0.0) + v
    return Counters(a.present or b.present, a.drafts + b.drafts, a.draft_tokens + b.draft_tokens,
                    a.accepted + b.accepted, pp)
