"""Section ``tune``: the product's tuner choosing n-gram k on the real engine, against an
exhaustive sweep of k.

A **tuner run** is the deploy's tune phase itself, `specdec.verify.phases.tune.run_tune` (the
search `specdec.tune.search.Search` with its `point_benches`, the baseline measured once,
`Search.choose`), on the plan the product makes for n-gram on x86-cpu, the plan's release
running first as after serve, with the product's `Bench` whose `activate` starts the point's
engine here (the unit the plan renders for that
k, `specdec.plan.planner.speculating`, as the tune phase renders it) and stops the one before:
one engine at a time, a restart per point, as on a host. No tune cache. Its choice is the c=1
k (with the engine's per-batch-size schedule, the k of batch 1..2).

The **sweep** measures every k of ``--sweep-ks`` (default 1..K_MAX) as the truth measures a
configuration: blocks of both arms back to back, the first alternating (c=1 only, 4 requests per
arm, `realbench.gatebench.block`), the baseline engine up throughout and one k engine at a time,
in passes of ``--sweep-blocks`` blocks per k (the k order rotating by pass) until the sweep's
bench seconds reach ``--sweep-factor`` × the tuner run's (`sweep_todo`). Each k's figure is its
c=1 throughput over the baseline's in its own blocks, so k engines up at different hours
compare through the same baseline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from realbench.gatebench import (
    LocalBench,
    LocalIO,
    Served,
    block,
    cases,
    label,
    make_ctx,
    start,
    tag,
)
from realbench.results import Results
from specdec.plan.planner import speculating
from specdec.plan.types import K_MAX, GatePolicy, Plan
from specdec.verify.phases.gate import Arm
from specdec.verify.phases.tune import release_files, run_tune
from specdec_lab.contract.runtime import Case, rendered


def point_case(plan: Plan, k: int) -> Case:
    """The n-gram k unit as the tune phase renders a point (`speculating`)."""
    p = speculating(plan, "ngram", None, k)
    return Case(f"{p.model}: ngram k={k}", p, rendered(p), (f"tune point k={k}",))


class Swapper:
    """One engine at a time, by release id (the tune phase's restarts)."""

    def __init__(self, by_rid: Mapping[str, Case], venv: Path, work: Path,
                 log: Callable[[str], None]) -> None:
        self.by_rid, self.venv, self.work, self.log = dict(by_rid), venv, work, log
        self.cur: Served | None = None
        self.starts = 0

    def url_of(self, rid: str) -> str:
        if self.cur is not None and self.cur.rid == rid:
            return self.cur.url
        self.stop()
        if rid not in self.by_rid:
            raise KeyError(f"the tuner asked for a release this benchmark did not render: {rid}")
        self.cur = start(self.by_rid[rid], self.venv, self.work, self.log)
        self.starts += 1
        return self.cur.url

    def stop(self) -> None:
        if self.cur is not None:
            self.cur.engine.stop()
            self.cur = None


def c1_k(cfg: Mapping[str, Any]) -> int:
    """The k a tuned configuration drafts at batch 1 (its schedule's first band, else k)."""
    sched = cfg.get("k_by_batch") or []
    return int(sched[0][2]) if sched else int(cfg["k"])


def tune_run(index: int, seed: int, commit: str, venv: Path, work: Path,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    cs = cases()
    plan, base_case = cs["ngram"].plan, cs["none"]
    by_rid = {release_files(c.plan)[0]: c
              for c in [base_case, cs["ngram"], *(point_case(plan, k)
                                                  for k in range(1, K_MAX + 1))]}
    cand, base = release_files(plan)[0], release_files(base_case.plan)[0]
    io = LocalIO(tag("u", "ngram", seed, index))
    eng = Swapper(by_rid, venv, work, log)
    t0 = time.monotonic()
    try:
        # the plan's release runs first, as after a deploy's serve
        ctx = make_ctx(plan, cand, base, io, eng.url_of(cand), cand, work, log)
        tuned, _ = run_tune(ctx, LocalBench(ctx, eng.url_of), Arm(base))
    finally:
        eng.stop()
    res = tuned.result
    curve: list[dict[str, Any]] = next((c["points"] for c in res.curves
                                        if c["method"] == "ngram"), [])
    return {"kind": "tune", "config": "ngram", "index": index, "seed": seed, "commit": commit,
            "chosen": res.config.to_dict(), "label": res.config.label(),
            "k_c1": c1_k(res.config.to_dict()), "bench_s": round(res.bench_seconds, 3),
            "io_bench_s": round(io.spent, 3), "wall_s": round(time.monotonic() - t0, 3),
            "engine_starts": eng.starts, "measured": res.measured,
            "curve_c1": {str(p["k"]): p.get("c1") for p in curve}}


def sweep_todo(counts: Mapping[int, int], spent: float, goal: float, blocks: int,
               max_passes: int) -> list[int]:
    """The ks to measure next (in this pass's order), [] when the sweep is done: every k has a
    whole pass more, ``blocks`` each, until the bench seconds reach ``goal`` with every pass
    complete, or ``max_passes`` passes."""
    ks = sorted(counts)
    if not ks or blocks < 1:
        return []
    low = min(counts.values())
    complete = all(n == counts[ks[0]] for n in counts.values()) and low % blocks == 0
    if low >= blocks * max_passes or (complete and low >= blocks and spent >= goal):
        return []
    p = low // blocks
    order = ks[p % len(ks):] + ks[:p % len(ks)]
    return [k for k in order if counts[k] < (p + 1) * blocks]


def sweep_name(k: int) -> str:
    return f"ngram k={k}"


def sweep(res: Results, args: Any, venv: Path, work: Path, commit: str, pol: GatePolicy,
          log: Callable[[str], None] = print) -> None:
    tunes = res.of("tune")
    goal = args.sweep_factor * (sum(float(r["bench_s"]) for r in tunes) / len(tunes)
                                if tunes else 0.0)
    cs = cases()
    base: Served | None = None
    try:
        while True:
            counts = {k: res.count("sweep", sweep_name(k)) for k in args.sweep_ks}
            spent = sum(float(r["bench_s"]) for k in counts
                        for r in res.of("sweep", sweep_name(k)))
            todo = sweep_todo(counts, spent, goal, args.sweep_blocks, args.sweep_max_passes)
            if not todo:
                return
            base = base or start(cs["none"], venv, work, log)
            target = (min(counts.values()) // args.sweep_blocks + 1) * args.sweep_blocks
            for k in todo:
                _sweep_k(res, k, target, base, cs["ngram"].plan, args, venv, work, commit,
                         pol, log)
    finally:
        if base is not None:
            base.engine.stop()


def _sweep_k(res: Results, k: int, target: int, base: Served, plan: Plan, args: Any,
             venv: Path, work: Path, commit: str, pol: GatePolicy,
             log: Callable[[str], None]) -> None:
    cand = start(point_case(plan, k), venv, work, log)
    urls = {"baseline": base.url, "candidate": cand.url}
    try:
        while (i := res.count("sweep", sweep_name(k))) < target:
            i = res.next_index("sweep", sweep_name(k))
            rec = block("sweep", sweep_name(k), urls, plan.served_model_name, i, args.seed,
                        commit, (1,), pol, code=str(k))
            res.append(rec)
            log(f"sweep {label(cand.case)} block #{i}: {rec['bench_s']:.0f} bench s")
    finally:
        cand.engine.stop()


def section(res: Results, args: Any, venv: Path, work: Path, commit: str,
            log: Callable[[str], None] = print) -> None:
    pol = GatePolicy()
    while (i := res.count("tune", "ngram")) < args.tune_runs:
        i = res.next_index("tune", "ngram")
        rec = tune_run(i, args.seed, commit, venv, work, log)
        res.append(rec)
        log(f"tuner run #{i}: chose {rec['label']} (c=1 k={rec['k_c1']}) in "
            f"{rec['bench_s']:.0f} bench s, {rec['engine_starts']} engine starts")
    sweep(res, args, venv, work, commit, pol, log)


def ks_arg(text: str) -> Sequence[int]:
    """``--sweep-ks``: k from 1 to K_MAX (one digit each: a block's prompt tag names its k)."""
    out = sorted({int(x) for x in text.split(",") if x.strip()})
    if not out or min(out) < 1 or max(out) > K_MAX:
        raise ValueError(f"--sweep-ks: expected k in 1..{K_MAX}, got {text!r}")
    return out
