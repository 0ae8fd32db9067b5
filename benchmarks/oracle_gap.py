"""Oracle gap: does the deploy keep (close to) the best speculation each lab host allows?

Not a test: it prints figures. Run: ``python3 benchmarks/oracle_gap.py [--trials 5]``.

For every host of `inventories/lab.py` (device, engine and model; method, draft and k left to
the deploy, as on a host that pins none of them):

* **the oracle**: every method the catalog and the engine release allow there (each one
  planned with ``specdec_method`` pinned: EAGLE-3 with the catalog head, each catalog draft
  model, n-gram; a method that does not fit or that the release refuses is left out) at every
  k in 1..`specdec.tune.K_MAX`, its truth from the emulator's pure engine core over the whole
  prompt set (`simlab.World.truth`, the deploy's ``max_tokens``, greedy). The best speedup is
  the highest c=1 throughput ratio among the setups the seed's rule keeps (gain ≥ 30%, TPOT
  p50 reduction ≥ 20%, c=8 ratio ≥ 1 − δ); 1.0 when none is kept (speculation off is then
  the best answer).
* **the deploy**: the plan (`specdec.plan.make_plan`, ``k: auto``), then the tune phase's
  search (`specdec.tune.Search`, the same points and choice the verify step makes) and the
  gate's rounds (`specdec.gate.decide`) on simulated benchmarks of the host
  (`simlab.World.bench`, with timing noise), ``--trials`` times with different seeds. Its
  speedup is the kept configuration's true c=1 throughput ratio, 1.0 when it disables.

Printed: per host the oracle's best, what the deploy kept (per trial), the worst and mean ratio
kept / best, and the tuning cost (points measured, engine restarts, device seconds of
benchmarking in the tune and in the gate).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from simlab import ROWS, Setup, Truth, World

from specdec.bench.prompts import builtin_prompts
from specdec.emulator.textgen import stable_int
from specdec.errors import SpecdecError
from specdec.gate import decide
from specdec.plan import make_plan
from specdec.plan_types import GatePolicy, Plan
from specdec.rounds import BenchSettings, round_bench
from specdec.tune import K_MAX, Config, Search

METHODS = ("eagle3", "draft_model", "ngram")


def host_data(row: int, **pins: Any) -> dict[str, Any]:
    _, device, engine, model = ROWS[row]
    return {"specdec_device": device, "specdec_engine": engine, "specdec_model": model,
            **pins}


def allowed(world: World, row: int) -> list[Plan]:
    """One plan per method (and draft) the catalog and the engine release allow on the row."""
    _, _, _, model = ROWS[row]
    out = []
    for method in METHODS:
        drafts = world.cat.models[model].drafts if method == "draft_model" else [None]
        for d in drafts:
            pins: dict[str, Any] = {"specdec_method": method}
            if d:
                pins["specdec_draft"] = d
            try:
                out.append(make_plan(ROWS[row][0], host_data(row, **pins), None))
            except SpecdecError:
                continue
    return out


def setup_of(row: int, plan_method: str, draft: str | None, k: int,
             k_by_batch: tuple[tuple[int, int, int], ...] = ()) -> Setup:
    # simlab finds EAGLE-3 heads in the catalog by itself
    return Setup(row, plan_method, None if plan_method == "eagle3" else draft, k,
                 k_by_batch=k_by_batch)


def keeps(t: Truth, pol: GatePolicy) -> bool:
    return (t.gain >= pol.keep_min_throughput_gain and t.tpot_red >= pol.keep_min_tpot_reduction
            and t.c8_ratio >= 1.0 - pol.max_regression_c8)


@dataclass
class Trial:
    kept: str
    speedup: float
    points: int
    restarts: int
    tune_s: float
    gate_s: float
    rounds: int


def per_batch(plan: Plan) -> bool:
    from specdec.phases.tune import per_batch_supported

    return per_batch_supported(plan)


def trial(world: World, row: int, plan: Plan, truths: dict[Any, Truth], pol: GatePolicy,
          bs: BenchSettings, seed: int, noise_req: float, noise_run: float,
          seeds: int) -> Trial:
    rng = random.Random(seed)
    search = Search(plan.tune_methods, pol, builtin_prompts().categories(), per_batch(plan),
                    plan.max_num_seqs)
    base = Setup(row)
    res, secs = world.bench(base, round_bench(bs, pol, "baseline", 0), rng.randrange(1 << 30),
                            rng, noise_req, noise_run)
    search.add_baseline(res, secs)
    first_base = res
    cfg: Config | None = Config(plan.method, plan.draft, plan.num_speculative_tokens)
    while cfg is not None:
        r, s = world.bench(setup_of(row, cfg.method, cfg.draft, cfg.k),
                           round_bench(bs, pol, "candidate", 0), rng.randrange(1 << 30), rng,
                           noise_req, noise_run)
        search.add(cfg, r, s)
        cfg = search.next()
    tuned = search.choose()
    c = tuned.config
    setup = setup_of(row, c.method, c.draft, c.k, c.k_by_batch)
    # the gate: round 1's baseline is the tune's; the candidate is measured afresh
    bases, cands = [first_base], []
    gate_s = 0.0
    levels, alloc = None, {}
    dec = None
    for rnd in range(pol.max_rounds):
        used = [x["prompt_id"] for cc in cands for x in
                (cc["concurrency"].get(str(pol.keep_concurrency)) or {}).get("requests", [])]
        for arm, out, st in (("candidate", cands, setup), ("baseline", bases, base)):
            if len(out) > rnd:
                continue
            r, s = world.bench(st, round_bench(bs, pol, arm, rnd, levels, alloc, used),
                               rng.randrange(1 << 30), rng, noise_req, noise_run)
            gate_s += s
            out.append(r)
        dec = decide(bases, cands, pol)
        if dec.decision != "inconclusive":
            break
        levels, alloc = dec.pending, dec.allocation
    assert dec is not None
    key = (c.method, c.draft, c.k, c.k_by_batch)
    if key not in truths:
        truths[key] = world.truth(setup, seeds, bs.max_tokens)
    kept = dec.decision == "keep"
    label = f"{c.method} k={c.k}" + ("" if not c.k_by_batch else " (per batch " + ", ".join(
        f"{lo}-{hi}: {kk}" for lo, hi, kk in c.k_by_batch) + ")")
    return Trial(label if kept else f"disabled (tuned {label})",
                 1.0 + truths[key].gain if kept else 1.0, len(tuned.measured),
                 # the running start point needs none; the baseline and every other point one;
                 # the gate: the chosen release, one switch per further round
                 len(tuned.measured) + dec.rounds, tuned.bench_seconds, gate_s, dec.rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--truth-seeds", type=int, default=2)
    ap.add_argument("--noise-req", type=float, default=0.05)
    ap.add_argument("--noise-run", type=float, default=0.03)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    t0 = time.monotonic()
    world, pol, bs = World(), GatePolicy(), BenchSettings()
    print(f"oracle gap: every lab host, every method the catalog and engine allow x k 1..{K_MAX} "
          f"(truth: emulator core, {a.truth_seeds} seeds, {bs.max_tokens} tokens, greedy) vs "
          f"what the deploy keeps (plan, tune, gate on simulated benchmarks with noise req "
          f"{a.noise_req:g}, run {a.noise_run:g}; {a.trials} trials)")
    print()
    print("| host | device, engine | oracle best (c=1 speedup) | deploy keeps (trials) | "
          "kept/best worst | mean | tune points | restarts | tune s | gate s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst_all = 1.0
    for row, (host, device, engine, _model) in enumerate(ROWS):
        plans = allowed(world, row)
        best, best_name = 1.0, "speculation off"
        truths: dict[Any, Truth] = {}
        for p in plans:
            for k in range(1, K_MAX + 1):
                t = world.truth(setup_of(row, p.method, p.draft, k), a.truth_seeds,
                                bs.max_tokens)
                truths[(p.method, p.draft, k, ())] = t
                if keeps(t, pol) and 1.0 + t.gain > best:
                    best = 1.0 + t.gain
                    best_name = f"{p.method} k={k}"
                if a.verbose:
                    print(f"    {host} {p.method} {p.draft or ''} k={k}: gain {t.gain:+.3f} "
                          f"TPOT {t.tpot_red:+.3f} c8 {t.c8_ratio:.3f}", flush=True)
        plan = make_plan(host, host_data(row), None)
        trials = [trial(world, row, plan, truths, pol, bs,
                        stable_int("oracle", a.seed, row, i), a.noise_req, a.noise_run,
                        a.truth_seeds) for i in range(a.trials)]
        ratios = [t.speedup / best for t in trials]
        worst_all = min(worst_all, min(ratios))
        kept: dict[str, int] = {}
        for t in trials:
            kept[t.kept] = kept.get(t.kept, 0) + 1
        cells = "; ".join(f"{k} x{n}" if n > 1 else k for k, n in kept.items())
        med = statistics.median
        print(f"| {host} | {device}, {engine} {plan.engine_version} | {best:.2f}x "
              f"({best_name}) | {cells} | {min(ratios):.1%} | {statistics.fmean(ratios):.1%} | "
              f"{med(t.points for t in trials):.0f} | {med(t.restarts for t in trials):.0f} | "
              f"{med(t.tune_s for t in trials):.0f} | {med(t.gate_s for t in trials):.0f} |",
              flush=True)
    print(f"\nworst kept/best over all hosts and trials: {worst_all:.1%} (target >= 95%)")
    print(f"(computed in {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
