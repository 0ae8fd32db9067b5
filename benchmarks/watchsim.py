"""A lab host under user traffic, on the emulator's pure engine core (virtual clock, device
seconds), read the way `specdec watch`'s on-host reader reads it: counter deltas per window,
the running-requests gauge sampled at each poll. Used by ``watch_detect.py``.

* `gate_facts`: the step cost and tokens per step the deploy's gate would hand the watch for a
  setup (one gate round of each arm, `simlab.World.bench`, through `specdec.watch.gatefacts`);
* `run`: open-loop Poisson arrivals with a category mix per phase (the built-in prompt set,
  each request a unique prompt, as ``specdec lab traffic``); returns the windows as
  `specdec.watch.window.Sample`s and the device seconds the engine was busy;
* `look`: the samples through the watch's window, estimate and verdict, as `Monitor.look`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from simlab import World

from specdec.bench.prompts import builtin_prompts
from specdec.gate.rounds import BenchSettings, round_bench
from specdec.plan.types import GatePolicy
from specdec.watch.estimate import estimate
from specdec.watch.gatefacts import Cost, _bench_cost, _tokens_per_step
from specdec.watch.verdict import Levels, Tracker
from specdec.watch.window import Sample, Window
from specdec_lab.emulator.core import EngineCore, EngineModel, SeqRequest
from specdec_lab.emulator.textgen import chat_prompt_tokens, stable_int

__all__ = ["Phase", "Run", "closed_loop_rate", "gate_facts", "look", "run"]


@dataclass(frozen=True)
class Phase:
    seconds: float  # device seconds
    mix: dict[str, float]


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)  # per phase, device seconds busy
    tokens: list[int] = field(default_factory=list)  # per phase
    steps: int = 0


def gate_facts(world: World, setup: Any, seed: int = 1) -> tuple[Cost, float]:
    """(step cost, candidate tokens per sequence-step) from one noiseless gate round."""
    pol = GatePolicy()
    rng = random.Random(seed)
    cand, _ = world.bench(setup, round_bench(BenchSettings(), pol, "candidate", 0), seed, rng)
    base, _ = world.bench(setup.baseline, round_bench(BenchSettings(), pol, "baseline", 0),
                          seed, rng)
    cost = _bench_cost([cand], [base], (pol.keep_concurrency, pol.guard_concurrency))
    tps = _tokens_per_step([cand])
    assert cost is not None and tps is not None
    return cost, tps


_PROMPTS: dict[str, dict[str, list[tuple[str, int]]]] = {}


def _prompts(tokenizer: str) -> dict[str, list[tuple[str, int]]]:
    if tokenizer not in _PROMPTS:
        ps = builtin_prompts()
        out: dict[str, list[tuple[str, int]]] = {}
        for p in (*ps.measured, *ps.warmup):
            out.setdefault(p.category, []).append((p.text, chat_prompt_tokens([p.text],
                                                                              tokenizer)))
        _PROMPTS[tokenizer] = out
    return _PROMPTS[tokenizer]


def run(model: EngineModel, tokenizer: str, phases: list[Phase], rate: float, max_tokens: int,
        seed: int, interval: float = 10.0, poll: float = 2.5) -> Run:
    """Open-loop traffic through ``phases``; a sample every ``interval`` device seconds."""
    rng = random.Random(seed)
    prompts = _prompts(tokenizer)
    core = EngineCore(model)
    out = Run()
    now = 0.0
    ends = [sum(p.seconds for p in phases[:i + 1]) for i in range(len(phases))]
    next_arrival = rng.expovariate(rate)
    next_sample, next_poll = interval, poll
    counts = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "generated": 0.0,
              "requests": 0.0}
    busy: dict[int, float] = {}
    running = 0
    phase = 0
    out.busy_s = [0.0] * len(phases)
    out.tokens = [0] * len(phases)
    i = 0
    while now < ends[-1]:
        while next_arrival <= now:
            ph = phases[min(phase, len(phases) - 1)]
            cat = rng.choices(list(ph.mix), list(ph.mix.values()))[0]
            text, tokens = rng.choice(prompts[cat])
            i += 1
            core.add(SeqRequest(prompt_key=stable_int("chat", f"[t{seed}-{i}] {text}"),
                                prompt_tokens=tokens + 8, category=cat, max_tokens=max_tokens))
            next_arrival += rng.expovariate(rate)
        if core.has_work():
            res = core.step()
            assert res is not None
            dt = res.duration_s
            out.busy_s[phase] += dt
            out.steps += 1
            counts["drafts"] += res.drafts
            counts["draft_tokens"] += res.draft_tokens
            counts["accepted"] += res.accepted
            counts["generated"] += res.generated_tokens
            out.tokens[phase] += res.generated_tokens
            counts["requests"] += sum(1 for o in res.outputs if o.finished)
            end = now + dt
            running = res.running
        else:
            end = min(next_arrival, next_sample, next_poll)
            running = 0
        while next_poll <= end:  # the reader's gauge: sampled at each poll, held between
            busy[running] = busy.get(running, 0.0) + poll
            next_poll += poll
        now = max(end, now)
        while next_sample <= now:
            out.samples.append(Sample(t=next_sample, wall_s=interval, device_s=interval,
                                      counts=dict(counts), busy=dict(busy)))
            counts = dict.fromkeys(counts, 0.0)
            busy = {}
            next_sample += interval
        while phase < len(phases) - 1 and now >= ends[phase]:
            phase += 1
    return out


def closed_loop_rate(model: EngineModel, tokenizer: str, mix: dict[str, float], conc: int,
                     n: int, max_tokens: int, seed: int) -> float:
    """Tokens per device second of ``conc`` clients sending ``n`` requests of the mix back to
    back (prompts drawn as `run` draws them): the speed at that batch size, for the truth."""
    rng = random.Random(seed)
    prompts = _prompts(tokenizer)
    core = EngineCore(model)
    now, sent, done, tokens = 0.0, 0, 0, 0

    def send() -> None:
        nonlocal sent
        cat = rng.choices(list(mix), list(mix.values()))[0]
        text, toks = rng.choice(prompts[cat])
        sent += 1
        core.add(SeqRequest(prompt_key=stable_int("chat", f"[c{seed}-{sent}] {text}"),
                            prompt_tokens=toks + 8, category=cat, max_tokens=max_tokens))

    for _ in range(conc):
        send()
    while done < n:
        res = core.step()
        assert res is not None
        now += res.duration_s
        tokens += res.generated_tokens
        for o in res.outputs:
            if o.finished:
                done += 1
                if sent < n:
                    send()
    return tokens / now


def look(samples: list[Sample], cost: Cost, window_s: float, policy: GatePolicy,
         min_drafted: float, confirm: int = 2, tokens_per_step: float | None = None,
         speculative: bool = True) -> tuple[Tracker, list[tuple[float, str, float | None]]]:
    """Every sample through the watch's look; the tracker and (t, verdict, speed-up)s."""
    levels = Levels.of(policy, confirm, min_drafted)
    w, t = Window(window_s), Tracker()
    trace = []
    for s in samples:
        w.add(s)
        est = estimate(w, cost, policy.run_noise, speculative, tokens_per_step)
        amount = est.draft_tokens if speculative else est.generated
        t.update(s.t, levels, amount, est.speedup, est.se_log, speculative,
                 full=est.device_s >= 0.9 * window_s, se_noise=est.se_noise or 0.0)
        trace.append((s.t, t.verdict, est.speedup))
    return t, trace


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan
