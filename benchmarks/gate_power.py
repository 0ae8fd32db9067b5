"""Gate power: how often does the gate decide wrong in the field's noise, and how long does it take?

Not a test: it prints figures. Run: ``python3 benchmarks/gate_power.py [--scenarios 200]
[--seeds A,B,C] [--prompt-spread 0,0.05]`` (about 13 min per world on two busy cores).

**Held-out seeds decide "met"** (`heldout`): by default the run draws its scenarios on
`heldout.MIN_SEEDS` seeds derived from the date (printed; ``--seeds`` repeats a run), none of
the seeds development used (`heldout.DEV_SEEDS`), prints each target's figure as min / median /
max over them, and says "met" only when the worst seed meets it.

**Two worlds** (``--prompt-spread``): ``0``, the emulator's acceptance varying only by the four
prompt categories the gate stratifies on, and a per-prompt spread within a category that the
gate does not model (`specdec_lab.emulator.acceptance.prompt_offset`, 0.05: a stated stress),
each with its own truth and its own targets.

Each scenario is a speculation setup on one of the lab's hosts (every host of
`inventories/lab.py`, with its device, engine and model): a method that exists for it (EAGLE-3
where the catalog has a head and advises it on the device, a catalog draft model, n-gram —
whose TPOT is two-peaked over the prompt categories), ``k`` from 1 to 6 and an
acceptance-degradation knob (sampling temperature 0..1.5). About a third get a concurrency-8
variant: speculation off above batch 2 (TRT-LLM's ``max_concurrency``), then neutral, slightly
slower (steps with more than 2 sequences 0-5% slower) or clearly slower (15-40%). The *truth*
comes from the emulator's pure engine core over the whole built-in prompt set and several seeds,
at the deploy's ``max_tokens`` (`simlab.World.truth`), and the seed's rule applied to it: keep
when the c=1 gain ≥ 30%, the c=1 TPOT p50 reduction ≥ 20% and the c=8 ratio ≥ 1 − δ.

A scenario whose truth is within the policy's indifference zone (``indifference`` m, on the log
of the ratio to a threshold that decides its truth: within ±m of a c=1 keep threshold, or a c=8
ratio from (1 − δ)·e^−m up to 1 − δ; the zone the gate's guarantee leaves out,
`specdec.gate.decide`)
is drawn, decided and reported in its own columns (how often the gate differs from the truth
there), not in the wrong-decision rate.

Each scenario is decided the way the deploy's verify step decides it (`specdec.verify.phases.gate`):
rounds of both arms, the arm that runs first measured first (the candidate in round 1: it was
just released), then one switch, so the order alternates round after round; each arm with the
deploy's `specdec.gate.rounds.BenchSettings` for the levels, requests and categories the gate
asks for (`specdec.gate.rounds.round_bench`); `specdec.gate.decide.decide` after each round until
it answers.
Once per **noise case** (`simlab.Noise`): the policy's own noise (1×: 5% per request, 3% per
run and level), 1.5× and 2× of it, heavy tails (3% of requests 3× slower), drift (the host
slowing linearly over each round by up to 10%, each round its own) and a fixed bias (the
candidate's runs 5% slower than the baseline's).

Printed per case: wrong decisions outside the zone (wrong keeps, wrong disables, wrong disables
of a true gain ≥ +40%), how often the gate differs from the truth inside the zone, the regret
(c=1 throughput lost against the seed's rule applied to the truth, over every drawn scenario),
device seconds of benchmarking per decision (warmup, every level of both arms, every round) and
the same with the engine restarts the switches cost (`simlab.restart_s`, cited there).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from heldout import (
    DEV_SEEDS,
    Target,
    add_seed_args,
    judge,
    seeds_from,
    seeds_line,
)
from simlab import ROWS, Noise, Setup, Truth, World, add_spread_arg, restart_s, spreads_from

from specdec.catalog import load_catalog
from specdec.gate.decide import decide
from specdec.gate.rounds import BenchSettings, round_bench
from specdec.plan.types import GatePolicy
from specdec_lab.emulator.textgen import stable_int

BASE_NOISE = Noise(req=0.05, run=0.03)
CASES: dict[str, Noise] = {
    "none": Noise(),
    "1x": BASE_NOISE,
    "1.5x": BASE_NOISE.scaled(1.5),
    "2x": BASE_NOISE.scaled(2.0),
    "tails": replace(BASE_NOISE, tail_p=0.03, tail_f=3.0),
    "drift": replace(BASE_NOISE, drift=0.10),
    "bias": replace(BASE_NOISE, bias=0.05),
}
TITLES = {"none": "none", "1x": "1× (req 5%, run 3%)", "1.5x": "1.5×", "2x": "2×",
          "tails": "1× + 3% of requests 3× slow", "drift": "1× + drift ≤10% per round",
          "bias": "1× + candidate runs 5% slower"}
BIG_GAIN = 0.40  # never a wrong disable of a true gain this large


@dataclass
class Scenario:
    name: str
    setup: Setup
    truth: Truth | None = None

    def verdict(self, delta: float) -> str:
        return "keep" if min(self.distances(delta)) >= 0 else "disable"

    def distances(self, delta: float) -> list[float]:
        t = self.truth
        assert t is not None
        return [math.log((1.0 + t.gain) / 1.30), math.log(0.80 / max(1e-9, 1.0 - t.tpot_red)),
                math.log(max(1e-9, t.c8_ratio) / (1.0 - delta))]

    def margin(self, delta: float) -> float:
        """Distance to the threshold that decides the truth, in the sense of the policy's
        indifference zone (keep: the nearest keep threshold — the c=8 rule's zone lies below
        its tolerance, so a c=8 ratio at or above 1 − δ is never in it; disable: the clearest
        failing rule)."""
        d = self.distances(delta)
        return min(d[:2]) if min(d) >= 0 else -min(d)

    def kind(self) -> str:
        f = self.setup.c8_factor
        if f is None:
            return self.setup.method
        return "c8 neutral/slight" if f >= 0.95 else "c8 regressing"

    def regret(self, decision: str, delta: float) -> float:
        """c=1 throughput lost against the truth's decision (a share of the truth's)."""
        t = self.truth
        assert t is not None
        ref = 1.0 + t.gain if self.verdict(delta) == "keep" else 1.0
        got = 1.0 + t.gain if decision == "keep" else 1.0
        return (ref - got) / ref


def draw(rng: random.Random) -> Scenario:
    cat = load_catalog()
    row = rng.randrange(len(ROWS))
    _, device, _, model = ROWS[row]
    m = cat.models[model]
    choices: list[tuple[str, str | None]] = [("ngram", None)]
    if m.heads.get("eagle3") and cat.device(device).eagle3:
        choices.append(("eagle3", None))
    choices += [("draft_model", d) for d in m.drafts]
    method, draft = rng.choice(choices)
    k = rng.randint(1, 6)
    temp = round(rng.uniform(0.0, 1.5), 3)
    c8: float | None = None
    if rng.random() < 0.35:
        kind = rng.randrange(3)
        c8 = 1.0 if kind == 0 else rng.uniform(0.95, 1.0) if kind == 1 else rng.uniform(0.6, 0.85)
    name = (f"{device}/{model.split('/')[-1]} {method}{'/' + draft.split('/')[-1] if draft else ''}"
            f" k={k} T={temp}" + (f" c8-variant f={c8:.3f}" if c8 is not None else ""))
    return Scenario(name, Setup(row, method, draft, k, temp, c8))


@dataclass(frozen=True)
class Outcome:
    decision: str
    seconds: float  # benchmark device seconds
    rounds: int
    restarts: int
    code: str
    scaled: int = 0  # rounds measured with more than the default requests


def decide_one(world: World, sc: Scenario, pol: GatePolicy, bs: BenchSettings,
               rng: random.Random, noise: Noise) -> Outcome:
    """The gate's rounds on a scenario, in the deploy's order of arms."""
    seconds = 0.0
    res: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    setups = {"candidate": sc.setup, "baseline": sc.setup.baseline}
    levels: tuple[int, ...] | None = None
    alloc: dict[str, float] = {}
    scale: dict[int, float] = {}
    base_scale = 1.0
    running, restarts, scaled = "candidate", 0, 0
    dec = None
    for rnd in range(pol.max_rounds):
        seed = rng.randrange(1 << 30)
        used = [r["prompt_id"] for c in res["candidate"]
                for r in (c["concurrency"].get(str(pol.keep_concurrency)) or {}).get(
                    "requests", [])]
        order = (running, "baseline" if running == "candidate" else "candidate")
        rbs = {arm: round_bench(bs, pol, arm, rnd, levels, alloc, used, scale, base_scale)
               for arm in order}
        raws = {arm: world.bench_raw(setups[arm], rbs[arm], seed) for arm in order}
        round_s = sum(r.seconds for r in raws.values())
        drift = rng.uniform(0.0, noise.drift) if noise.drift else 0.0
        clock = 0.0
        for arm in order:
            res[arm].append(world.noisy(raws[arm], rbs[arm], rng, noise, clock, drift, round_s,
                                        arm == "candidate"))
            clock += raws[arm].seconds
        seconds += round_s
        restarts += 1
        scaled += any(v > 1.0 for v in scale.values()) or base_scale > 1.0
        running = order[1]
        dec = decide(res["baseline"], res["candidate"], pol)
        if dec.decision != "inconclusive":
            break
        levels, alloc, scale = dec.pending, dec.allocation, dec.scale
        base_scale = dec.baseline_scale
    assert dec is not None
    wanted = "candidate" if dec.decision == "keep" else "baseline"
    restarts += running != wanted
    return Outcome(dec.decision, seconds, dec.rounds, restarts, dec.code, scaled)


def evaluate(args: tuple[int, argparse.Namespace, int, float]) -> dict[str, Any]:
    """One scenario: its truth and the gate's decision in every noise case (worker process)."""
    i, a, seed, spread = args
    rng = random.Random(stable_int("gate-power", seed, i))
    world = World()
    bs, pol = BenchSettings(), policy(a)
    sc = draw(rng)
    sc.setup = replace(sc.setup, spread=spread)
    sc.truth = world.truth(sc.setup, a.truth_seeds, bs.max_tokens)
    out: dict[str, Any] = {"sc": sc}
    for label in a.cases:
        out[label] = decide_one(world, sc, pol, bs, random.Random(stable_int(
            "gate-power", seed, i, label)), CASES[label])
    return out


def policy(a: argparse.Namespace) -> GatePolicy:
    pol = GatePolicy()
    return pol if a.indifference is None else replace(pol, indifference=a.indifference)


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def run(a: argparse.Namespace, ex: ProcessPoolExecutor, seed: int, spread: float
        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    delta, zone_m = policy(a).max_regression_c8, policy(a).indifference
    counted: list[dict[str, Any]] = []
    zone: list[dict[str, Any]] = []
    i = 0
    while len(counted) < a.scenarios:
        batch = list(range(i, i + max(a.jobs, a.scenarios - len(counted))))
        i += len(batch)
        for res in ex.map(evaluate, [(j, a, seed, spread) for j in batch]):
            if len(counted) >= a.scenarios:
                break  # drawn beyond the count: not reported
            (counted if res["sc"].margin(delta) >= zone_m else zone).append(res)
    return counted, zone


def case_row(label: str, counted: list[dict[str, Any]], zone: list[dict[str, Any]],
             delta: float, restart: dict[int, float]) -> tuple[str, dict[str, float]]:
    def wrong(r: dict[str, Any]) -> bool:
        return bool(r[label].decision != r["sc"].verdict(delta))

    bad = [r for r in counted if wrong(r)]
    wk = sum(1 for r in bad if r[label].decision == "keep")
    big = sum(1 for r in bad if r[label].decision != "keep"
              and r["sc"].truth.gain >= BIG_GAIN and r["sc"].verdict(delta) == "keep")
    zd = sum(1 for r in zone if wrong(r))
    drawn = counted + zone
    reg = [r["sc"].regret(r[label].decision, delta) for r in drawn]
    secs = [r[label].seconds for r in counted]
    full = [r[label].seconds + r[label].restarts * restart[r["sc"].setup.row] for r in counted]
    limit = sum(1 for r in drawn if r[label].code == "round_limit")
    fig = {"wrong": len(bad) / len(counted), "big": big, "median": statistics.median(secs),
           "p90": quantile(secs, 0.9)}
    return (f"| {TITLES[label]} | {len(bad)}/{len(counted)} = {len(bad) / len(counted):.1%} | "
            f"{wk} | {len(bad) - wk} | {big} | {zd}/{len(zone)} = {zd / max(1, len(zone)):.0%} "
            f"| {statistics.fmean(reg):.2%} / {max(reg):.1%} | {fig['median']:.1f} | "
            f"{fig['p90']:.1f} | {max(secs):.1f} | {statistics.median(full):.0f} / "
            f"{quantile(full, 0.9):.0f} | {statistics.fmean(r[label].rounds for r in drawn):.2f}"
            f" | {limit} |"), fig


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200, help="counted scenarios (outside "
                    "the indifference zone) per seed")
    add_seed_args(ap)
    add_spread_arg(ap)
    ap.add_argument("--cases", default=",".join(CASES), help="noise cases, comma-separated "
                    f"(of {', '.join(CASES)})")
    ap.add_argument("--truth-seeds", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--indifference", type=float, default=None,
                    help="override the policy's indifference zone (a sensitivity run; the "
                         "deploy uses the policy's)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    a.cases = [c for c in a.cases.split(",") if c]
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        ap.error(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(CASES)})")
    seeds = seeds_from(a, ap, "gate-power")
    spreads = spreads_from(a, ap)
    t0 = time.monotonic()
    pol, bs = policy(a), BenchSettings()
    print(f"gate power: {a.scenarios} counted scenarios per seed on the lab's {len(ROWS)} hosts "
          "(emulator core); " + seeds_line(seeds, bool(a.seeds)))
    print(f"deploy settings per round: warmup {bs.warmup}; c=1 {bs.requests} candidate / "
          f"{bs.baseline_requests} baseline requests; c=8 {bs.guard_requests} per arm; "
          f"{bs.max_tokens} tokens each (up to {pol.max_scale:g}x when the gate asks). Policy: "
          f"confidence {pol.confidence} (a wrong disable {pol.disable_confidence}), up to "
          f"{pol.max_rounds} rounds, c=8 tolerance {pol.max_regression_c8:.0%}, noise floors: "
          f"run {pol.run_noise}, request {pol.request_noise}")
    restart = {row: restart_s(row) for row in range(len(ROWS))}
    print("engine restart per switch (device s): " + ", ".join(
        f"{ROWS[r][0]} {s:.0f}" for r, s in restart.items()))
    figs: dict[float, dict[int, dict[str, dict[str, float]]]] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for spread in spreads:
            for seed in seeds:
                counted, zone = run(a, ex, seed, spread)
                figs.setdefault(spread, {})[seed] = report(a, seed, spread, counted, zone,
                                                           restart, len(seeds) == 1)
    for spread, by_seed in figs.items():
        targets(world_name(spread), by_seed)
    print(f"(computed in {time.monotonic() - t0:.0f} s)")
    return 0


def world_name(spread: float) -> str:
    return ("acceptance by category only" if not spread else
            f"per-prompt spread {spread:g} within a category (a stated stress)")


def report(a: argparse.Namespace, seed: int, spread: float, counted: list[dict[str, Any]],
           zone: list[dict[str, Any]], restart: dict[int, float], detail: bool
           ) -> dict[str, dict[str, float]]:
    """One seed's table in one world (with ``detail`` the per-host and per-kind tables); its
    figures per case."""
    delta, zone_m = policy(a).max_regression_c8, policy(a).indifference
    truths = {t: sum(1 for r in counted if r["sc"].verdict(delta) == t) for t in ("keep",
                                                                                "disable")}
    kinds: dict[str, int] = {}
    for r in counted:
        kinds[r["sc"].kind()] = kinds.get(r["sc"].kind(), 0) + 1
    print(f"\nseed {seed}{' (development)' if seed in DEV_SEEDS else ''}, world: "
          f"{world_name(spread)}: {len(counted)} counted of {len(counted) + len(zone)} drawn, "
          f"{len(zone)} in the ±{zone_m:.0%} indifference zone; truth keep {truths['keep']}, "
          f"disable {truths['disable']}; {kinds}\n")
    print("| timing noise | wrong (outside zone) | wrong keep | wrong disable | of them a true "
          f"gain ≥ +{BIG_GAIN:.0%} | in zone: differ from truth | regret c=1 mean / worst | "
          "bench s/decision median | p90 | max | with restarts median / p90 | rounds mean | "
          "round limit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    figs = {}
    for label in a.cases:
        line, figs[label] = case_row(label, counted, zone, delta, restart)
        print(line, flush=True)
    if a.verbose:
        for label in a.cases:
            for r in counted + zone:
                sc, t, o = r["sc"], r["sc"].truth, r[label]
                if o.decision != sc.verdict(delta):
                    where = "zone" if sc.margin(delta) < zone_m else "WRONG"
                    print(f"    {where} ({label}): {sc.name}: truth {sc.verdict(delta)} (gain "
                          f"{t.gain:+.3f}, TPOT {t.tpot_red:+.3f}, c8 {t.c8_ratio:.3f}, margin "
                          f"{sc.margin(delta):.3f}), gate {o.decision} ({o.code}) after "
                          f"{o.rounds} rounds")
    if detail:
        print()
        per_host(counted, [c for c in ("1x", "2x") if c in a.cases], delta)
        per_kind(counted, zone, [c for c in ("1x", "2x") if c in a.cases], delta)
    return figs


def per_host(counted: list[dict[str, Any]], labels: list[str], delta: float) -> None:
    if not labels:
        return
    both = " / ".join(labels)
    print(f"| host (device, engine, model) | scenarios | bench s/decision median ({both}) | "
          f"p90 ({both}) | wrong ({both}) |")
    print("|---|---|---|---|---|")
    for row, (host, device, engine, model) in enumerate(ROWS):
        rs = [r for r in counted if r["sc"].setup.row == row]
        if not rs:
            continue
        cells = [" / ".join(f"{quantile([r[lb].seconds for r in rs], q):.0f}"
                            for lb in labels) for q in (0.5, 0.9)]
        wrong = " / ".join(str(sum(1 for r in rs if r[lb].decision != r["sc"].verdict(delta)))
                           for lb in labels)
        print(f"| {host} ({device}, {engine}, {model.split('/')[-1]}) | {len(rs)} | {cells[0]} "
              f"| {cells[1]} | {wrong} |")
    print()


def per_kind(counted: list[dict[str, Any]], zone: list[dict[str, Any]], labels: list[str],
             delta: float) -> None:
    if not labels:
        return
    both = " / ".join(labels)
    print(f"| scenario kind | counted | wrong ({both}) | in zone | in zone differ ({both}) |")
    print("|---|---|---|---|---|")
    for kind in sorted({r["sc"].kind() for r in counted + zone}):
        c = [r for r in counted if r["sc"].kind() == kind]
        z = [r for r in zone if r["sc"].kind() == kind]
        w = " / ".join(str(sum(1 for r in c if r[lb].decision != r["sc"].verdict(delta)))
                       for lb in labels)
        zd = " / ".join(str(sum(1 for r in z if r[lb].decision != r["sc"].verdict(delta)))
                        for lb in labels)
        print(f"| {kind} | {len(c)} | {w} | {len(z)} | {zd} |")
    print()


def targets(world: str, by_seed: dict[int, dict[str, dict[str, float]]]) -> None:
    """The issue's targets over the seeds, each met only when its worst held-out seed meets
    it (`heldout.judge`)."""
    labels = next(iter(by_seed.values())).keys()
    checks: list[tuple[Target, str, str]] = []
    for label in ("1x", "2x", "tails", "drift"):
        if label in labels:
            checks.append((Target(f"out-of-zone wrong ({label})", 0.01, fmt="{:.1%}"), label,
                           "wrong"))
    for label in labels:  # the bias no estimator can see is printed apart (README "Gate power")
        checks.append((Target(f"wrong disables of a true gain ≥ +{BIG_GAIN:.0%} ({label})", 0,
                              fmt="{:.0f}"), label, "big"))
    if "1x" in labels:
        checks += [(Target("bench s/decision median (1x)", 60), "1x", "median"),
                   (Target("bench s/decision p90 (1x)", 90), "1x", "p90")]
    if "2x" in labels:
        checks.append((Target("bench s/decision p90 (2x)", 180), "2x", "p90"))
    print(f"\ntargets, world: {world}")
    for t, label, key in checks:
        print("  " + judge(t, {seed: f[label][key] for seed, f in by_seed.items()})[1])


if __name__ == "__main__":
    sys.exit(main())
