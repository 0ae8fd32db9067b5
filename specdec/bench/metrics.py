"""Speculative-decoding counters from the server: vLLM Prometheus text, TRT-LLM iteration JSON.

Both are turned into one counter shape, ``Counters``, and `spec_delta(before, after)` gives the
acceptance figures over a benchmark level the way `vllm bench serve` computes them:

* acceptance length ``AL = 1 + Δaccepted / Δdrafts`` (tokens per verify step, bonus included);
* acceptance rate ``Δaccepted / Δdraft_tokens``;
* per-position rate ``Δaccepted_at_pos[k] / Δdrafts`` (vLLM only; TRT-LLM has no per-position
  counters, so that list is None there).

vLLM's counters are cumulative: a counter that goes down between two scrapes means the server
restarted during the run, which is a `BenchError`. TRT-LLM's ``GET /metrics`` returns the recent
iteration stats (and drains them); `TrtllmAccumulator` polls during a level, keeps iterations it
has not seen (by ``iter``) and treats a falling iteration number as a restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specdec.bench.onhost import counters as core_counters
from specdec.bench.onhost import errors as core_errors
from specdec.errors import BenchError

__all__ = [
    "Counters",
    "TrtllmAccumulator",
    "add_counters",
    "diff_counters",
    "parse_trtllm",
    "parse_vllm",
    "spec_delta",
    "trtllm_entries",
]

_PREFIX = "vllm:spec_decode_"
RESTARTED = "server counters went backwards between scrapes (the server restarted during the run)"


@dataclass
class Counters:
    """Cumulative speculation counters; ``present`` False: the server has no speculation."""

    present: bool = False
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] | None = field(default_factory=dict)


def parse_vllm(text: str) -> Counters:
    """Sum vLLM's spec-decode counters over label sets (engines, model names)."""
    out = Counters()
    per_pos: dict[int, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BenchError(f"/metrics: malformed Prometheus text: {first[:100]}") from None
    for fam in families:
        for s in fam.samples:
            name = s.name
            if not name.startswith(_PREFIX) or not name.endswith("_total"):
                continue
            key = name[len(_PREFIX):-len("_total")]
            if key == "num_drafts":
                out.drafts += s.value
            elif key == "num_draft_tokens":
                out.draft_tokens += s.value
            elif key == "num_accepted_tokens":
                out.accepted += s.value
            elif key == "num_accepted_tokens_per_pos":
                try:
                    pos = int(s.labels.get("position", ""))
                except ValueError:
                    raise BenchError(f"/metrics: {name} has a bad position label "
                                     f"{s.labels.get('position')!r}") from None
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
            else:
                continue
            out.present = True
    out.per_pos = per_pos
    return out


def trtllm_entries(payload: Any) -> list[dict[str, Any]]:
    """TRT-LLM's ``/metrics`` body → iteration dicts (some versions send JSON strings)."""
    try:
        out: list[dict[str, Any]] = core_counters.trtllm_entries(payload)  # one definition
    except core_errors.BenchError as exc:
        raise BenchError(str(exc)) from None
    return out


def _num(d: Mapping[str, Any], key: str) -> float:
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BenchError(f"/metrics: specDecodingStats.{key} is not a number: {v!r}")
    return float(v)


def parse_trtllm(stats: Iterable[Mapping[str, Any]]) -> Counters:
    """Sum TRT-LLM iteration stats into the counter shape (no per-position figures)."""
    out = Counters(per_pos=None)
    for it in stats:
        sd = it.get("specDecodingStats")
        if not isinstance(sd, Mapping):
            continue
        out.present = True
        out.drafts += _num(sd, "numRequestsWithDraftTokens")
        out.draft_tokens += _num(sd, "numDraftTokens")
        out.accepted += _num(sd, "numAcceptedTokens")
    return out


class TrtllmAccumulator:
    """Collects TRT-LLM iterations across polls of a draining (or non-draining) /metrics."""

    def __init__(self) -> None:
        self._seen: set[Any] = set()
        self._max_iter: float = -1.0
        self.counters = Counters(per_pos=None)
        self.iterations = 0

    def prime(self, entries: list[dict[str, Any]]) -> None:
        """Entries from before the level: remember them, count nothing."""
        for it in entries:
            key = self._key(it)
            self._seen.add(key)
            n = it.get("iter")
            if isinstance(n, int | float) and not isinstance(n, bool):
                self._max_iter = max(self._max_iter, float(n))
            if isinstance(it.get("specDecodingStats"), Mapping):
                self.counters.present = True

    @staticmethod
    def _key(it: Mapping[str, Any]) -> Any:
        if "iter" in it:
            return ("iter", it.get("iter"), it.get("timestamp"))
        return ("raw", json.dumps(it, sort_keys=True, default=str))

    def add(self, entries: list[dict[str, Any]]) -> None:
        new = []
        for it in entries:
            key = self._key(it)
            if key in self._seen:
                continue
            n = it.get("iter")
            if isinstance(n, int | float) and not isinstance(n, bool):
                if float(n) < self._max_iter:
                    raise BenchError(RESTARTED)
                self._max_iter = float(n)
            self._seen.add(key)
            new.append(it)
        c = parse_trtllm(new)
        self.iterations += len(new)
        self.counters.present = self.counters.present or c.present
        self.counters.drafts += c.drafts
        self.counters.draft_tokens += c.draft_tokens
        self.counters.accepted += c.accepted


def spec_delta(before: Counters, after: Counters) -> dict[str, Any] | None:
    """Acceptance figures between two snapshots; None when the server has no speculation."""
    if not (before.present or after.present):
        return None
    d_drafts = after.drafts - before.drafts
    d_tokens = after.draft_tokens - before.draft_tokens
    d_acc = after.accepted - before.accepted
    if d_drafts < 0 or d_tokens < 0 or d_acc < 0:
        raise BenchError(RESTARTED)
    per_pos: list[float] | None = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        deltas: dict[int, float] = {}
        for p, v in after.per_pos.items():
            dv = v - prev.get(p, 0.0)
            if dv < 0:
                raise BenchError(RESTARTED)
            deltas[p] = dv
        if any(p not in after.per_pos for p in prev):
            raise BenchError(RESTARTED)
        per_pos = ([deltas[p] / d_drafts for p in sorted(deltas)] if d_drafts > 0
                   else [0.0 for _ in deltas])
    al = 1.0 + d_acc / d_drafts if d_drafts > 0 else None
    rate = d_acc / d_tokens if d_tokens > 0 else None
    return {
        "num_drafts": int(d_drafts),
        "draft_tokens": int(d_tokens),
        "accepted_tokens": int(d_acc),
        "acceptance_length": al,
        "acceptance_rate": rate,
        "per_position_acceptance_rates": per_pos,
        # vLLM `bench serve` --save-result names (its acceptance rate is a percentage)
        "spec_decode_acceptance_length": al,
        "spec_decode_acceptance_rate": None if rate is None else 100.0 * rate,
    }


def add_counters(a: Counters, b: Counters) -> Counters:
    """Sum of two deltas-as-counters (used to aggregate levels)."""
    pp: dict[int, float] | None = None
    if a.per_pos is not None and b.per_pos is not None:
        pp = dict(a.per_pos)
        for k, v in b.per_pos.items():
            pp[k] = pp.get(k, 0.0) + v
    return Counters(a.present or b.present, a.drafts + b.drafts,
                    a.draft_tokens + b.draft_tokens, a.accepted + b.accepted, pp)


def diff_counters(before: Counters, after: Counters) -> Counters:
    """after − before as a Counters value (checked by `spec_delta` first)."""
    pp: dict[int, float] | None = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        pp = {k: v - prev.get(k, 0.0) for k, v in after.per_pos.items()}
    return Counters(before.present or after.present, after.drafts - before.drafts,
                    after.draft_tokens - before.draft_tokens, after.accepted - before.accepted,
                    pp)
