"""Gate power: how often does the gate decide wrong, and how long does it benchmark?

Not a test: it prints figures. Run: ``python3 benchmarks/gate_power.py [--scenarios 200]``.

Each scenario is a speculation setup on one of the lab's hosts (every lab device, with the
lab's model: `inventories/lab.py`), a method that exists for it (EAGLE-3 where the catalog has a
head and advises it on the device, a catalog draft model, n-gram: bimodal TPOT), ``k`` from 1 to
6 and an acceptance-degradation knob (sampling temperature 0..1.5). About a third get a
concurrency-8 variant: speculation off above batch 2 (TRT-LLM's ``max_concurrency``), then
either neutral, slightly slower (steps with more than 2 sequences 0-5% slower) or clearly slower
(10-30%). The *truth* comes from the emulator's pure engine core (`specdec.emulator.core`) over
the whole built-in prompt set and several seeds, at the deploy's ``max_tokens``:

* c=1 throughput gain (token rate over all prompts), c=1 TPOT p50 reduction (Harrell–Davis
  p50 over all requests), c=8 throughput ratio in steady state (tokens in the window where 8
  requests run, of a long closed-loop run);
* the seed's rule on the truth: keep when gain ≥ 30%, TPOT reduction ≥ 20% and the c=8 ratio
  ≥ 1 − δ (δ = the policy's ``max_regression_c8``), else disable.

A scenario closer than ``--margin`` to a threshold that decides its truth is in the
indifference zone: drawn, decided and reported, but not counted in the wrong-decision rate.

Each scenario is then decided the way the deploy's verify step does it: ABAB rounds, each one
benchmark of the baseline and one of the candidate with the deploy's own `BenchSettings`
(warmup, c=1 and c=8 requests per round, ``max_tokens``; at c=8 the bench keeps 8 requests in
flight until the last measured one ends), prompts rotating by round as verify rotates them,
each round a fresh seed, and `specdec.gate.decide` after each round until it answers. Twice: without
timing noise, and with lognormal noise per request (``--noise-req``) and per run and level
(``--noise-run``). Printed: the table of wrong decisions and benchmark seconds per decision at
real time scale (the emulated durations of warmup and both levels, both arms, every round).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's specdec

from specdec.bench.prompts import builtin_prompts
from specdec.bench.stats import hd_quantile
from specdec.catalog import load_catalog
from specdec.emulator.core import EngineCore, EngineModel, SeqRequest
from specdec.emulator.setup import setup_for
from specdec.emulator.textgen import category_of, chat_prompt_tokens, stable_int
from specdec.emulator.timing import StepCost, StepLoad
from specdec.gate import decide
from specdec.plan_types import GatePolicy
from specdec.verify import BenchSettings

# The lab's hosts (inventories/lab.py): device, engine, model.
ROWS = [
    ("agx-orin-64gb", "vllm", "meta-llama/Llama-3.1-8B-Instruct"),
    ("orin-nano-8gb", "vllm", "Qwen/Qwen3-0.6B"),
    ("dgx-spark", "trtllm", "Qwen/Qwen3-8B"),
    ("orin-nx-16gb", "vllm", "Qwen/Qwen3-1.7B"),
    ("agx-orin-32gb", "vllm", "Qwen/Qwen3-4B"),
    ("orin-nx-8gb", "vllm", "Qwen/Qwen3-1.7B"),
    ("orin-nano-4gb", "vllm", "Qwen/Qwen3-0.6B"),
    ("dgx-spark", "vllm", "Qwen/Qwen3-8B"),
]
SPEC_OFF_ABOVE = 2  # c=8 variants: no speculation above this batch size


@dataclass(frozen=True)
class P:
    key: int
    tokens: int
    category: str
    pid: str


def prompt_list(tag: str, tokenizer: str, warmup: bool = False) -> list[P]:
    ps = builtin_prompts()
    out = []
    for i, p in enumerate(ps.warmup if warmup else ps.measured):
        text = f"[{tag} #{i}] {p.text}"
        out.append(P(stable_int("chat", text), chat_prompt_tokens([text], tokenizer),
                     category_of(text), p.id))
    return out


@dataclass(frozen=True)
class Slowed:
    """A timing model whose steps with more than ``above`` decoding sequences take 1/f longer."""

    inner: Any
    factor: float
    above: int = SPEC_OFF_ABOVE

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step_time(self, load: StepLoad) -> StepCost:
        c = self.inner.step_time(load)
        if load.decode_seqs + (1 if load.prefill_tokens else 0) <= self.above:
            return c
        f = 1.0 / self.factor
        return StepCost(c.draft_s * f, c.target_s * f, c.overhead_s * f)


@dataclass(frozen=True)
class Req:
    index: int
    pid: str
    category: str
    arrival: float
    ttft: float
    e2e: float
    tokens: int


def closed_loop(model: EngineModel, ps: list[P], conc: int, n: int, max_tokens: int,
                temperature: float, fill: bool) -> tuple[list[Req], float, list[tuple[float, int]]]:
    """``conc`` clients send ``n`` measured requests (prompts in order, cycling); with ``fill``
    they keep sending unmeasured ones until the last measured request ends (no drain tail).
    Returns the measured requests, the level's duration and (time, tokens) of every step."""
    core = EngineCore(model)
    now, issued = 0.0, 0
    pending: list[tuple[float, int]] = []
    info: dict[int, list[Any]] = {}
    done: list[Req] = []
    steps: list[tuple[float, int]] = []
    open_measured = 0

    def issue(at: float) -> None:
        nonlocal issued, open_measured
        if issued < n or (fill and open_measured > 0):
            pending.append((at, issued))
            open_measured += issued < n
            issued += 1

    for _ in range(conc):
        issue(0.0)
    while len(done) < n:
        for at, idx in [x for x in pending if x[0] <= now]:
            pending.remove((at, idx))
            p = ps[idx % len(ps)]
            sid = core.add(SeqRequest(prompt_key=p.key, prompt_tokens=p.tokens,
                                      category=p.category, max_tokens=max_tokens,
                                      min_tokens=max_tokens, ignore_eos=True,
                                      temperature=temperature))
            info[sid] = [at, idx, None]
        if not core.has_work():
            now = min(at for at, _ in pending)
            continue
        res = core.step()
        assert res is not None
        now += res.duration_s
        steps.append((now, sum(len(o.tokens) for o in res.outputs)))
        for out in res.outputs:
            rec = info[out.seq_id]
            if rec[2] is None:
                rec[2] = now
            if out.finished:
                idx = rec[1]
                if idx < n:
                    p = ps[idx % len(ps)]
                    done.append(Req(idx, p.pid, p.category, rec[0], rec[2] - rec[0],
                                    now - rec[0], out.generated))
                    open_measured -= 1
                issue(now)
    done.sort(key=lambda r: r.index)
    return done, max(r.arrival + r.e2e for r in done), steps


@dataclass
class Scenario:
    name: str
    row: int
    method: str
    draft: str | None
    k: int
    temperature: float
    c8_factor: float | None  # None: natural c=8; else spec off above batch 2, steps x 1/f
    gain: float = 0.0
    tpot_red: float = 0.0
    c8_ratio: float = 0.0

    def truth(self, delta: float) -> str:
        return ("keep" if self.gain >= 0.30 and self.tpot_red >= 0.20
                and self.c8_ratio >= 1.0 - delta else "disable")

    def margin(self, delta: float) -> float:
        """Log-ratio distance to the threshold that decides the truth (keep: the nearest;
        disable: the clearest failing one)."""
        d = [math.log((1.0 + self.gain) / 1.30), math.log(0.80 / max(1e-9, 1.0 - self.tpot_red)),
             math.log(max(1e-9, self.c8_ratio) / (1.0 - delta))]
        return min(d) if all(x >= 0 for x in d) else -min(x for x in d)


class World:
    """Engine models and cached baseline runs of the lab's hosts."""

    def __init__(self, settings: BenchSettings) -> None:
        self.s = settings
        self._cache: dict[Any, Any] = {}

    def setup(self, sc: Scenario | None, row: int) -> tuple[EngineModel, float, str]:
        device, engine, model = ROWS[row]
        dev = load_catalog().device(device)
        kw: dict[str, Any] = {"max_num_seqs": dev.max_num_seqs,
                              "overlap_scheduler": engine == "trtllm"}
        if sc is None:
            st = setup_for(device, model, **kw)
            return st.engine_model(), 0.0, st.target.tokenizer
        if sc.c8_factor is not None:
            kw["max_concurrency"] = SPEC_OFF_ABOVE
        st = setup_for(device, model, sc.method, sc.k, sc.draft, **kw)
        m = st.engine_model()
        if sc.c8_factor is not None and sc.c8_factor != 1.0:
            m = replace(m, timing=Slowed(m.timing, sc.c8_factor))  # type: ignore[arg-type]
        return m, sc.temperature, st.target.tokenizer

    def run(self, sc: Scenario | None, row: int, conc: int, n: int, seed: int, offset: int,
            fill: bool, max_tokens: int | None = None, warm: bool = False
            ) -> tuple[list[Req], float, list[tuple[float, int]]]:
        key = (row, conc, n, offset, fill, max_tokens, warm)
        if sc is None and key in self._cache:  # the baseline does not depend on the seed
            return self._cache[key]  # type: ignore[no-any-return]
        model, temp, tok = self.setup(sc, row)
        model = replace(model, seed=seed)
        ps = prompt_list("warmup" if warm else f"c{conc}", tok, warm)
        ps = [ps[(offset + i) % len(ps)] for i in range(len(ps))]
        out = closed_loop(model, ps, conc, n, max_tokens or self.s.max_tokens, temp, fill)
        if sc is None:
            self._cache[key] = out
        return out

    def truth(self, sc: Scenario, seeds: int) -> None:
        n_all = len(builtin_prompts().measured)
        tok_b = sec_b = tok_c = sec_c = 0.0
        tb: list[float] = []
        tc: list[float] = []
        c8: list[float] = []
        for s in range(seeds):
            seed = 10_000 + s
            b1, _, _ = self.run(None, sc.row, 1, n_all, seed, 0, False)
            c1, _, _ = self.run(sc, sc.row, 1, n_all, seed, 0, False)
            tok_b += sum(r.tokens for r in b1)
            sec_b += sum(r.e2e for r in b1)
            tok_c += sum(r.tokens for r in c1)
            sec_c += sum(r.e2e for r in c1)
            tb += [(r.e2e - r.ttft) / (r.tokens - 1) for r in b1]
            tc += [(r.e2e - r.ttft) / (r.tokens - 1) for r in c1]
            rates = []
            for arm in (None, sc):
                reqs, _, steps = self.run(arm, sc.row, 8, 2 * n_all, seed, 0, True)
                sends = sorted(r.arrival for r in reqs)
                w0, w1 = sends[8], sends[-1]  # after the first wave, before the tail
                rates.append(sum(k for t, k in steps if w0 < t <= w1) / (w1 - w0))
            c8.append(rates[1] / rates[0])
        sc.gain = (tok_c / sec_c) / (tok_b / sec_b) - 1.0
        sc.tpot_red = 1.0 - hd_quantile(tc) / hd_quantile(tb)
        sc.c8_ratio = statistics.fmean(c8)


def level_result(reqs: list[Req], duration: float, rng: random.Random, noise_req: float,
                 noise_run: float) -> dict[str, Any]:
    f_run = math.exp(rng.gauss(0.0, noise_run)) if noise_run else 1.0
    recs = []
    for r in reqs:
        f = f_run * (math.exp(rng.gauss(0.0, noise_req)) if noise_req else 1.0)
        ttft, e2e = r.ttft * f, r.e2e * f
        tpot = (e2e - ttft) / (r.tokens - 1) * 1000 if r.tokens > 1 else None
        recs.append({"index": r.index, "prompt_id": r.pid, "category": r.category,
                     "tpot_ms": tpot, "e2el_ms": e2e * 1000, "ttft_ms": ttft * 1000,
                     "output_tokens": r.tokens, "error": None})
    tokens = sum(r.tokens for r in reqs)
    tpots = [x["tpot_ms"] for x in recs if x["tpot_ms"] is not None]
    return {"throughput_tok_s": tokens / (duration * f_run),
            "tpot_ms_p50": statistics.median(tpots), "requests": recs}


def decide_one(world: World, sc: Scenario, pol: GatePolicy, rng: random.Random,
               noise_req: float, noise_run: float) -> tuple[str, float, int]:
    """Run the gate's ABAB rounds on a scenario: (decision, benchmark seconds, rounds)."""
    s = world.s
    seconds = 0.0
    cats = builtin_prompts().categories()
    bases: list[dict[str, Any]] = []
    cands: list[dict[str, Any]] = []
    counts = {pol.keep_concurrency: s.requests, pol.guard_concurrency: s.guard_requests}
    for rnd in range(pol.max_rounds):
        seed = rng.randrange(1 << 30)
        off = rnd * s.requests  # verify rotates the prompts by round
        for arm, out in ((None, bases), (sc, cands)):
            levels = {}
            if s.warmup:
                _, dur, _ = world.run(arm, sc.row, max(counts), s.warmup, seed, 0, False,
                                      max_tokens=max(2, min(16, s.max_tokens)), warm=True)
                seconds += dur
            for conc, n in sorted(counts.items()):
                reqs, dur, _ = world.run(arm, sc.row, conc, n, seed, off, conc > 1)
                seconds += dur
                levels[str(conc)] = level_result(reqs, dur, rng, noise_req, noise_run)
            out.append({"config": {"max_tokens": s.max_tokens, "endpoint": "chat"},
                        "prompts": {"categories": cats}, "concurrency": levels})
        dec = decide(bases, cands, pol)
        if dec.decision != "inconclusive":
            return dec.decision, seconds, len(bases)
    return "inconclusive", seconds, len(bases)


def draw(rng: random.Random) -> Scenario:
    cat = load_catalog()
    row = rng.randrange(len(ROWS))
    device, _, model = ROWS[row]
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
    return Scenario(name, row, method, draft, k, temp, c8)


def evaluate(args: tuple[int, argparse.Namespace]) -> dict[str, Any]:
    """One scenario: truth and the gate's decision without and with noise (worker process)."""
    i, a = args
    rng = random.Random(stable_int("gate-power", a.seed, i))
    world = World(BenchSettings())
    sc = draw(rng)
    world.truth(sc, a.truth_seeds)
    pol = GatePolicy()
    out: dict[str, Any] = {"sc": sc}
    for label, nq, nr in (("none", 0.0, 0.0), ("noisy", a.noise_req, a.noise_run)):
        out[label] = decide_one(world, sc, pol, rng, nq, nr)
    return out


def pct(x: float) -> str:
    return f"{x:.1%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200, help="counted scenarios (outside "
                    "the indifference zone)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--noise-req", type=float, default=0.05, help="lognormal sigma per request")
    ap.add_argument("--noise-run", type=float, default=0.03, help="lognormal sigma per run")
    ap.add_argument("--margin", type=float, default=0.10,
                    help="indifference zone half-width, on the log of the ratio to a threshold")
    ap.add_argument("--truth-seeds", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    t0 = time.monotonic()
    pol, bs = GatePolicy(), BenchSettings()
    delta = pol.max_regression_c8
    counted: list[dict[str, Any]] = []
    zone: list[dict[str, Any]] = []
    i = 0
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        while len(counted) < a.scenarios:
            batch = list(range(i, i + max(a.jobs, a.scenarios - len(counted))))
            i += len(batch)
            for res in ex.map(evaluate, [(j, a) for j in batch]):
                sc = res["sc"]
                (counted if sc.margin(delta) >= a.margin else zone).append(res)
                if len(counted) >= a.scenarios:
                    break
    counted = counted[:a.scenarios]
    print(f"gate power: {len(counted)} scenarios on the lab's hosts (emulator core, seed "
          f"{a.seed}, {len(counted) + len(zone)} drawn, {len(zone)} in the ±{a.margin:.0%} "
          "indifference zone)")
    print(f"deploy settings per round and arm: warmup {bs.warmup}, c=1 {bs.requests} + c=8 "
          f"{bs.guard_requests} requests x {bs.max_tokens} tokens; policy: confidence "
          f"{pol.confidence}, up to {pol.max_rounds} rounds, c=8 tolerance {delta:.0%}, "
          f"run noise {pol.run_noise}, request noise {pol.request_noise}")
    truths = {t: sum(1 for r in counted if r["sc"].truth(delta) == t) for t in ("keep", "disable")}
    kinds = {"natural c=8": sum(1 for r in counted if r["sc"].c8_factor is None),
             "c=8 neutral/slight (>=0.95)": sum(1 for r in counted if r["sc"].c8_factor
                                                 is not None and r["sc"].c8_ratio >= 0.95),
             "c=8 regressing": sum(1 for r in counted if r["sc"].c8_factor is not None
                                   and r["sc"].c8_ratio < 0.95)}
    meths: dict[str, int] = {}
    for r in counted:
        meths[r["sc"].method] = meths.get(r["sc"].method, 0) + 1
    print(f"truth: keep {truths['keep']}, disable {truths['disable']}; methods {meths}; "
          f"{kinds}")
    print()
    print("| timing noise | wrong | wrong keep | wrong disable | in zone: differ | "
          "s/decision median | p90 | max | rounds mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, title in (("none", "none"),
                         ("noisy", f"req {a.noise_req:g}, run {a.noise_run:g}")):
        wrong = [r for r in counted if r[label][0] != r["sc"].truth(delta)]
        wk = sum(1 for r in wrong if r[label][0] == "keep")
        zd = sum(1 for r in zone if r[label][0] != r["sc"].truth(delta))
        secs = sorted(r[label][1] for r in counted)
        rounds = [r[label][2] for r in counted]
        p90 = secs[min(len(secs) - 1, math.ceil(0.9 * len(secs)) - 1)]
        print(f"| {title} | {len(wrong)}/{len(counted)} = {pct(len(wrong) / len(counted))} | "
              f"{wk} | {len(wrong) - wk} | {zd}/{len(zone)} | {statistics.median(secs):.1f} | "
              f"{p90:.1f} | {secs[-1]:.1f} | {statistics.fmean(rounds):.2f} |")
        if a.verbose:
            for r in wrong:
                sc = r["sc"]
                print(f"    wrong ({label}): {sc.name}: truth {sc.truth(delta)} (gain "
                      f"{sc.gain:+.3f}, TPOT {sc.tpot_red:+.3f}, c8 {sc.c8_ratio:.3f}), gate "
                      f"{r[label][0]} after {r[label][2]} rounds")
    print()
    print("| device | scenarios | s/decision median (none / noisy) | p90 (none / noisy) |")
    print("|---|---|---|---|")
    for row, (device, engine, model) in enumerate(ROWS):
        rs = [r for r in counted if r["sc"].row == row]
        if not rs:
            continue
        cells = []
        for q in (0.5, 0.9):
            vals = []
            for label in ("none", "noisy"):
                s = sorted(r[label][1] for r in rs)
                vals.append(f"{s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]:.0f}")
            cells.append(" / ".join(vals))
        print(f"| {device} {engine} {model.split('/')[-1]} | {len(rs)} | {cells[0]} | "
              f"{cells[1]} |")
    print(f"\n(computed in {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
