"""Tuned configurations, cached as fleet state so a re-run (on any control node) does not search
again. Where the cache lives is `specdec.tunestore`'s (one stated location, a directory or a
registered store).

An entry is keyed by what the search depends on: device, engine (and its release where the plan
has one), runtime and image reference, model, the methods compared (with their draft or head),
``max_num_seqs`` (the per-batch-size schedule's range) and the search domain. Hosts with the
same key share the entry: a fleet of identical devices is tuned once. ``specdec_reverify: true``
ignores the entry (the host searches again and replaces it).

`apply_cached` is how a tuned value reaches a plan: the plan of a ``k: auto`` host whose entry
exists carries the entry's method, draft, k and schedule, says so in its notes, and names the
entry in ``Plan.tuned``; the tune phase renders its chosen release through the same
`tuned_plan`, so the release verified on the host is the one the next run plans.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from specdec.plan import speculating
from specdec.plan_types import Plan
from specdec.tune import K_MAX, TuneResult
from specdec.tunestore import TuneStore, as_store

__all__ = ["apply_cached", "cache_key", "entry_id", "image_identity", "load", "store",
           "tuned_plan"]

Where = TuneStore | str | Path


def image_identity(image: str | None) -> str | None:
    """What identifies an image's contents: its digest when pinned (the same image pulled from
    a site's registry mirror, under another name, is the same entry), else its reference."""
    if image and "@" in image:
        return image.rsplit("@", 1)[1]
    return image


def cache_key(plan: Plan) -> dict[str, Any]:
    return {
        "device": plan.device, "engine": plan.engine,
        "engine_version": plan.engine_version, "runtime": plan.runtime,
        "image": image_identity(plan.image), "model": plan.model,
        "methods": [[m, d] for m, d in plan.tune_methods], "max_num_seqs": plan.max_num_seqs,
        "k_max": K_MAX,
    }


def entry_id(plan: Plan) -> str:
    raw = json.dumps(cache_key(plan), sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def load(cache: Where, plan: Plan) -> tuple[TuneResult, dict[str, Any]] | None:
    """The cached result for the plan's key and its metadata (None: absent or unreadable)."""
    try:
        text = as_store(cache).read(entry_id(plan))
        if text is None:
            return None
        doc = json.loads(text)
        if doc.get("key") != cache_key(plan):
            return None
        return TuneResult.from_dict(doc["result"]), dict(doc.get("meta") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(cache: Where, plan: Plan, result: TuneResult, meta: dict[str, Any]) -> str:
    """Write the entry (whole, atomically); returns where it went."""
    return as_store(cache).write(entry_id(plan), json.dumps(
        {"key": cache_key(plan), "result": result.to_dict(), "meta": meta}, indent=1) + "\n")


def tuned_plan(plan: Plan, result: TuneResult) -> Plan:
    """The plan running the tuned configuration (deterministic: same result, same plan)."""
    cfg = result.config
    return dataclasses.replace(
        speculating(plan, cfg.method, cfg.draft, cfg.k, cfg.k_by_batch), tuned=entry_id(plan),
        notes=(*plan.notes, f"tuned on the host: {cfg.label()} (tune cache entry "
                            f"{entry_id(plan)}; {result.objective})"))


def apply_cached(plan: Plan, cache: Where, reverify: bool) -> Plan:
    """The plan with its cached tuned values when it tunes k and an entry exists."""
    if not plan.k_auto or plan.tuned or reverify:
        return plan
    got = load(cache, plan)
    return tuned_plan(plan, got[0]) if got is not None else plan
