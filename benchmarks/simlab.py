"""The lab's hosts on the emulator's pure engine core, for the gate and tuning benchmarks.

No HTTP, no sleeping: `specdec_lab.emulator.core.EngineCore` steps on a virtual clock, so a
benchmark of one arm is the same sequence of engine steps the lab's engine would run, in
device seconds (real time scale). Used by ``gate_power.py`` and ``oracle_gap.py``.

* `ROWS`: every host of ``inventories/lab.py`` (device, engine, model).
* `Setup`: a speculation setup on a row (method, draft, k, per-batch-size k, sampling
  temperature as an acceptance-degradation knob, an optional c=8 slowdown, the emulator's
  speculation world: ``chain`` or ``measured``, `specdec_lab.emulator.acceptance.VARIANTS`;
  a per-prompt acceptance spread within a category, ``spread``:
  `specdec_lab.emulator.acceptance.prompt_offset`).
* `World.truth`: the setup's population figures over the whole built-in prompt set and several
  seeds (c=1 throughput gain, c=1 TPOT p50 reduction, c=8 steady-state throughput ratio).
* `World.bench`: one arm's benchmark the way `specdec bench` runs it for a gate round
  (`specdec.gate.rounds.RoundBench`), as a bench JSON, with optional timing noise (`Noise`: per
  request, per run, stray slow requests, drift within a round, a bias between arms).
* `restart_s`: what one engine restart costs on the row's device (cited).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's specdec
sys.path.insert(1, str(ROOT / "benchmarks"))  # hdquantile

from hdquantile import hd_quantile  # noqa: E402

from specdec.bench.prompts import builtin_prompts  # noqa: E402
from specdec.catalog import load_catalog  # noqa: E402
from specdec.gate.rounds import RoundBench  # noqa: E402
from specdec_lab.emulator.acceptance import PROMPT_SPREAD  # noqa: E402
from specdec_lab.emulator.core import EngineCore, EngineModel, SeqRequest  # noqa: E402
from specdec_lab.emulator.profiles import device_profile, model_spec  # noqa: E402
from specdec_lab.emulator.setup import setup_for  # noqa: E402
from specdec_lab.emulator.textgen import category_of, chat_prompt_tokens, stable_int  # noqa: E402
from specdec_lab.emulator.timing import StepCost, StepLoad  # noqa: E402


def _lab_table() -> list[tuple[str, dict[str, Any]]]:
    spec = importlib.util.spec_from_file_location("specdec_lab_inventory",
                                                  ROOT / "inventories" / "lab.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod._TABLE)


_TABLE = _lab_table()
ROWS = [(h, d["lab_device"], d["specdec_engine"], d["specdec_model"]) for h, d in _TABLE]
# each host's own pins beyond device, engine and model (as deployed: its method, draft, k and
# image, e.g. lab-nx's draft model at k=5 on the vLLM 0.9.2 image)
PINS: dict[str, dict[str, Any]] = {
    h: {**{k: v for k, v in d.items() if k.startswith("specdec_") and k not in (
        "specdec_engine", "specdec_model", "specdec_runtime")},
        **({"specdec_image": d["lab_image"]} if "lab_image" in d else {})}
    for h, d in _TABLE}
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
    """A timing model whose steps with more than ``above`` sequences take 1/f longer."""

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


def add_spread_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompt-spread", default=f"0,{PROMPT_SPREAD:g}",
                    help="worlds by per-prompt acceptance spread within a category, "
                         "comma-separated (0: acceptance by category only; "
                         "`specdec_lab.emulator.acceptance.prompt_offset`)")


def spreads_from(a: argparse.Namespace, ap: argparse.ArgumentParser) -> list[float]:
    """``--prompt-spread``'s values, or the parser's error (exit 2)."""
    try:
        out = [float(x) for x in a.prompt_spread.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--prompt-spread: {a.prompt_spread!r} is not a comma-separated list of "
                 "numbers")
    if not out or any(not 0.0 <= x <= 0.3 for x in out):
        ap.error(f"--prompt-spread: {a.prompt_spread!r}: need values from 0 to 0.3")
    return out


@dataclass(frozen=True)
class Setup:
    """Speculation on one lab row (``method`` "none": the baseline)."""

    row: int
    method: str = "none"
    draft: str | None = None
    k: int = 0
    temperature: float = 0.0
    c8_factor: float | None = None  # None: natural c=8; else spec off above batch 2, x 1/f
    k_by_batch: tuple[tuple[int, int, int], ...] = ()
    variant: str = "chain"  # the emulator's speculation world (acceptance.VARIANTS)
    spread: float = 0.0  # per-prompt acceptance spread within a category (acceptance.py)

    @property
    def baseline(self) -> Setup:
        return Setup(self.row, temperature=self.temperature)


@dataclass(frozen=True)
class Req:
    index: int
    pid: str
    category: str
    arrival: float
    ttft: float
    e2e: float
    tokens: int
    chunks: tuple[int, ...]  # tokens per engine step (one SSE chunk each)


def closed_loop(model: EngineModel, ps: list[P], conc: int, n: int, max_tokens: int,
                temperature: float, fill: bool, ramp: int = 0
                ) -> tuple[list[Req], float, list[tuple[float, int]]]:
    """``conc`` clients send ``n`` measured requests (prompts in order, cycling), each client
    first sending one unmeasured ramp request of ``ramp`` tokens when ``ramp``; with ``fill``
    they keep sending unmeasured ones until the last measured request ends (no drain tail).
    Returns the measured requests, the level's duration and (time, tokens) of every step."""
    core = EngineCore(model)
    now = 0.0
    queue = [("ramp", n + i) for i in range(conc if ramp else 0)] + [("m", i) for i in range(n)]
    pending: list[tuple[float, str, int]] = []
    info: dict[int, list[Any]] = {}
    done: list[Req] = []
    steps: list[tuple[float, int]] = []
    open_measured = n
    extra = 0

    def issue(at: float) -> None:
        nonlocal extra
        if queue:
            kind, i = queue.pop(0)
            pending.append((at, kind, i))
        elif fill and open_measured > 0:
            pending.append((at, "fill", n + (conc if ramp else 0) + extra))
            extra += 1

    for _ in range(conc):
        issue(0.0)
    while len(done) < n:
        for item in [x for x in pending if x[0] <= now]:
            pending.remove(item)
            at, kind, idx = item
            p = ps[idx % len(ps)]
            mt = ramp if kind == "ramp" else max_tokens
            sid = core.add(SeqRequest(prompt_key=p.key, prompt_tokens=p.tokens,
                                      category=p.category, max_tokens=mt, min_tokens=mt,
                                      ignore_eos=True, temperature=temperature))
            info[sid] = [at, idx if kind == "m" else -1, None, []]
        if not core.has_work():
            now = min(x[0] for x in pending)
            continue
        res = core.step()
        assert res is not None
        now += res.duration_s
        steps.append((now, sum(len(o.tokens) for o in res.outputs)))
        for out in res.outputs:
            rec = info[out.seq_id]
            if rec[2] is None:
                rec[2] = now
            rec[3].append(len(out.tokens))
            if out.finished:
                idx = rec[1]
                if idx >= 0:
                    p = ps[idx % len(ps)]
                    done.append(Req(idx, p.pid, p.category, rec[0], rec[2] - rec[0],
                                    now - rec[0], out.generated, tuple(rec[3])))
                    open_measured -= 1
                issue(now)
    done.sort(key=lambda r: r.index)
    t0 = min(r.arrival for r in done)
    return done, max(r.arrival + r.e2e for r in done), steps if not ramp else [
        (t, k) for t, k in steps if t > t0]


@dataclass(frozen=True)
class Noise:
    """Timing noise a benchmark meets on a device (all lognormal sds on the log scale).

    ``req`` per request, ``run`` per run (one arm's level in one round: clocks, temperature);
    ``tail_p`` the chance that a request is a stray slow one, ``tail_f`` times slower (another
    process, a page fault storm); ``drift`` the largest slowdown over one round (each round
    draws its own from 0 to ``drift``, the host slowing linearly while it benchmarks both arms:
    throttling); ``bias`` a fixed slowdown of the candidate's runs against the baseline's (a
    baseline measured on a cooler device)."""

    req: float = 0.0
    run: float = 0.0
    tail_p: float = 0.0
    tail_f: float = 3.0
    drift: float = 0.0
    bias: float = 0.0

    def scaled(self, k: float) -> Noise:
        return replace(self, req=self.req * k, run=self.run * k)


NO_NOISE = Noise()


@dataclass(frozen=True)
class RawLevel:
    conc: int
    reqs: list[Req]
    duration: float


@dataclass(frozen=True)
class RawArm:
    """One arm's benchmark of a round before noise: warmup seconds, then each level."""

    warmup_s: float
    levels: list[RawLevel]

    @property
    def seconds(self) -> float:
        return self.warmup_s + sum(lv.duration for lv in self.levels)


def level_result(reqs: list[Req], duration: float, rng: random.Random, noise: Noise,
                 clock: float = 0.0, drift: float = 0.0, round_s: float = 1.0,
                 candidate: bool = False) -> dict[str, Any]:
    """A bench JSON level from simulated requests with ``noise``: ``clock`` is when the level
    starts within its round (``round_s`` long, slowing linearly by ``drift`` over it)."""
    f_run = math.exp(rng.gauss(0.0, noise.run)) if noise.run else 1.0
    if candidate and noise.bias:
        f_run *= math.exp(noise.bias)
    recs = []
    total = 0.0
    for r in reqs:
        f = f_run * (math.exp(rng.gauss(0.0, noise.req)) if noise.req else 1.0)
        if noise.tail_p and rng.random() < noise.tail_p:
            f *= noise.tail_f
        if drift:
            f *= 1.0 + drift * (clock + r.arrival + r.e2e / 2) / round_s
        total += f * r.e2e
        ttft, e2e = r.ttft * f, r.e2e * f
        tpot = (e2e - ttft) / (r.tokens - 1) * 1000 if r.tokens > 1 else None
        sizes = r.chunks[1:]
        sd = statistics.stdev(sizes) if len(sizes) >= 2 else None
        hist = [0] * (max(sizes, default=0) + 1)
        for x in sizes:
            hist[x] += 1
        recs.append({"index": r.index, "prompt_id": r.pid, "category": r.category,
                     "tpot_ms": tpot, "e2el_ms": e2e * 1000, "ttft_ms": ttft * 1000,
                     "output_tokens": r.tokens, "chunks": len(r.chunks),
                     "tokens_per_chunk": (r.tokens - 1) / (len(r.chunks) - 1)
                     if len(r.chunks) > 1 else None, "chunk_tokens_sd": sd,
                     "chunk_hist": hist, "error": None})
    tokens = sum(r.tokens for r in reqs)
    slow = total / max(1e-12, sum(r.e2e for r in reqs))  # the level's mean slowdown
    tpots = [x["tpot_ms"] for x in recs if x["tpot_ms"] is not None]
    return {"throughput_tok_s": tokens / (duration * slow),
            "tpot_ms_p50": statistics.median(tpots), "requests": recs}


@dataclass
class Truth:
    gain: float
    tpot_red: float
    c8_ratio: float
    c1_tok_s: float  # candidate's c=1 token rate, device seconds
    c8_tok_s: float


class World:
    """Engine models of the lab's rows, and cached baseline runs."""

    def __init__(self) -> None:
        self._cache: dict[Any, Any] = {}
        self.cat = load_catalog()

    def model(self, s: Setup) -> tuple[EngineModel, str]:
        _, device, engine, model = ROWS[s.row]
        dev = self.cat.device(device)
        kw: dict[str, Any] = {"max_num_seqs": dev.max_num_seqs,
                              "overlap_scheduler": engine == "trtllm", "variant": s.variant}
        if s.method == "none":
            st = setup_for(device, model, **kw)
            return st.engine_model(), st.target.tokenizer
        if s.c8_factor is not None:
            kw["max_concurrency"] = SPEC_OFF_ABOVE
        if s.k_by_batch:
            kw["k_by_batch"] = s.k_by_batch
        if s.spread:
            kw["prompt_spread"] = s.spread
        st = setup_for(device, model, s.method, s.k, s.draft, **kw)
        m = st.engine_model()
        if s.c8_factor is not None and s.c8_factor != 1.0:
            m = replace(m, timing=Slowed(m.timing, s.c8_factor))  # type: ignore[arg-type]
        return m, st.target.tokenizer

    def run(self, s: Setup, conc: int, n: int, seed: int, offset: int, fill: bool,
            max_tokens: int, warm: bool = False, ramp: int = 0, ids: tuple[str, ...] = ()
            ) -> tuple[list[Req], float, list[tuple[float, int]]]:
        base = s.method == "none"  # the baseline's timing does not depend on the seed
        key = (("base", s.row) if base else s, conc, n, None if base else seed, offset, fill,
               max_tokens, warm, ramp, ids)
        if base and key in self._cache:
            return self._cache[key]  # type: ignore[no-any-return]
        model, tok = self.model(s)
        model = replace(model, seed=seed)
        ps = prompt_list("warmup" if warm else f"c{conc}", tok, warm)
        if ids:  # these prompts, then the rest of the set (fillers, ramp)
            by = {p.pid: p for p in ps}
            ps = [by[i] for i in ids] + [p for p in ps if p.pid not in ids]
        else:
            ps = [ps[(offset + i) % len(ps)] for i in range(len(ps))]
        out = closed_loop(model, ps, conc, n, max_tokens, s.temperature, fill, ramp)
        if base:
            self._cache[key] = out
        return out

    def rates(self, s: Setup, seeds: int, max_tokens: int, c8: bool = True
              ) -> tuple[float, list[float], float | None]:
        """(c=1 token rate, c=1 TPOTs, c=8 steady-state rate) over the whole prompt set."""
        n_all = len(builtin_prompts().measured)
        tok = sec = 0.0
        tpots: list[float] = []
        r8: list[float] = []
        for i in range(seeds):
            seed = 10_000 + i
            reqs, _, _ = self.run(s, 1, n_all, seed, 0, False, max_tokens)
            tok += sum(r.tokens for r in reqs)
            sec += sum(r.e2e for r in reqs)
            tpots += [(r.e2e - r.ttft) / (r.tokens - 1) for r in reqs]
            if c8 and i < max(1, seeds // 2):
                reqs, _, steps = self.run(s, 8, 2 * n_all, seed, 0, True, max_tokens)
                sends = sorted(r.arrival for r in reqs)
                w0, w1 = sends[8], sends[-1]  # after the first wave, before the tail
                r8.append(sum(k for t, k in steps if w0 < t <= w1) / (w1 - w0))
        return tok / sec, tpots, statistics.fmean(r8) if r8 else None

    def truth(self, s: Setup, seeds: int, max_tokens: int) -> Truth:
        key = ("truth", s.baseline, seeds, max_tokens)
        if key not in self._cache:
            self._cache[key] = self.rates(s.baseline, seeds, max_tokens)
        b1, bt, b8 = self._cache[key]
        c1, ct, c8 = self.rates(s, seeds, max_tokens)
        assert b8 is not None and c8 is not None
        return Truth(c1 / b1 - 1.0, 1.0 - hd_quantile(ct) / hd_quantile(bt), c8 / b8, c1, c8)

    def bench_raw(self, s: Setup, rb: RoundBench, seed: int) -> RawArm:
        """One arm's benchmark for a gate round, before any noise (device seconds)."""
        warm = 0.0
        if rb.warmup:
            _, warm, _ = self.run(s, max(rb.levels), rb.warmup, seed, 0, False,
                                  max(2, min(16, rb.max_tokens)), warm=True)
        levels = []
        ids = rb.ids or tuple(() for _ in rb.levels)
        for conc, n, off, chosen in zip(rb.levels, rb.requests, rb.offsets, ids, strict=True):
            reqs, dur, _ = self.run(s, conc, n, seed, off, conc > 1, rb.max_tokens,
                                    ramp=rb.ramp_tokens if conc > 1 else 0, ids=chosen)
            levels.append(RawLevel(conc, reqs, dur))
        return RawArm(warm, levels)

    @staticmethod
    def noisy(raw: RawArm, rb: RoundBench, rng: random.Random, noise: Noise = NO_NOISE,
              clock: float = 0.0, drift: float = 0.0, round_s: float = 1.0,
              candidate: bool = False) -> dict[str, Any]:
        """The bench JSON of a raw arm with ``noise`` (``clock``: when the arm starts within
        its round; ``drift``: this round's slowdown at its end)."""
        t = clock + raw.warmup_s
        levels = {}
        for lv in raw.levels:
            levels[str(lv.conc)] = level_result(lv.reqs, lv.duration, rng, noise, t, drift,
                                                round_s, candidate)
            t += lv.duration
        cats = builtin_prompts().categories()
        return {"config": {"max_tokens": rb.max_tokens, "endpoint": "chat",
                           "requests": list(rb.requests)},
                "prompts": {"categories": cats}, "concurrency": levels}

    def bench(self, s: Setup, rb: RoundBench, seed: int, rng: random.Random,
              noise: Noise = NO_NOISE) -> tuple[dict[str, Any], float]:
        """One arm's bench JSON for a gate round, and its device seconds (warmup included)."""
        raw = self.bench_raw(s, rb, seed)
        return self.noisy(raw, rb, rng, noise, candidate=s.method != "none"), raw.seconds


# -- engine restarts ----------------------------------------------------------------------------
# What one switch between the gate's arms costs on a device: the engine stops and starts with the
# other release (weights from the page cache, cached torch.compile, CUDA graphs captured again).
# Published figures: vLLM, 8B class, cached torch.compile: "init engine (profile, create kv cache,
# warmup model) took 34.11 seconds" and the first response after 59 s in total
# (https://github.com/vllm-project/vllm/issues/20264, a datacenter GPU); on a GB10 (DGX Spark)
# CUDA-graph capture took 4-13 s (blazux/qwen3.8-Flash-DGX PR #21, via docs/research/fleet.md).
# No per-phase start log of an 8B model on any Orin module and no trtllm-serve start time on a
# Spark is published (fleet.md §6): the Spark's vLLM figure is used for trtllm-serve too, and an
# Orin's is the same start scaled by its CPU (the emulator's family cpu_factor: graph capture and
# Python start-up are CPU-bound), plus its weights read at the emulator's disk rate.
RESTART_REF_S = 59.0  # vllm#20264: the start of an 8B model with a cached compile, to serving


def restart_s(row: int) -> float:
    """Device seconds one engine restart of the row's host costs (see the comment above)."""
    _, device, _, model = ROWS[row]
    prof = device_profile(device)
    spec = model_spec(model)
    load = spec.weight_bytes / (prof.disk_gbs * 1e9) if spec is not None else 0.0
    return RESTART_REF_S * max(1.0, prof.cpu_factor) + load
