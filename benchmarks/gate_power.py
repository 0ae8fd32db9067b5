"""Gate power: how often does `decide_adaptive` give the wrong answer, and at what cost?

Not a test: it prints figures. Run: ``python3 benchmarks/gate_power.py [--scenarios 200]``.

Each scenario is a speculation setup on the AGX Orin 64GB profile (Llama-3.1-8B target; EAGLE-3,
a 1B or 3B draft model, or n-gram; k and an acceptance-degradation knob drawn at random) whose
*true* effect is computed with the emulator's pure engine core (`specdec.emulator.core`) over the
whole built-in prompt set and several seeds:

* true c=1 throughput gain, true c=1 TPOT p50 reduction (1 − p50 of the candidate's per-request
  TPOT over p50 of the baseline's, over the whole prompt set and 3 seeds; Harrell–Davis p50,
  as the gate estimates it), true c=8 throughput ratio;
* the correct answer is ``keep`` when gain ≥ 30%, TPOT reduction ≥ 20% and c=8 does not
  regress, else ``disable`` (seed 000; between 10% and 30% the conservative answer is disable).

Scenarios are drawn until ``--scenarios`` of them have a true gain within ``--window`` of the
thresholds (so they sit *around* the thresholds) and outside an indifference zone of
``--margin`` around every binding threshold (a setup exactly at +30.0% has no wrong answer).

The gate then measures each scenario the way the deploy's verify step would: ABAB rounds of
one baseline and one candidate benchmark (``--n1`` requests at c=1, ``--n8`` at c=8, the first
prompts of the built-in set, ``--max-tokens`` each, ``--warmup`` warmup requests per run), each
round a fresh seed, optionally with multiplicative timing noise per request and per run
(``--noise-req``, ``--noise-run``: Jetson clocks/thermal drift), until `decide_adaptive` answers.

Printed: wrong-decision rate (goal ≤ 1%), the same inside the indifference zone (for honesty),
and benchmark seconds per decision at real time scale on the AGX Orin (goal ≤ 90 s): the sum of
the emulated durations of every run the gate needed.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from specdec.bench.prompts import builtin_prompts
from specdec.bench.stats import hd_quantile
from specdec.emulator.core import EngineCore, EngineModel, SeqRequest
from specdec.emulator.setup import EngineSetup, setup_for
from specdec.emulator.textgen import category_of, chat_prompt_tokens, stable_int
from specdec.gate import decide_adaptive
from specdec.plan_types import GatePolicy

DEVICE = "agx-orin-64gb"
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
CHOICES: list[tuple[str, str | None, tuple[int, int]]] = [
    ("eagle3", None, (1, 5)),
    ("draft_model", "meta-llama/Llama-3.2-1B-Instruct", (1, 5)),
    ("draft_model", "meta-llama/Llama-3.2-3B-Instruct", (1, 3)),
    ("ngram", None, (1, 6)),
]


@dataclass(frozen=True)
class P:
    key: int
    tokens: int
    category: str
    pid: str


def prompts(level_tag: str) -> list[P]:
    out = []
    for i, p in enumerate(builtin_prompts().measured):
        text = f"[{level_tag} #{i}] {p.text}"
        out.append(P(stable_int("chat", text), chat_prompt_tokens([text], "llama3"),
                     category_of(text), p.id))
    return out


@dataclass(frozen=True)
class Req:
    index: int
    pid: str
    arrival: float
    ttft: float
    e2e: float
    tokens: int


def closed_loop(model: EngineModel, ps: list[P], conc: int, n: int, max_tokens: int,
                temperature: float) -> tuple[list[Req], float]:
    """`specdec.emulator.core.simulate`, keeping each request's index (for pairing)."""
    core = EngineCore(model)
    now = 0.0
    issued = 0
    pending: list[tuple[float, int]] = []
    info: dict[int, dict[str, float]] = {}
    done: list[Req] = []

    def issue(at: float) -> None:
        nonlocal issued
        if issued < n:
            pending.append((at, issued))
            issued += 1

    for _ in range(min(conc, n)):
        issue(0.0)
    while len(done) < n:
        for at, idx in [x for x in pending if x[0] <= now]:
            pending.remove((at, idx))
            p = ps[idx % len(ps)]
            sid = core.add(SeqRequest(prompt_key=p.key, prompt_tokens=p.tokens,
                                      category=p.category, max_tokens=max_tokens,
                                      min_tokens=max_tokens, ignore_eos=True,
                                      temperature=temperature))
            info[sid] = {"arrival": at, "index": idx}
        if not core.has_work():
            now = min(at for at, _ in pending)
            continue
        res = core.step()
        if res is None:
            break
        now += res.duration_s
        for out in res.outputs:
            rec = info[out.seq_id]
            rec.setdefault("first", now)
            if out.finished:
                idx = int(rec["index"])
                done.append(Req(idx, ps[idx % len(ps)].pid, rec["arrival"],
                                rec["first"] - rec["arrival"], now - rec["arrival"],
                                out.generated))
                issue(now)
    done.sort(key=lambda r: r.index)
    duration = max(r.arrival + r.e2e for r in done) - min(r.arrival for r in done)
    return done, duration


def level_result(reqs: list[Req], duration: float, rng: random.Random, noise_req: float,
                 noise_run: float) -> dict[str, Any]:
    f_run = math.exp(rng.gauss(0.0, noise_run)) if noise_run else 1.0
    recs = []
    for r in reqs:
        f = f_run * (math.exp(rng.gauss(0.0, noise_req)) if noise_req else 1.0)
        ttft, e2e = r.ttft * f, r.e2e * f
        tpot = (e2e - ttft) / (r.tokens - 1) * 1000 if r.tokens > 1 else None
        recs.append({"index": r.index, "prompt_id": r.pid, "tpot_ms": tpot,
                     "e2el_ms": e2e * 1000, "ttft_ms": ttft * 1000, "output_tokens": r.tokens,
                     "error": None})
    tokens = sum(r.tokens for r in reqs)
    tpots = [x["tpot_ms"] for x in recs if x["tpot_ms"] is not None]
    return {"throughput_tok_s": tokens / (duration * f_run),
            "tpot_ms_p50": statistics.median(tpots), "requests": recs}


@dataclass
class Scenario:
    name: str
    setup: EngineSetup
    temperature: float
    gain: float = 0.0
    tpot_red: float = 0.0
    c8_ratio: float = 0.0

    @property
    def truth(self) -> str:
        return ("keep" if self.gain >= 0.30 and self.tpot_red >= 0.20 and self.c8_ratio >= 1.0
                else "disable")

    def margin(self) -> float:
        """Distance to the nearest threshold that can change the right answer."""
        return min(abs(self.gain - 0.30), abs(self.tpot_red - 0.20), abs(self.c8_ratio - 1.0))


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.ps = {c: prompts(f"c{c}") for c in (1, 8)}
        self.base_setup = setup_for(DEVICE, TARGET)
        self.last = ""
        self._base_cache: dict[tuple[int, int, int, int], tuple[list[Req], float]] = {}

    def sim(self, setup: EngineSetup, temperature: float, conc: int, n: int, seed: int,
            offset: int = 0) -> tuple[list[Req], float]:
        model = setup.engine_model()
        model = EngineModel(**{**model.__dict__, "seed": seed})
        ps = self.ps[conc]
        ps = [ps[(offset + i) % len(ps)] for i in range(len(ps))]
        return closed_loop(model, ps, conc, n, self.a.max_tokens,
                           temperature if setup.speculative else 0.0)

    def base(self, conc: int, n: int, seed: int, offset: int = 0) -> tuple[list[Req], float]:
        key = (conc, n, seed, offset)
        if key not in self._base_cache:
            self._base_cache[key] = self.sim(self.base_setup, 0.0, conc, n, seed, offset)
        return self._base_cache[key]

    def truth(self, sc: Scenario) -> None:
        n_all = len(self.ps[1])
        gains, c8 = [], []
        tb: list[float] = []
        tc: list[float] = []
        for s in range(self.a.truth_seeds):
            seed = 10_000 + s
            b1, bd1 = self.base(1, n_all, seed)
            c1, cd1 = self.sim(sc.setup, sc.temperature, 1, n_all, seed)
            gains.append((sum(r.tokens for r in c1) / cd1) / (sum(r.tokens for r in b1) / bd1))
            tb += [(r.e2e - r.ttft) / (r.tokens - 1) for r in b1]
            tc += [(r.e2e - r.ttft) / (r.tokens - 1) for r in c1]
            b8, bd8 = self.base(8, n_all, seed)
            k8, kd8 = self.sim(sc.setup, sc.temperature, 8, n_all, seed)
            c8.append((sum(r.tokens for r in k8) / kd8) / (sum(r.tokens for r in b8) / bd8))
        sc.gain = statistics.fmean(gains) - 1.0
        sc.tpot_red = 1.0 - hd_quantile(tc) / hd_quantile(tb)
        sc.c8_ratio = statistics.fmean(c8)

    def decide(self, sc: Scenario, rng: random.Random, pol: GatePolicy) -> tuple[str, float, int]:
        a = self.a
        seconds = 0.0

        def run(arm: str, i: int) -> dict[str, Any]:
            nonlocal seconds
            seed = rng.randrange(1 << 30) if arm == "baseline" else run.seed  # type: ignore
            if arm == "baseline":
                run.seed = seed  # type: ignore[attr-defined]
            levels = {}
            for conc, n in ((1, a.n1), (8, a.n8)):
                off = i * n if a.rotate else 0  # each round measures the next prompts
                if arm == "baseline":
                    reqs, dur = self.base(conc, n, seed, off)
                else:
                    reqs, dur = self.sim(sc.setup, sc.temperature, conc, n, seed, off)
                seconds += dur
                if conc == 1 and a.warmup:  # warmup requests are 16 tokens long
                    seconds += a.warmup * statistics.fmean(
                        r.ttft + (r.e2e - r.ttft) * 15 / (r.tokens - 1) for r in reqs)
                levels[str(conc)] = level_result(reqs, dur, rng, a.noise_req, a.noise_run)
            return {"config": {"max_tokens": a.max_tokens, "endpoint": "chat"},
                    "concurrency": levels}

        dec = decide_adaptive(run, pol)
        self.last = "; ".join(f"{r.name} {r.measured:+.3f} [{r.ci[0]:+.3f},{r.ci[1]:+.3f}] "
                              f"{r.verdict}" for r in dec.rules)
        return dec.decision, seconds, dec.rounds


def draw(rng: random.Random) -> Scenario:
    method, draft, (klo, khi) = rng.choice(CHOICES)
    k = rng.randint(klo, khi)
    temp = round(rng.uniform(0.0, 2.0), 3)
    setup = setup_for(DEVICE, TARGET, method, k, draft)
    name = f"{method}{'/' + draft.split('/')[-1] if draft else ''} k={k} degrade={temp}"
    return Scenario(name, setup, temp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n1", type=int, default=8, help="requests per run at concurrency 1")
    ap.add_argument("--n8", type=int, default=8, help="requests per run at concurrency 8")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-rotate", dest="rotate", action="store_false",
                    help="measure the same prompts every round (default: the next ones)")
    ap.add_argument("--max-rounds", type=int, default=3)
    ap.add_argument("--noise-req", type=float, default=0.0, help="lognormal sigma per request")
    ap.add_argument("--noise-run", type=float, default=0.0, help="lognormal sigma per run")
    ap.add_argument("--margin", type=float, default=0.05, help="indifference zone half-width")
    ap.add_argument("--window", type=float, default=0.25,
                    help="true c=1 gain within this of a threshold (10%% or 30%%)")
    ap.add_argument("--truth-seeds", type=int, default=3)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    t0 = time.monotonic()
    bench = Bench(a)
    pol = GatePolicy(max_rounds=a.max_rounds)
    rng = random.Random(a.seed)
    picked: list[Scenario] = []
    zone: list[Scenario] = []
    tries = 0
    while len(picked) < a.scenarios and tries < a.scenarios * 50:
        tries += 1
        sc = draw(rng)
        bench.truth(sc)
        near = min(abs(sc.gain - 0.30), abs(sc.gain - 0.10)) <= a.window
        if not near:
            continue
        if sc.margin() < a.margin:
            if len(zone) < a.scenarios // 4:
                zone.append(sc)
            continue
        picked.append(sc)
    wrong = wrong_keep = 0
    secs: list[float] = []
    rounds: list[int] = []
    answers: dict[str, int] = {}
    for sc in picked:
        dec, s, r = bench.decide(sc, rng, pol)
        secs.append(s)
        rounds.append(r)
        answers[dec] = answers.get(dec, 0) + 1
        if dec != sc.truth:
            wrong += 1
            wrong_keep += dec == "keep"
            if a.verbose:
                print(f"  wrong: {sc.name}: truth {sc.truth} (gain {sc.gain:+.3f}, TPOT "
                      f"{sc.tpot_red:+.3f}, c8 {sc.c8_ratio:.3f}), gate {dec} after {r} rounds: "
                      f"{bench.last}")
    zone_wrong = sum(1 for sc in zone if bench.decide(sc, rng, pol)[0] != sc.truth)
    truths = {t: sum(1 for sc in picked if sc.truth == t) for t in ("keep", "disable")}
    gains = sorted(sc.gain for sc in picked)
    print(f"gate power on {DEVICE} / {TARGET} (emulator core, seed {a.seed})")
    print(f"plan: c1 {a.n1} req + c8 {a.n8} req x {a.max_tokens} tokens per run, warmup "
          f"{a.warmup}, up to {a.max_rounds} ABAB rounds; noise req {a.noise_req:g} run "
          f"{a.noise_run:g}; confidence {pol.confidence}")
    print(f"scenarios: {len(picked)} (truth keep {truths['keep']}, disable {truths['disable']}; "
          f"true c1 gain {gains[0]:+.1%}..{gains[-1]:+.1%}; indifference margin "
          f"{a.margin:.0%}; {tries} drawn)")
    print(f"gate answers: {answers}")
    print(f"wrong-decision rate: {wrong}/{len(picked)} = {wrong / max(len(picked), 1):.2%} "
          f"(goal <= 1%): {wrong_keep} wrong keep, {wrong - wrong_keep} wrong (conservative) "
          "disable")
    if zone:
        print(f"inside the indifference zone (not counted above): {zone_wrong}/{len(zone)} "
              f"differ from the nearest-threshold truth")
    secs.sort()
    print(f"benchmark seconds per decision at real time scale: mean {statistics.fmean(secs):.1f}"
          f", median {statistics.median(secs):.1f}, p90 {secs[int(0.9 * (len(secs) - 1))]:.1f}"
          f", max {secs[-1]:.1f} (goal <= 90 s); rounds mean {statistics.fmean(rounds):.2f}")
    print(f"(computed in {time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
