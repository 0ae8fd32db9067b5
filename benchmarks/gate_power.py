"""Gate power: how often does the gate decide wrong, and how long does it benchmark?

Not a test: it prints figures. Run: ``python3 benchmarks/gate_power.py [--scenarios 200]``.

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

A scenario whose truth is within the policy's indifference zone (``indifference``, on the log of
the ratio to a threshold that decides its truth) is drawn, decided and reported, but not counted
in the wrong-decision rate (its own row shows how often it differs from the truth).

Each scenario is decided the way the deploy's verify step decides it: rounds of both arms, each
arm benchmarked with the deploy's own `specdec.rounds.BenchSettings` for the levels the gate
still needs (`specdec.rounds.round_bench`), a fresh seed per round, `specdec.gate.decide` after
each round until it answers. Twice: without timing noise, and with lognormal noise per request
(``--noise-req``) and per run and level (``--noise-run``). Printed: wrong decisions and device
seconds of benchmarking per decision (warmup and every level of both arms, every round).
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

from simlab import ROWS, Setup, Truth, World

from specdec.catalog import load_catalog
from specdec.emulator.textgen import stable_int
from specdec.gate import decide
from specdec.plan_types import GatePolicy
from specdec.rounds import BenchSettings, round_bench


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
        """Distance to the threshold that decides the truth (keep: the nearest; disable: the
        clearest failing one)."""
        d = self.distances(delta)
        return min(d) if min(d) >= 0 else -min(d)

    def kind(self) -> str:
        f = self.setup.c8_factor
        if f is None:
            return self.setup.method
        return "c8 neutral/slight" if f >= 0.95 else "c8 regressing"


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


def decide_one(world: World, sc: Scenario, pol: GatePolicy, bs: BenchSettings,
               rng: random.Random, noise_req: float, noise_run: float
               ) -> tuple[str, float, int]:
    """The gate's rounds on a scenario: (decision, benchmark device seconds, rounds)."""
    seconds = 0.0
    bases: list[dict[str, Any]] = []
    cands: list[dict[str, Any]] = []
    levels: tuple[int, ...] | None = None
    alloc: dict[str, float] = {}
    for rnd in range(pol.max_rounds):
        seed = rng.randrange(1 << 30)
        used = [r["prompt_id"] for c in cands
                for r in (c["concurrency"].get(str(pol.keep_concurrency)) or {}).get(
                    "requests", [])]
        for arm, out, setup in (("candidate", cands, sc.setup),
                                ("baseline", bases, sc.setup.baseline)):
            rb = round_bench(bs, pol, arm, rnd, levels, alloc, used)
            res, secs = world.bench(setup, rb, seed, rng, noise_req, noise_run)
            seconds += secs
            out.append(res)
        dec = decide(bases, cands, pol)
        if dec.decision != "inconclusive":
            return dec.decision, seconds, rnd + 1
        levels, alloc = dec.pending, dec.allocation
    return "inconclusive", seconds, pol.max_rounds


def evaluate(args: tuple[int, argparse.Namespace]) -> dict[str, Any]:
    """One scenario: truth and the gate's decision without and with noise (worker process)."""
    i, a = args
    rng = random.Random(stable_int("gate-power", a.seed, i))
    world = World()
    bs, pol = BenchSettings(), policy(a)
    sc = draw(rng)
    sc.truth = world.truth(sc.setup, a.truth_seeds, bs.max_tokens)
    out: dict[str, Any] = {"sc": sc}
    for label, nq, nr in (("none", 0.0, 0.0), ("noisy", a.noise_req, a.noise_run)):
        out[label] = decide_one(world, sc, pol, bs, rng, nq, nr)
    return out


def policy(a: argparse.Namespace) -> GatePolicy:
    pol = GatePolicy()
    return pol if a.indifference is None else replace(pol, indifference=a.indifference)


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200, help="counted scenarios (outside "
                    "the indifference zone)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--noise-req", type=float, default=0.05, help="lognormal sigma per request")
    ap.add_argument("--noise-run", type=float, default=0.03, help="lognormal sigma per run")
    ap.add_argument("--truth-seeds", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--indifference", type=float, default=None,
                    help="override the policy's indifference zone (a sensitivity run; the "
                         "deploy uses the policy's)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    t0 = time.monotonic()
    pol, bs = policy(a), BenchSettings()
    delta, zone_m = pol.max_regression_c8, pol.indifference
    counted: list[dict[str, Any]] = []
    zone: list[dict[str, Any]] = []
    i = 0
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        while len(counted) < a.scenarios:
            batch = list(range(i, i + max(a.jobs, a.scenarios - len(counted))))
            i += len(batch)
            for res in ex.map(evaluate, [(j, a) for j in batch]):
                (counted if res["sc"].margin(delta) >= zone_m else zone).append(res)
                if len(counted) >= a.scenarios:
                    break
    counted = counted[:a.scenarios]
    drawn = counted + zone
    print(f"gate power: {len(counted)} scenarios on the lab's {len(ROWS)} hosts (emulator "
          f"core, seed {a.seed}, {len(drawn)} drawn, {len(zone)} in the ±{zone_m:.0%} "
          "indifference zone)")
    print(f"deploy settings per round: warmup {bs.warmup}; c=1 {bs.requests} candidate / "
          f"{bs.baseline_requests} baseline requests; c=8 {bs.guard_requests} per arm; "
          f"{bs.max_tokens} tokens each. Policy: confidence {pol.confidence}, up to "
          f"{pol.max_rounds} rounds, c=8 tolerance {delta:.0%}, run noise {pol.run_noise}, "
          f"request noise {pol.request_noise}")
    truths = {t: sum(1 for r in counted if r["sc"].verdict(delta) == t) for t in ("keep",
                                                                                "disable")}
    kinds: dict[str, int] = {}
    for r in counted:
        kinds[r["sc"].kind()] = kinds.get(r["sc"].kind(), 0) + 1
    print(f"counted: truth keep {truths['keep']}, disable {truths['disable']}; {kinds}")
    print()
    print("| timing noise | wrong (outside zone) | wrong keep | wrong disable | in zone: "
          "differ from truth | s/decision median | p90 | max | p90 incl. zone | rounds mean |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, title in (("none", "none"),
                         ("noisy", f"req {a.noise_req:g}, run {a.noise_run:g}")):
        wrong = [r for r in counted if r[label][0] != r["sc"].verdict(delta)]
        wk = sum(1 for r in wrong if r[label][0] == "keep")
        zd = sum(1 for r in zone if r[label][0] != r["sc"].verdict(delta))
        secs = [r[label][1] for r in counted]
        print(f"| {title} | {len(wrong)}/{len(counted)} = {len(wrong) / len(counted):.1%} | "
              f"{wk} | {len(wrong) - wk} | {zd}/{len(zone)} | {statistics.median(secs):.1f} | "
              f"{quantile(secs, 0.9):.1f} | {max(secs):.1f} | "
              f"{quantile([r[label][1] for r in drawn], 0.9):.1f} | "
              f"{statistics.fmean(r[label][2] for r in counted):.2f} |")
        if a.verbose:
            for r in wrong:
                sc, t = r["sc"], r["sc"].truth
                print(f"    wrong ({label}): {sc.name}: truth {sc.verdict(delta)} (gain "
                      f"{t.gain:+.3f}, TPOT {t.tpot_red:+.3f}, c8 {t.c8_ratio:.3f}, margin "
                      f"{sc.margin(delta):.3f}), gate {r[label][0]} after {r[label][2]} rounds")
    print()
    print("| host (device, engine, model) | scenarios | s/decision median (none / noisy) | "
          "p90 (none / noisy) | wrong (none / noisy) |")
    print("|---|---|---|---|---|")
    for row, (host, device, engine, model) in enumerate(ROWS):
        rs = [r for r in counted if r["sc"].setup.row == row]
        if not rs:
            continue
        cells = [" / ".join(f"{quantile([r[lb][1] for r in rs], q):.0f}"
                            for lb in ("none", "noisy")) for q in (0.5, 0.9)]
        wrong = " / ".join(str(sum(1 for r in rs if r[lb][0] != r["sc"].verdict(delta)))
                           for lb in ("none", "noisy"))
        print(f"| {host} ({device}, {engine}, {model.split('/')[-1]}) | {len(rs)} | {cells[0]} "
              f"| {cells[1]} | {wrong} |")
    print()
    print("| scenario kind | counted | wrong (none / noisy) | in zone | in zone differ "
          "(none / noisy) |")
    print("|---|---|---|---|---|")
    for kind in sorted({r["sc"].kind() for r in drawn}):
        rs = [r for r in counted if r["sc"].kind() == kind]
        zs = [r for r in zone if r["sc"].kind() == kind]
        w = " / ".join(str(sum(1 for r in rs if r[lb][0] != r["sc"].verdict(delta)))
                       for lb in ("none", "noisy"))
        zd = " / ".join(str(sum(1 for r in zs if r[lb][0] != r["sc"].verdict(delta)))
                        for lb in ("none", "noisy"))
        print(f"| {kind} | {len(rs)} | {w} | {len(zs)} | {zd} |")
    print(f"\n(computed in {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
