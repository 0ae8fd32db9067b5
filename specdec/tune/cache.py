"""Tuned configurations, cached as fleet state so a re-run (on any control node) does not search
again. Where the cache lives is `specdec.tune.store`'s (one stated location, a directory or a
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

An entry is input, read back from a file anyone with access to the cache could have written:
`load_entry` checks its form (a regular file, JSON without NaN, one-line strings,
`specdec.config.readback`; a method of the catalog, a Hub repo id or none as the draft, k in
1..`K_MAX`, a schedule of contiguous batch ranges) and `load` what it means for the plan (its
key is the plan's; its method and draft are one of those the plan compares, so the draft is
the planned one, whose memory fit the plan checked, or none; a schedule only where the release
takes one). An entry that fails is ignored with one line in the plan's notes, and the host
searches again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.bench.onhost.stats import finite
from specdec.catalog import METHODS
from specdec.config import hygiene
from specdec.config.readback import check_tree, parse_json
from specdec.engines.registry import engine_of
from specdec.errors import ConfigError
from specdec.plan.planner import speculating
from specdec.plan.types import Plan
from specdec.tune.search import K_MAX, SPLIT, Config, TuneResult
from specdec.tune.store import MAX_ENTRY_BYTES, TuneStore, as_store

__all__ = ["Entry", "apply_cached", "cache_key", "entry_id", "image_identity", "load",
           "load_entry", "parse_entry", "store", "tuned_plan"]

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


@dataclass(frozen=True)
class Entry:
    """A tune cache entry whose form passed `load_entry`."""

    key: dict[str, Any]
    result: TuneResult
    meta: dict[str, Any]


def _int(v: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{what}={v!r}: must be an integer in {lo}..{hi}")
    return v


def _config(cfg: Any) -> None:
    if not isinstance(cfg, Mapping) or set(cfg) - {"method", "draft", "k", "k_by_batch"}:
        raise ValueError("result.config: not a tuned configuration (method, draft, k, "
                         "k_by_batch)")
    method, draft = cfg.get("method"), cfg.get("draft")
    if method not in METHODS or method == "none":
        raise ValueError(f"result.config.method={hygiene.show(method)}: not a speculative "
                         "method of the catalog")
    if draft is not None:
        try:
            hygiene.check_repo_id(None, "result.config.draft", draft)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    _int(cfg.get("k"), 1, K_MAX, "result.config.k")
    sched = cfg.get("k_by_batch") or []
    if not isinstance(sched, list) or len(sched) > 8:
        raise ValueError("result.config.k_by_batch: not a list of [start, end, k] ranges")
    nxt = 1
    for i, r in enumerate(sched):
        if not isinstance(r, list) or len(r) != 3:
            raise ValueError(f"result.config.k_by_batch[{i}]: not [start, end, k]")
        a = _int(r[0], nxt, nxt, f"result.config.k_by_batch[{i}][0]")
        b = _int(r[1], a, 4096, f"result.config.k_by_batch[{i}][1]")
        _int(r[2], 0, K_MAX, f"result.config.k_by_batch[{i}][2]")
        nxt = b + 1


def load_entry(cache: Where, entry: str, why: list[str] | None = None) -> Entry | None:
    """Entry ``entry`` of the store when its form is right (see the module doc); None when it
    is absent or bad (the reason, one line, appended to ``why``)."""
    try:
        text = as_store(cache).read(entry)
    except (OSError, ValueError) as exc:
        _bad(why, f"cannot read it ({getattr(exc, 'strerror', None) or exc})")
        return None
    if text is None:
        return None
    return parse_entry(text, why)


def parse_entry(text: str, why: list[str] | None = None) -> Entry | None:
    """An entry's text, checked (see the module doc); None when bad (the reason in ``why``)."""
    try:
        if len(text.encode()) > MAX_ENTRY_BYTES:
            raise ValueError("more than 1 MiB")
        doc = check_tree(parse_json(text.encode(), "entry"), "entry")
        if not isinstance(doc, dict) or set(doc) - {"key", "result", "meta"} \
                or not isinstance(doc.get("key"), dict) \
                or not isinstance(doc.get("result"), dict):
            raise ValueError("not a tune cache entry (key, result, meta)")
        res = doc["result"]
        _config(res.get("config"))
        for name in ("curves", "measured"):
            if not isinstance(res.get(name, []), list):
                raise ValueError(f"result.{name}: not a list")
        secs = res.get("bench_seconds", 0.0)
        if isinstance(secs, bool) or not isinstance(secs, int | float) or secs < 0 \
                or not math.isfinite(secs):
            raise ValueError(f"result.bench_seconds={secs!r}: not a duration")
        if not isinstance(res.get("objective", ""), str) or \
                not isinstance(doc.get("meta") or {}, dict):
            raise ValueError("result.objective or meta: wrong type")
        return Entry(doc["key"], TuneResult.from_dict(res), dict(doc.get("meta") or {}))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _bad(why, str(exc))
        return None


def _bad(why: list[str] | None, reason: str) -> None:
    if why is not None:
        why.append(" ".join(reason.split())[:200])


def _meaning(plan: Plan, entry: Entry) -> str | None:
    """Why ``entry`` does not fit ``plan``, or None."""
    if entry.key != cache_key(plan):
        return "its key is not this plan's"
    cfg = entry.result.config
    if (cfg.method, cfg.draft) not in plan.tune_methods:
        shown = cfg.method + (f" {hygiene.show(cfg.draft)}" if cfg.draft else "")
        return f"{shown} is not one of the methods this plan compares"
    # the draft is the planned one (its memory fit is the plan's) or none (n-gram)
    if cfg.draft not in (None, plan.draft) or not plan.fit.fits:
        return "its draft does not fit this plan"
    if cfg.k_by_batch and not _takes(plan, cfg):
        return "a per-batch-size schedule this release or max_num_seqs cannot take"
    return None


def _takes(plan: Plan, cfg: Config) -> bool:
    """Whether the plan's release takes ``cfg``'s schedule for its method, within max_num_seqs
    (TensorRT-LLM: never drafting more above the first range)."""
    engine = engine_of(plan)
    if not engine.per_batch_k(speculating(plan, cfg.method, cfg.draft, cfg.k)):
        return False
    if engine.schedule_nonincreasing() and max(r[2] for r in cfg.k_by_batch) > \
            cfg.k_by_batch[0][2]:
        return False
    return cfg.k_by_batch[-1][1] <= max(plan.max_num_seqs, SPLIT + 1)


def load(cache: Where, plan: Plan, why: list[str] | None = None
         ) -> tuple[TuneResult, dict[str, Any]] | None:
    """The cached result for the plan's key and its metadata (None: absent, or bad: the reason
    in ``why``)."""
    entry = load_entry(cache, entry_id(plan), why)
    if entry is None:
        return None
    problem = _meaning(plan, entry)
    if problem is not None:
        _bad(why, problem)
        return None
    return entry.result, entry.meta


def store(cache: Where, plan: Plan, result: TuneResult, meta: dict[str, Any]) -> str:
    """Write the entry (whole, atomically); returns where it went."""
    doc = finite({"key": cache_key(plan), "result": result.to_dict(), "meta": meta})
    return as_store(cache).write(entry_id(plan), json.dumps(doc, indent=1, allow_nan=False)
                                 + "\n")


def tuned_plan(plan: Plan, result: TuneResult) -> Plan:
    """The plan running the tuned configuration (deterministic: same result, same plan)."""
    cfg = result.config
    return dataclasses.replace(
        speculating(plan, cfg.method, cfg.draft, cfg.k, cfg.k_by_batch), tuned=entry_id(plan),
        notes=(*plan.notes, f"tuned on the host: {cfg.label()} (tune cache entry "
                            f"{entry_id(plan)}; {result.objective})"))


def apply_cached(plan: Plan, cache: Where, reverify: bool) -> Plan:
    """The plan with its cached tuned values when it tunes k and a good entry exists; a bad
    entry is ignored with one line in the notes (the host searches again)."""
    if not plan.k_auto or plan.tuned or reverify:
        return plan
    why: list[str] = []
    got = load(cache, plan, why)
    if got is not None:
        return tuned_plan(plan, got[0])
    if why:
        note = f"tune cache entry {entry_id(plan)} ignored: {why[0]}; searching again"
        return dataclasses.replace(plan, notes=(*plan.notes, note))
    return plan
