"""Oracle gap: does the deploy keep (close to) the best speculation each lab host allows, also in
a world whose speculation does not follow the tuner's model?

Not a test: it prints figures. Run: ``python3 benchmarks/oracle_gap.py [--trials 3] [--seeds
A,B,C] [--prompt-spread 0,0.05]``.

**Held-out seeds decide "met"** (`heldout`): the trials run on `heldout.MIN_SEEDS` seeds derived
from the date by default (printed; ``--seeds`` repeats a run), none of those development used
(`heldout.DEV_SEEDS`); the worst kept/best per world is printed as min / median / max over the
seeds, "met" only when the worst seed's is at least 95%.

For every host of `inventories/lab.py` (device, engine and model; method, draft and k left to
the deploy, as on a host that pins none of them), and for lab-nx once more as deployed (its
pinned draft model at k=5 on the vLLM 0.9.2 image: no tuning, the gate only):

* **the oracle**: every method the catalog and the engine release allow there (each one
  planned with ``specdec_method`` pinned: EAGLE-3 with the head the release loads, each catalog
  draft model, n-gram; a method that does not fit or that the release refuses is left out) at
  every k in 1..`K_ORACLE` (16: vLLM has no upper bound on ``num_speculative_tokens`` but its
  rejection sampler's ``MAX_SPEC_LEN``, 128 from 0.11.0 and 32 in 0.9.2,
  vllm/v1/sample/rejection_sampler.py; TensorRT-LLM's ``max_draft_len`` limit was not read;
  16 is twice the tuner's domain, and by then every acceptance model's chain has run out:
  0.97^16 < 0.62 at the best positions, EAGLE-3 chat positions are near 0.0), and, where the
  release has ``num_speculative_tokens_per_batch_size`` (vLLM >= 0.24), every schedule: a c=1
  k and, for batches of 3 and more, its own k or speculation off. Its truth comes from the
  emulator's pure engine core over the whole prompt set (`simlab.World.truth`, the deploy's
  ``max_tokens``, greedy). The best speedup is the highest c=1 throughput ratio among the setups
  the seed's rule keeps (gain ≥ 30%, TPOT p50 reduction ≥ 20%, c=8 ratio ≥ 1 − δ); 1.0 when
  none is kept (speculation off is then the best answer).
* **the deploy**: the plan (`specdec.plan.planner.make_plan`, ``k: auto``), then the tune phase's
search
  (`specdec.tune.search.Search`, the same points and choice the verify step makes) and the gate's
  rounds (`specdec.gate.decide.decide`) on simulated benchmarks of the host (`simlab.World.bench`,
  with timing noise), ``--trials`` times with different seeds. Its speedup is the kept
  configuration's true c=1 throughput ratio, 1.0 when it disables.
* **both worlds** (``--variants``): ``chain`` (the emulator's default: the tuner's own model of
  acceptance and step time) and ``measured`` (acceptance that is not an exact chain, drafting
  cost concave in k from vLLM issue #20780: `specdec_lab.emulator.acceptance`), so the tuner's model
  is tested, not assumed. The ``measured`` world is a **stress model**, not measurements: its
  ``DILUTION`` (0.025 per extra drafted token) is stated, not measured (the published sweeps
  are consistent with a chain within their noise).
* **per-prompt spread** (``--prompt-spread``): each world also with every prompt's acceptance
  offset within its category (`specdec_lab.emulator.acceptance.prompt_offset`, a stated stress
  of sd 0.05), which neither the tuner's curve nor the gate's strata model.

Printed per world and host: the oracle's best, what the deploy kept (per trial), the worst and
mean ratio kept / best, and the tuning cost (points measured, engine restarts, device seconds
of benchmarking in the tune and in the gate).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fleetinputs
from heldout import Target, add_seed_args, judge, seeds_from, seeds_line
from simlab import PINS, ROWS, Noise, Setup, Truth, World, add_spread_arg, spreads_from

from specdec.bench.prompts import builtin_prompts
from specdec.errors import SpecdecError
from specdec.gate.decide import decide
from specdec.gate.rounds import BenchSettings, round_bench
from specdec.plan.planner import make_plan
from specdec.plan.types import GatePolicy, Plan
from specdec.tune.search import K_MAX, Config, Search, point_benches
from specdec.verify.phases.tune import per_batch_supported
from specdec_lab.emulator.acceptance import DILUTION
from specdec_lab.emulator.textgen import stable_int

METHODS = ("eagle3", "draft_model", "ngram")
K_ORACLE = 16
DEPLOYED = "lab-nx"  # also measured as deployed (its inventory pins)


@dataclass(frozen=True)
class Host:
    row: int
    label: str
    data: dict[str, Any]  # host data to plan it with


def hosts() -> list[Host]:
    out = []
    for row, (host, device, engine, model) in enumerate(ROWS):
        base = {"specdec_device": device, "specdec_engine": engine, "specdec_model": model}
        out.append(Host(row, host if host != DEPLOYED else f"{host} (tuned)", base))
        if host == DEPLOYED:
            out.append(Host(row, f"{host} (as deployed)", {**base, **PINS[host]}))
    return out


def allowed(h: Host) -> list[Plan]:
    """One plan per method (and draft) the catalog and the engine release allow on the host."""
    out = []
    drafts_of = World().cat.models[ROWS[h.row][3]].drafts
    pinned = {k: v for k, v in h.data.items() if k in ("specdec_image", "specdec_device",
                                                         "specdec_engine", "specdec_model")}
    for method in METHODS:
        for d in (drafts_of if method == "draft_model" else [None]):
            pins: dict[str, Any] = {**pinned, "specdec_method": method}
            if d:
                pins["specdec_draft"] = d
            try:
                out.append(make_plan(ROWS[h.row][0], pins, None))
            except SpecdecError:
                continue
    return out


def keeps(t: Truth, pol: GatePolicy, c8: float | None = None) -> bool:
    return (t.gain >= pol.keep_min_throughput_gain and t.tpot_red >= pol.keep_min_tpot_reduction
            and (t.c8_ratio if c8 is None else c8) >= 1.0 - pol.max_regression_c8)


@dataclass
class Trial:
    kept: str
    speedup: float
    points: int
    restarts: int
    tune_s: float
    gate_s: float


def gate(world: World, pol: GatePolicy, bs: BenchSettings, rng: random.Random, setup: Setup,
         base: Setup, first_base: dict[str, Any] | None, noise: Noise
         ) -> tuple[Any, float]:
    """The gate's rounds (round 1's baseline may come from the tune)."""
    bases = [first_base] if first_base is not None else []
    cands: list[dict[str, Any]] = []
    gate_s, levels, alloc, scale, dec = 0.0, None, {}, {}, None
    base_scale = 1.0
    for rnd in range(pol.max_rounds):
        used = [x["prompt_id"] for cc in cands for x in
                (cc["concurrency"].get(str(pol.keep_concurrency)) or {}).get("requests", [])]
        for arm, out, st in (("candidate", cands, setup), ("baseline", bases, base)):
            if len(out) > rnd:
                continue
            r, s = world.bench(st, round_bench(bs, pol, arm, rnd, levels, alloc, used, scale,
                                               base_scale),
                               rng.randrange(1 << 30), rng, noise)
            gate_s += s
            out.append(r)
        dec = decide(bases, cands, pol)
        if dec.decision != "inconclusive":
            break
        levels, alloc, scale = dec.pending, dec.allocation, dec.scale
        base_scale = dec.baseline_scale
    return dec, gate_s


WorldKey = tuple[str, float]  # (acceptance variant, per-prompt spread)


def trial(world: World, h: Host, plan: Plan, truths: dict[Any, Truth], pol: GatePolicy,
          bs: BenchSettings, seed: int, noise: Noise, seeds: int, w: WorldKey) -> Trial:
    rng = random.Random(seed)
    variant, spread = w
    base = Setup(h.row, variant=variant)
    first_base = None
    points, tune_s = 0, 0.0
    if plan.k_auto:
        search = Search(plan.tune_methods, pol, builtin_prompts().categories(),
                        per_batch_supported(plan), plan.max_num_seqs)
        first_base, secs = world.bench(base, round_bench(bs, pol, "baseline", 0),
                                       rng.randrange(1 << 30), rng, noise)
        search.add_baseline(first_base, secs)
        cfg: Config | None = Config(plan.method, plan.draft, plan.num_speculative_tokens)
        while cfg is not None:
            st = Setup(h.row, cfg.method, cfg.draft, cfg.k, variant=variant, spread=spread)
            runs = [world.bench(st, rb, rng.randrange(1 << 30), rng, noise)
                    for rb in point_benches(bs, pol, search.first_round(cfg))]
            search.add(cfg, runs[0][0], sum(s for _, s in runs), [r for r, _ in runs[1:]])
            cfg = search.next()
        tuned = search.choose()
        c = tuned.config
        points, tune_s = len(tuned.measured), tuned.bench_seconds
    else:
        c = Config(plan.method, plan.draft, plan.num_speculative_tokens)
    setup = Setup(h.row, c.method, c.draft, c.k, k_by_batch=c.k_by_batch, variant=variant,
                  spread=spread)
    dec, gate_s = gate(world, pol, bs, rng, setup, base, first_base, noise)
    key = (c.method, c.draft, c.k, c.k_by_batch)
    if key not in truths:
        truths[key] = world.truth(setup, seeds, bs.max_tokens)
    kept = dec.decision == "keep"
    label = f"{c.method} k={c.k}" + ("" if not c.k_by_batch else " (per batch " + ", ".join(
        f"{lo}-{hi}: {kk}" for lo, hi, kk in c.k_by_batch) + ")")
    # restarts: the baseline and every tune point but the running one; the gate's switches
    restarts = (points + 1 if plan.k_auto else 0) + dec.rounds
    return Trial(label if kept else f"disabled ({label})",
                 1.0 + truths[key].gain if kept else 1.0, points, restarts, tune_s, gate_s)


def oracle(world: World, h: Host, plans: list[Plan], pol: GatePolicy, seeds: int,
           max_tokens: int, w: WorldKey) -> tuple[float, str, dict[Any, Truth]]:
    best, name = 1.0, "speculation off"
    truths: dict[Any, Truth] = {}
    for p in plans:
        draft = p.draft
        per_k = {k: world.truth(Setup(h.row, p.method, draft, k, variant=w[0], spread=w[1]),
                                seeds, max_tokens) for k in range(1, K_ORACLE + 1)}
        for k, t in per_k.items():
            truths[(p.method, draft, k, ())] = t
        # a schedule: c=8 runs its own k (or none: the baseline, ratio 1) where the release can
        c8_best = max([1.0, *(t.c8_ratio for t in per_k.values())]) \
            if per_batch_supported(p) else None
        for k, t in per_k.items():
            if keeps(t, pol, c8_best) and 1.0 + t.gain > best:
                best, name = 1.0 + t.gain, f"{p.method} k={k}" + (
                    "" if c8_best is None else " (c=8 its best k)")
    return best, name, truths


def evaluate(args: tuple[int, WorldKey, argparse.Namespace, list[int]]
             ) -> tuple[str, dict[int, float], list[Trial]]:
    """One host in one world: its table row over every seed's trials, each seed's worst
    kept/best and the trials (worker process)."""
    i, w, a, seeds = args
    h = hosts()[i]
    world, pol, bs = World(), GatePolicy(), BenchSettings()
    noise = Noise(a.noise_req, a.noise_run)
    plans = allowed(h)
    best, best_name, truths = oracle(world, h, plans, pol, a.truth_seeds, bs.max_tokens, w)
    plan = make_plan(ROWS[h.row][0], h.data, None)
    by_seed = {seed: [trial(world, h, plan, truths, pol, bs, stable_int("oracle", seed, i, n),
                            noise, a.truth_seeds, w) for n in range(a.trials)]
               for seed in seeds}
    trials = [t for ts in by_seed.values() for t in ts]
    ratios = [t.speedup / best for t in trials]
    worst = {seed: min(t.speedup / best for t in ts) for seed, ts in by_seed.items()}
    kept: dict[str, int] = {}
    for t in trials:
        kept[t.kept] = kept.get(t.kept, 0) + 1
    cells = "; ".join(f"{k} x{n}" if n > 1 else k for k, n in kept.items())
    med = statistics.median
    _, device, engine, _ = ROWS[h.row]
    return (f"| {h.label} | {device}, {engine} {plan.engine_version} | {best:.2f}x "
            f"({best_name}) | {cells} | {' / '.join(f'{v:.1%}' for v in worst.values())} | "
            f"{min(ratios):.1%} | {statistics.fmean(ratios):.1%} | "
            f"{med(t.points for t in trials):.0f} | {med(t.restarts for t in trials):.0f} | "
            f"{med(t.tune_s for t in trials):.0f} | {med(t.gate_s for t in trials):.0f} |",
            worst, trials)


def world_name(w: WorldKey) -> str:
    variant, spread = w
    return variant + (" (stress model)" if variant == "measured" else "") + (
        f" + per-prompt spread {spread:g}" if spread else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=3, help="trials per host and seed")
    add_seed_args(ap)
    ap.add_argument("--truth-seeds", type=int, default=2)
    ap.add_argument("--noise-req", type=float, default=0.05)
    ap.add_argument("--noise-run", type=float, default=0.03)
    ap.add_argument("--variants", default="chain,measured")
    add_spread_arg(ap)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--write-inputs", metavar="FILE", help="write the per-device tune costs "
                    "to FILE's tune section (benchmarks/fleetinputs.py; fleet_sim.py reads it)")
    ap.add_argument("--hosts", default="",
                    help="comma-separated host labels to run (default: every host)")
    a = ap.parse_args()
    labels = [h.label for h in hosts()]
    want = [x.strip() for x in a.hosts.split(",") if x.strip()]
    bad = [x for x in want if x not in labels]
    if bad:
        ap.error(f"--hosts: no host {bad[0]!r} (hosts: {', '.join(labels)})")
    seeds = seeds_from(a, ap, "oracle-gap")
    spreads = spreads_from(a, ap)
    picked = [i for i, lab in enumerate(labels) if not want or lab in want]
    t0 = time.monotonic()
    at = fleetinputs.commit()  # what the figures were computed on
    bs = BenchSettings()
    worlds = [(v, sp) for v in a.variants.split(",") if v for sp in spreads]
    print(f"oracle gap: every lab host, every method the catalog and engine allow x k "
          f"1..{K_ORACLE} (and per-batch-size schedules where the release has them; the tuner "
          f"searches 1..{K_MAX}); truth: emulator core, {a.truth_seeds} seeds, {bs.max_tokens} "
          f"tokens, greedy; vs what the deploy keeps (plan, tune, gate on simulated benchmarks "
          f"with noise req {a.noise_req:g}, run {a.noise_run:g}; {a.trials} trials per seed); "
          + seeds_line(seeds, bool(a.seeds)))
    worst: dict[WorldKey, dict[int, float]] = {}
    cost: dict[str, list[Trial]] = {}  # device -> its tuned hosts' trials (chain, no spread)
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for w in worlds:
            print(f"\nworld: {world_name(w)}"
                  + ("" if w[0] != "measured" else f": acceptance diluted {DILUTION:g} per extra "
                     "drafted token and a concave drafting cost, a stated stress, not "
                     "measurements")
                  + ("" if not w[1] else f"; each prompt's acceptance offset by its own draw "
                     f"of sd {w[1]:g} within its category, a stated stress") + "\n")
            print("| host | device, engine | oracle best (c=1 speedup) | deploy keeps (trials) "
                  f"| kept/best worst per seed ({', '.join(map(str, seeds))}) | worst | mean | "
                  "tune points | restarts | tune s | gate s |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for i, (text, by_seed, trials) in zip(
                    picked, ex.map(evaluate, [(i, w, a, seeds) for i in picked]), strict=True):
                print(text, flush=True)
                if w == ("chain", 0.0) and "as deployed" not in text:
                    cost.setdefault(ROWS[hosts()[i].row][1], []).extend(trials)
                if "as deployed" not in text:
                    got = worst.setdefault(w, {})
                    for seed, v in by_seed.items():
                        got[seed] = min(got.get(seed, 1.0), v)
    print("\ntargets (worst kept/best over the tuned hosts and trials, per seed):")
    for w, by_seed in worst.items():
        print("  " + judge(Target(f"tuner, world {world_name(w)}", 0.95, higher=True,
                                  fmt="{:.1%}"), by_seed)[1])
    if a.write_inputs:
        write_inputs(Path(a.write_inputs), cost, seeds, a.trials, at)
    print(f"(computed in {time.monotonic() - t0:.0f} s)")
    return 0


def write_inputs(path: Path, cost: dict[str, list[Trial]], seeds: list[int], trials: int,
                 at: str) -> None:
    """benchmarks/fleetinputs.py's ``tune`` section: per device, the medians of a tuning host."""
    if not cost:
        print(f"--write-inputs: nothing written to {path} (needs the chain world without "
              "per-prompt spread)")
        return
    med = statistics.median
    fleetinputs.update(path, "tune", {
        "seeds": seeds, "trials_per_seed": trials, "world": "chain",
        "kinds": {dev: {"restarts_tune": med(t.restarts for t in ts),
                        "tune_bench_s": round(med(t.tune_s for t in ts), 1),
                        "gate_bench_s": round(med(t.gate_s for t in ts), 1),
                        "trials": len(ts)} for dev, ts in sorted(cost.items())}}, at)
    print(f"wrote the tune section of {path}")


if __name__ == "__main__":
    sys.exit(main())
