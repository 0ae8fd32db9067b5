"""Section ``gate``: the product's gate on the real engine against the truth.

The engines are the configurations the product's plan renders for an x86-cpu host
(`specdec_lab.contract.runtime.enumerate_cases`, as the runtime contract starts them: the
unit's ExecStart and Environment with this machine's paths): the baseline (speculation off)
and, one at a time, draft_model with the target as its own draft k=4, EAGLE-3 with the random
head k=3 and n-gram k=4. The baseline engine stays up for the whole section and the
candidate's for its configuration (two engines on two loopback ports), so a gate run costs no
engine start.

A **gate run** is the deploy's own gate loop, `specdec.verify.phases.gate.run_gate`, with the
product's `Bench` (`specdec.verify.phases.bench`: round sizing by
`specdec.gate.rounds.round_bench`, the decision by `specdec.gate.decide.decide` with the default
`GatePolicy`, `Decision.pending` / ``allocation`` / ``scale`` sizing the next round) on a
`Ctx` whose host IO runs `specdec.bench.run_bench_sync` here: only `Bench.activate` is
replaced (it points the bench at the arm's running engine instead of restarting the unit).
Every gate run starts with the candidate running, as after a deploy's serve, and measures its
own round-1 baseline (no baseline cache). A **truth block** is one gate round-1 bench of each
arm back to back (4 requests per arm at c=1: block i the prompts from offset 4i, so 13 blocks
cover the 52 prompts once), the first arm alternating by block. Gate runs and
truth blocks are interleaved so the truth is measured over the same hours as the runs, until
the configuration has ``--gate-runs`` runs and a truth of at least ``--truth-factor`` × the mean
gate run's bench seconds (`next_step`). Every run's and block's prompts carry a tag of their
own (`realbench.prompts.tagged`: the same ids and categories), so no prompt is served twice by
an engine's prefix cache.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realbench.engine import tree_cpu_s
from realbench.prompts import tagged
from realbench.results import Results, arms_obs
from specdec.bench import BenchConfig, device_time, run_bench_sync
from specdec.bench.client import to_json
from specdec.bench.prompts import PromptSet, builtin_prompts
from specdec.gate.rounds import BenchSettings, RoundBench, round_bench
from specdec.plan.types import GatePolicy, Plan
from specdec.verify.phases.bench import Bench
from specdec.verify.phases.gate import Arm, run_gate
from specdec.verify.phases.host import Ctx
from specdec.verify.phases.tune import release_files
from specdec.verify.spec import FileSpec, VerifySpec
from specdec_lab.contract.runtime import Case, Engine, enumerate_cases

CONFIGS = ("draft_model", "eagle3", "ngram")
CODES = {"draft_model": "d", "eagle3": "e", "ngram": "n", "none": "b"}
TRUTH_BENCH = BenchSettings(baseline_requests=4)  # both arms: one request per category at c=1
IDLE_SETTLE_S = 20.0


def cases() -> dict[str, Case]:
    """The plan's configurations for x86-cpu by method (``none`` too), without schedules;
    draft_model only with the target as its own draft (the known-truth case)."""
    out: dict[str, Case] = {}
    for c in enumerate_cases().cases:
        p = c.plan
        if p.k_by_batch or (p.method == "draft_model" and p.draft != p.model):
            continue
        out.setdefault(p.method if p.speculative else "none", c)
    return out


def label(case: Case) -> str:
    return case.id.split(": ", 1)[-1]


def bench_config(url: str, model: str, rb: RoundBench, prompts: PromptSet) -> BenchConfig:
    """A `RoundBench` as `specdec bench` turns its argv into a `BenchConfig`."""
    ids = tuple((lv, tuple(x)) for lv, x in zip(rb.levels, rb.ids, strict=False) if x)
    return BenchConfig(url=url, model=model, concurrency=rb.levels, requests=rb.requests,
                       max_tokens=rb.max_tokens, warmup=rb.warmup, prompt_offset=rb.offsets,
                       prompts=prompts, ramp_tokens=rb.ramp_tokens, prompt_ids=ids,
                       progress=False).validate()


def tag(kind: str, config: str, seed: int, index: int) -> str:
    """A prompt tag of one length for every run (``g`` gate, ``t`` truth, ...)."""
    return f"{kind}{CODES.get(config, config[:1])}{seed % 100000:05d}-{index:04d}"


class LocalIO:
    """The verifier's host IO on this machine: ``bench`` runs the product's bench client
    in-process on the built-in prompt set tagged ``<tag>.<call>`` (each call's prompts new to
    the engines' prefix caches, as after the restart a deploy makes per arm and round);
    ``spent`` sums its wall seconds."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls = 0
        self.spent = 0.0

    def prompts(self) -> PromptSet:
        self.calls += 1
        return tagged(builtin_prompts(), f"{self.tag}.{self.calls:02d}")

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        raise AssertionError(f"no host commands here: {command}")

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        raise AssertionError("no HTTP here")

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        raise AssertionError("no HTTP here")

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        cfg = bench_config(url, model, run, self.prompts())
        t0 = time.monotonic()
        res = device_time.apply(cfg.url, run_bench_sync(cfg))  # a real engine: untouched
        self.spent += time.monotonic() - t0
        return dict(json.loads(to_json(res)))

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()


class LocalBench(Bench):
    """The product's `Bench`; activating a release points the bench at its running engine."""

    def __init__(self, ctx: Ctx, url_of: Callable[[str], str]) -> None:
        super().__init__(ctx)
        self.url_of = url_of

    def activate(self, rid: str, label: str, files: Sequence[FileSpec] = ()) -> None:
        if self.ctx.running == rid:
            return
        self.ctx.base_url = self.url_of(rid)
        self.ctx.running = rid
        self.ctx.event(f"{label}: {rid} at {self.ctx.base_url}")


def make_ctx(plan: Plan, cand: str, base: str, io: LocalIO, url: str, running: str | None,
             work: Path, log: Callable[[str], None] = print) -> Ctx:
    spec = VerifySpec(plan=plan, address="127.0.0.1", candidate=cand, desired=cand,
                      baseline_id=base, work_dir=work)
    return Ctx(spec, io, {"events": [], "measurements": []}, url, running=running,
               progress=lambda phase, line: log(f"  [{phase}] {line}"))


@dataclass
class Served:
    """A started engine: its case, release id and URL."""

    case: Case
    rid: str
    engine: Engine
    ready_s: float

    @property
    def url(self) -> str:
        return self.engine.url


def start(case: Case, venv: Path, work: Path, log: Callable[[str], None] = print) -> Served:
    eng = Engine(case, venv, work)
    try:
        ready = eng.wait_healthy()
    except BaseException:
        eng.stop()
        raise
    log(f"{label(case)}: healthy in {ready:.0f} s at {eng.url} (log {eng.log})")
    return Served(case, release_files(case.plan)[0], eng, ready)


# -- one unit of work each ---------------------------------------------------------------------
def gate_run(name: str, base: Served, cand: Served, index: int, seed: int, commit: str,
             work: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """One independent gate run (`run_gate`), the candidate running first."""
    t = tag("g", name, seed, index)
    io = LocalIO(t)
    urls = {base.rid: base.url, cand.rid: cand.url}
    ctx = make_ctx(cand.case.plan, cand.rid, base.rid, io, cand.url, cand.rid, work, log)
    t0 = time.monotonic()
    dec, _ = run_gate(ctx, LocalBench(ctx, urls.__getitem__), Arm(cand.rid), Arm(base.rid))
    rules = [{k: r.to_dict()[k] for k in ("name", "measured", "ci", "verdict", "basis", "look")}
             for r in dec.rules]
    return {"kind": "gate", "config": name, "index": index, "seed": seed, "commit": commit,
            "label": label(cand.case), "tag": t, "decision": dec.decision, "code": dec.code,
            "rounds": dec.rounds, "held": dec.held, "reason": dec.reason, "rules": rules,
            "bench_s": round(io.spent, 3), "wall_s": round(time.monotonic() - t0, 3)}


def _al(res: Mapping[str, Any], levels: Sequence[int]) -> dict[str, Any]:
    out = {}
    for c in levels:
        sd = ((res.get("concurrency") or {}).get(str(c)) or {}).get("spec_decode") or {}
        out[str(c)] = sd.get("acceptance_length")
    return out


def block(kind: str, name: str, urls: Mapping[str, str], model: str, index: int, seed: int,
          commit: str, levels: Sequence[int], pol: GatePolicy, code: str = ""
          ) -> dict[str, Any]:
    """One truth (or sweep) block: both arms back to back, the first alternating by index
    (``code``: the prompt tag's configuration letter, by default the configuration's)."""
    t = tag(kind[0], code or name, seed, index)
    io = LocalIO(t)
    order = ("baseline", "candidate") if index % 2 == 0 else ("candidate", "baseline")
    res = {}
    for arm in order:
        rb = round_bench(TRUTH_BENCH, pol, arm, index, levels=list(levels))
        res[arm] = io.bench(urls[arm], model, Path(os.devnull), rb)
    return {"kind": kind, "config": name, "index": index, "seed": seed, "commit": commit,
            "tag": t, "first": order[0], "arms": arms_obs(res, levels),
            "acceptance_length": _al(res["candidate"], levels), "bench_s": round(io.spent, 3)}


def next_step(gates: Sequence[Mapping[str, Any]], truths: Sequence[Mapping[str, Any]],
              runs: int, factor: float, min_blocks: int) -> str | None:
    """What a configuration measures next: ``truth`` while the truth lags the gate runs done
    (``factor`` × their mean bench seconds × runs done / ``runs``, and ``min_blocks`` pro
    rata), else ``gate`` until ``runs``; None when both are done."""
    g = min(len(gates), runs)
    if gates and runs:
        mean = statistics.fmean(float(r["bench_s"]) for r in gates)
        spent = sum(float(r["bench_s"]) for r in truths)
        if spent < factor * mean * g / runs or len(truths) < math.ceil(min_blocks * g / runs):
            return "truth"
    elif not runs and len(truths) < min_blocks:
        return "truth"
    return "gate" if len(gates) < runs else None


def _cores(pid: int, seconds: float) -> float:
    """The cores ``pid``'s process tree keeps busy over the next ``seconds``."""
    c0, t0 = tree_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (tree_cpu_s(pid) - c0) / (time.monotonic() - t0)


def idle_check(base: Served, cand_case: Case, venv: Path, work: Path, blocks: int, seed: int,
               commit: str, pol: GatePolicy, log: Callable[[str], None] = print
               ) -> tuple[dict[str, Any], Served]:
    """The baseline's c=1 output tok/s alone, then with a second engine up and idle; the idle
    engines' CPU use. Returns the record and the second engine (kept up)."""
    model = base.case.plan.served_model_name

    def rates(tagkind: str) -> list[float]:
        out = []
        for i in range(blocks):
            io = LocalIO(tag(tagkind, "none", seed, i))
            rb = round_bench(TRUTH_BENCH, pol, "baseline", i, levels=[1])
            out.append(float(io.bench(base.url, model, Path(os.devnull), rb)
                             ["concurrency"]["1"]["output_throughput"]))
        return out

    alone = rates("a")
    base_idle = _cores(base.engine.proc.pid, IDLE_SETTLE_S)
    cand = start(cand_case, venv, work, log)
    time.sleep(IDLE_SETTLE_S)  # let its start-up threads settle
    cand_idle = _cores(cand.engine.proc.pid, IDLE_SETTLE_S)
    c2, t2 = tree_cpu_s(cand.engine.proc.pid), time.monotonic()
    beside = rates("w")
    cand_during = (tree_cpu_s(cand.engine.proc.pid) - c2) / (time.monotonic() - t2)
    rec = {"kind": "idle", "config": f"none+{cand_case.plan.method}", "index": 0, "seed": seed,
           "commit": commit, "alone_tok_s": alone, "beside_tok_s": beside,
           "base_idle_cores": round(base_idle, 4), "second_idle_cores": round(cand_idle, 4),
           "second_cores_during": round(cand_during, 4), "second": label(cand_case)}
    return rec, cand


def gate_config(name: str, base: Served, cand: Served, res: Results, args: Any, commit: str,
                work: Path, pol: GatePolicy, log: Callable[[str], None] = print) -> None:
    """Gate runs and truth blocks of one configuration until `next_step` says done."""
    model = base.case.plan.served_model_name
    urls = {"baseline": base.url, "candidate": cand.url}
    while (step := next_step(res.of("gate", name), res.of("truth", name), args.gate_runs,
                             args.truth_factor, args.truth_min_blocks)) is not None:
        if step == "gate":
            i = res.next_index("gate", name)
            rec = gate_run(name, base, cand, i, args.seed, commit, work, log)
            log(f"{name} gate run #{i}: {rec['decision']} ({rec['code']}) after "
                f"{rec['rounds']} round(s), {rec['bench_s']:.0f} bench s")
        else:
            i = res.next_index("truth", name)
            rec = block("truth", name, urls, model, i, args.seed, commit, (1, 8), pol)
            log(f"{name} truth block #{i}: {rec['bench_s']:.0f} bench s")
        res.append(rec)


def section(res: Results, args: Any, venv: Path, work: Path, commit: str,
            log: Callable[[str], None] = print) -> None:
    """Every configuration of ``args.gate_configs`` in order; engines only where work is left."""
    pol, cs = GatePolicy(), cases()
    for n in args.gate_configs:  # the report classifies the truth with the default policy
        if cs[n].plan.gate != pol:
            raise SystemExit(f"gate: the {n} plan's GatePolicy is not the default")
    todo = [n for n in args.gate_configs
            if next_step(res.of("gate", n), res.of("truth", n), args.gate_runs,
                         args.truth_factor, args.truth_min_blocks) is not None]
    idle_done = bool(res.of("idle")) or not args.idle_blocks
    if not todo and idle_done:
        log("gate: nothing left to measure in the results file")
        return
    live: list[Served] = [start(cs["none"], venv, work, log)]
    base = live[0]
    try:
        if not idle_done:
            first = todo[0] if todo else args.gate_configs[0]
            rec, cand = idle_check(base, cs[first], venv, work, args.idle_blocks, args.seed,
                                   commit, pol, log)
            live.append(cand)
            res.append(rec)
            log("idle check: " + json.dumps({k: v for k, v in rec.items()
                                             if "tok_s" in k or "cores" in k}))
        for name in todo:
            if len(live) > 1 and live[1].case.plan.method != name:
                live.pop().engine.stop()
            if len(live) == 1:
                live.append(start(cs[name], venv, work, log))
            gate_config(name, base, live[1], res, args, commit, work, pol, log)
            live.pop().engine.stop()
    finally:
        for s in live:
            s.engine.stop()
