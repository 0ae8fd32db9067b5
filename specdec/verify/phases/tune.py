"""Tune: search k (and the method, when the plan may) on the host; see `specdec.tune.search`.

Every point is a release of its own (the unit carries k), rendered from the plan with the
point's method, draft and k, uploaded, started, checked and benchmarked with the gate's round-1
candidate settings. The baseline's round-1 benchmark is measured once and shared with the gate.
The chosen configuration becomes the plan `specdec.tune.cache.tuned_plan` makes (the next run
plans the same release from the cache) and its release is rendered here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec.bench.prompts import builtin_prompts
from specdec.engines.registry import engine_of
from specdec.plan.planner import speculating
from specdec.plan.types import POINTS_PER_METHOD, Plan
from specdec.render.files import render
from specdec.tune.cache import entry_id, store, tuned_plan
from specdec.tune.search import Config, Search, TuneResult, point_benches
from specdec.verify.phases.bench import Bench
from specdec.verify.phases.gate import Arm
from specdec.verify.phases.host import Ctx, VerifyFailure
from specdec.verify.progress import eta_text
from specdec.verify.spec import FileSpec

__all__ = ["Tuned", "per_batch_supported", "release_files", "run_tune"]


@dataclass(frozen=True)
class Tuned:
    plan: Plan
    release: str
    files: tuple[FileSpec, ...]
    result: TuneResult


def per_batch_supported(plan: Plan) -> bool:
    """Whether the plan's engine release has ``num_speculative_tokens_per_batch_size``."""
    return engine_of(plan).per_batch_k(plan)


def release_files(plan: Plan) -> tuple[str, tuple[FileSpec, ...]]:
    """A plan's release id and its files as the verifier uploads them."""
    r = render(plan)
    return r.release_id, r.release_files


def _point_plan(plan: Plan, cfg: Config) -> Plan:
    return speculating(plan, cfg.method, cfg.draft, cfg.k, cfg.k_by_batch)


def run_tune(ctx: Ctx, bench: Bench, base: Arm) -> tuple[Tuned, dict[str, Any]]:
    """The tuned release, and the baseline's round-1 result (for the gate)."""
    plan = ctx.spec.plan
    t0 = ctx.io.monotonic()
    engine = engine_of(plan)
    # which compared methods the release schedules per batch size (TensorRT-LLM: EAGLE-3 only)
    schedulable = [m for m, d in plan.tune_methods
                   if engine.per_batch_k(speculating(plan, m, d, plan.num_speculative_tokens))]
    search = Search(plan.tune_methods, plan.gate, builtin_prompts().categories(),
                    bool(schedulable), plan.max_num_seqs, schedulable=schedulable,
                    nonincreasing=engine.schedule_nonincreasing())
    start = Config(plan.method, plan.draft, plan.num_speculative_tokens)
    baseline, restarts = _search(ctx, bench, base, search, start)
    result = search.choose()
    tplan = tuned_plan(plan, result)
    rid, files = release_files(tplan)
    _record(ctx, result, tplan, rid, ctx.io.monotonic() - t0, restarts)
    return Tuned(tplan, rid, files, result), baseline


def _search(ctx: Ctx, bench: Bench, base: Arm, search: Search, start: Config
            ) -> tuple[dict[str, Any], int]:
    """The baseline measured once and every point the search asks for (what runs now first:
    no restart); the baseline's result and how many times the engine restarted."""
    restarts = 0
    if ctx.running == ctx.spec.candidate:
        restarts += _point(ctx, bench, search, start, start)
    restarts += ctx.running != base.release
    baseline, took = bench.baseline(base.release, base.files)
    try:
        search.add_baseline(baseline, took)
    except ValueError as exc:
        raise VerifyFailure("tune", str(exc)) from None
    cfg: Config | None = search.next() if search.order else start
    spent, most = 0.0, POINTS_PER_METHOD * len(search.methods)
    while cfg is not None:
        t0 = ctx.io.monotonic()
        restarted = _point(ctx, bench, search, cfg, start)
        restarts += restarted
        spent += ctx.io.monotonic() - t0
        ctx.event(f"measured {cfg.label()} ({'a restart' if restarted else 'more rounds'}; "
                  f"{restarts} of at most {most} restarts{eta_text(restarts, most, spent)})")
        cfg = search.next()
    return baseline, restarts


def _point(ctx: Ctx, bench: Bench, search: Search, cfg: Config, start: Config) -> bool:
    """Run and benchmark one point (``start``: the plan's own release); whether the engine
    restarted for it."""
    plan = ctx.spec.plan
    rid, files = ((ctx.spec.candidate, ()) if cfg == start
                  else release_files(_point_plan(plan, cfg)))
    restarted = ctx.running != rid
    bench.activate(rid, f"tune {cfg.label()}", files)
    results, took = [], 0.0
    first = search.first_round(cfg)
    for n, rb in enumerate(point_benches(ctx.spec.bench, plan.gate, first), start=first + 1):
        res, s = bench.measure("candidate", rid, rb, n, name=f"tune.{cfg.method}.k{cfg.k}")
        results.append(res)
        took += s
    try:
        search.add(cfg, results[0], took, results[1:])
    except ValueError as exc:
        raise VerifyFailure("tune", str(exc)) from None
    return restarted


def _record(ctx: Ctx, result: TuneResult, tplan: Plan, rid: str, wall: float,
            restarts: int) -> None:
    """The choice in the tune cache (when there is one) and in the host's report."""
    plan = ctx.spec.plan
    where = ctx.spec.tune_cache
    cache = None
    if where is not None:
        try:
            cache = store(where, plan, result, {"host": plan.host, "run_id": ctx.spec.run_id,
                                                "release": rid})
        except OSError:
            ctx.event(f"could not write the tune cache at {where.location}")
    ctx.report["tune"] = {
        **result.to_dict(), "release": rid, "plan_release": ctx.spec.candidate,
        "wall_seconds": round(wall, 3), "restarts": restarts, "cache": cache,
        "cache_entry": entry_id(plan) if where is not None else None,
    }
    ctx.report.update(method=tplan.method, draft=tplan.draft,
                      num_speculative_tokens=tplan.num_speculative_tokens,
                      k_by_batch=[list(r) for r in tplan.k_by_batch])
    ctx.measure("tune", "chosen", result.config.label(), release=rid,
                bench_seconds=round(result.bench_seconds, 3), wall_seconds=round(wall, 3),
                points=len(result.measured), restarts=restarts)
    ctx.event(f"tuned: {result.config.label()} after {len(result.measured)} point(s) in "
              f"{wall:.1f}s; release {rid}")
