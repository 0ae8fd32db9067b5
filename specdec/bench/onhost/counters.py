"""Speculation counters: vLLM's Prometheus text and TRT-LLM's iteration stats, and their
differences over a level.

Stdlib twins of `specdec.bench.metrics`, which parses Prometheus text with prometheus_client (not
on a host) and types its counters; tests/bench/test_onhost.py checks that both agree.
"""

from __future__ import annotations

import json
import re

from .errors import BenchError

RESTARTED = "server counters went backwards between scrapes (the server restarted during the run)"


class Counters:
    def __init__(self, present=False, drafts=0.0, draft_tokens=0.0, accepted=0.0, per_pos=None,
                 no_pos=False):
        self.present, self.drafts, self.draft_tokens, self.accepted = (present, drafts,
                                                                        draft_tokens, accepted)
        self.per_pos = None if no_pos else (per_pos if per_pos is not None else {})


_PROM = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_vllm(text):
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
        if not name.startswith("vllm:spec_decode_") or not name.endswith("_total"):
            continue
        key = name[len("vllm:spec_decode_"):-len("_total")]
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


def trtllm_entries(payload):
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


def _num(d, key):
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BenchError(f"/metrics: specDecodingStats.{key} is not a number: {v!r}")
    return float(v)


class TrtllmAccumulator:
    def __init__(self):
        self.seen, self.max_iter, self.counters = set(), -1.0, Counters(no_pos=True)

    @staticmethod
    def _key(it):
        if "iter" in it:
            return ("iter", it.get("iter"), it.get("timestamp"))
        return ("raw", json.dumps(it, sort_keys=True, default=str))

    def add(self, entries, prime=False):
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


def spec_delta(before, after):
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
    return {"num_drafts": int(d_drafts), "draft_tokens": int(d_tokens),
            "accepted_tokens": int(d_acc), "acceptance_length": al, "acceptance_rate": rate,
            "per_position_acceptance_rates": per_pos, "spec_decode_acceptance_length": al,
            "spec_decode_acceptance_rate": None if rate is None else 100.0 * rate}


def diff_counters(before, after):
    pp = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        pp = {k: v - prev.get(k, 0.0) for k, v in after.per_pos.items()}
    return Counters(before.present or after.present, after.drafts - before.drafts,
                    after.draft_tokens - before.draft_tokens, after.accepted - before.accepted,
                    pp, no_pos=pp is None)


def add_counters(a, b):
    pp = None
    if a.per_pos is not None and b.per_pos is not None:
        pp = dict(a.per_pos)
        for k, v in b.per_pos.items():
            pp[k] = pp.get(k, 0.0) + v
    return Counters(a.present or b.present, a.drafts + b.drafts, a.draft_tokens + b.draft_tokens,
                    a.accepted + b.accepted, pp, no_pos=pp is None)
