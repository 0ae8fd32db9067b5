"""Rollout wall time for 10 to 10,000 devices, in device time: the real rollout scheduler in
virtual time.

The scheduler is `specdec.fleet.rollout.run_rollout` itself (batches over deploy units, canary,
--max-fail-percent / --max-unreachable-percent, unreachable hosts and ``--resume``) and, for
several control nodes, `specdec.fleet.shard` (the same mapping, canary verdict, budget and claims
through a `specdec.fleet.store.LocalStore`). Only pyinfra is simulated: a runner that takes a
batch's ``--limit`` hosts, advances a virtual clock by what the batch would take, and writes
each host's report as the deploy would. A batch takes, one after the other as pyinfra runs its
operations in lockstep (pyinfra 3.10 ``api/operations.py`` ``_run_single_op``: every host
finishes an operation before the next starts):

1. provision + weights: per site, the bytes that cross the site's link (with a site mirror:
   each model revision and image once per site; without: every host's own copy) at the site's
   bandwidth, then the fan-out on the site network; plus provisioning;
2. engine starts and benchmarks: restarts x the engine's start time (weights from disk,
   init, torch.compile, CUDA-graph capture) + tune benchmarking when the host's tune-cache key
   was not tuned in an earlier batch (tune once per key) + the gate's rounds;

each over ``--parallel`` hosts at a time (pyinfra's gevent pool, ``Config.PARALLEL``: default
min(20 x control-node cores, inventory size, (RLIMIT_NOFILE - 10) / 3), pyinfra 3.10
``api/state.py``), and never faster than the control node's CPU allows (CPU seconds per host
measured by benchmarks/fleet_scale.py, over its cores). Devices drop off at ``--drop`` per
host and come back ``--back-after`` later: they are reported unreachable and finished by a
resumed run.

**Measured inputs** come from a JSON the measuring benchmarks write (`fleetinputs`, default
``benchmarks/fleet_inputs.json``, ``--inputs``): per device, the engine restarts, tune and gate
seconds of a tuning host (``benchmarks/oracle_gap.py --write-inputs``), and the control node's
CPU seconds per host (``benchmarks/fleet_scale.py --write-inputs``); a missing one is an error
naming the command that writes it (``--cpu-s-per-host`` may give the CPU figure instead).
Start-up durations come from published logs where there are some (each cited at `DEVICES`);
where there are none (Jetson Orin start-up phases, image sizes, provisioning, site links) the
value is an assumption, named as such and a parameter. Figures are predictions, not
measurements.

    python3 benchmarks/fleet_sim.py            # the README's table
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))  # fleetinputs

import fleetinputs  # noqa: E402

from specdec.catalog import load_catalog  # noqa: E402
from specdec.fleet import rollout as ro  # noqa: E402
from specdec.fleet import shard as sh  # noqa: E402
from specdec.fleet.store import LocalStore  # noqa: E402
from specdec.report.fleet import skipped_report, write_host_report  # noqa: E402

GB = 1e9


@dataclass(frozen=True)
class Kind:
    """One kind of device in the fleet, with its per-host durations (device seconds)."""

    name: str
    share: float  # of the fleet
    model: str  # catalog id: its weight bytes come from the catalog
    head_gb: float  # EAGLE-3 head or draft (notes: ~0.3-1 GiB per head)
    image_gb: float  # ASSUMPTION: compressed engine image (no published size at hand)
    load_gbs: float  # ASSUMPTION: weights from the host's disk into memory, GB/s
    init_s: float  # process + engine init before loading
    compile_s: float  # torch.compile, cached (cold adds compile_cold_s once)
    compile_cold_s: float
    capture_s: float  # CUDA-graph capture
    restarts_tune: float = 0.0  # engine starts of a host that tunes (measured: `kinds`)
    tune_bench_s: float = 0.0  # tune benchmarking (measured)
    gate_bench_s: float = 0.0  # gate benchmarking, rounds (measured)

    MEASURED = ("restarts_tune", "tune_bench_s", "gate_bench_s")


# Sources:
# - vLLM start-up phases, 8B class, datacenter GPU: vllm-project/vllm#20264 (cached
#   torch.compile 7.5 s, graph capture 17 s, init engine 34 s); run-ai-model-streamer#67
#   (compile 45.8 s cold, capture 37 s).
# - DGX Spark (GB10): blazux/qwen3.8-Flash-DGX PR #21 (CUDA-graph capture 4-13 s; a persisted
#   compile cache saves ~80 s of init engine).
# - Jetson Orin: no published per-phase start-up log for an 8B model (notes/fleet.md §6):
#   init, compile and capture are the datacenter figures x 3 (ASSUMPTION: the Orin's
#   Cortex-A78AE cores against a server CPU), weights at the load_gbs ASSUMED.
# - Restarts, tune and gate benchmarking per host: measured, from the inputs JSON (`kinds`).
DEVICES = (
    Kind("orin-nano-8gb", 0.30, "Qwen/Qwen3-0.6B", 0.0, 8.0, 0.8, 30, 22, 135, 51),
    Kind("orin-nano-4gb", 0.10, "Qwen/Qwen3-0.6B", 0.0, 8.0, 0.8, 30, 22, 135, 51),
    Kind("orin-nx-16gb", 0.25, "Qwen/Qwen3-1.7B", 0.0, 8.0, 1.0, 30, 22, 135, 51),
    Kind("orin-nx-8gb", 0.10, "Qwen/Qwen3-1.7B", 0.0, 8.0, 1.0, 30, 22, 135, 51),
    Kind("agx-orin-32gb", 0.10, "Qwen/Qwen3-4B", 0.0, 8.0, 1.5, 30, 22, 135, 51),
    Kind("agx-orin-64gb", 0.10, "meta-llama/Llama-3.1-8B-Instruct", 0.8, 8.0, 1.5, 30, 22,
         135, 51),
    Kind("dgx-spark", 0.05, "Qwen/Qwen3-8B", 0.8, 12.0, 2.0, 10, 8, 46, 9),
)


def _number(d: Any, key: str, where: str, section: str) -> float:
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ValueError(f"{where}.{key}: {'missing' if v is None else repr(v)} (written by "
                         f"{fleetinputs.WRITERS[section]})")
    return float(v)


def kinds(inputs: Mapping[str, Any], path: Path) -> tuple[Kind, ...]:
    """`DEVICES` with their measured restarts, tune and gate seconds from the inputs file."""
    tune = inputs.get("tune") or {}
    per = tune.get("kinds") if isinstance(tune, dict) else None
    return tuple(Kind(**{**k.__dict__, **{f: _number(
        (per or {}).get(k.name), f, f"{path.name}: tune.kinds.{k.name}", "tune")
        for f in Kind.MEASURED}}) for k in DEVICES)


def cpu_s_per_host(inputs: Mapping[str, Any], path: Path) -> float:
    return _number(inputs.get("control_node") or {}, "cpu_s_per_host",
                   f"{path.name}: control_node", "control_node")


@dataclass
class Params:
    kinds: tuple[Kind, ...]  # `DEVICES` with their measured figures (`kinds`)
    cpu_s_per_host: float  # control-node CPU s per host: fleet_scale.py, its largest rollout
    site_mbps: float = 200.0  # ASSUMPTION: each site's uplink
    lan_gbs: float = 0.117  # the site mirror's 1 GbE NIC (ASSUMPTION: one mirror host)
    provision_s: float = 60.0  # ASSUMPTION: user, token, files, units, Jetson tuning
    control_cores: int = 4
    parallel: int | None = None  # pyinfra --parallel (None: pyinfra's default)
    drop: float = 0.01  # share of devices unreachable at their batch
    back_after_s: float = 3600.0
    nofile: int = 1024  # RLIMIT_NOFILE of the control node (pyinfra's MAX_PARALLEL)


@dataclass
class Device:
    name: str
    kind: Kind
    site: int
    down: bool = False


@dataclass
class Clock:
    t: float = 0.0
    bound: dict[str, float] = field(default_factory=dict)
    wan_bytes: float = 0.0


def _makespan(durations: Sequence[float], slots: int) -> float:
    """Greedy longest-first onto ``slots`` workers (pyinfra's pool takes the next host as a
    slot frees)."""
    heap = [0.0] * max(1, min(slots, len(durations)))
    for d in sorted(durations, reverse=True):
        heapq.heappush(heap, heapq.heappop(heap) + d)
    return max(heap) if durations else 0.0


class SimPyinfra:
    """The runner `specdec.fleet.rollout.run_rollout` calls: one batch in virtual time."""

    def __init__(self, devices: Mapping[str, Device], p: Params, mirror: bool,
                 clock: Clock, inventory_size: int) -> None:
        self.devices, self.p, self.mirror, self.clock = devices, p, mirror, clock
        self.weights = {k.name: load_catalog().models[k.model].weight_bytes / GB + k.head_gb
                        for k in p.kinds}
        self.site_has: set[tuple[int, str]] = set()  # (site, model or image) in its mirror
        self.tuned: set[str] = set()  # tune cache keys (a device kind = one key here)
        self.started: set[str] = set()  # hosts whose compile cache is warm
        self.batch_ends: list[float] = []
        max_parallel = round((p.nofile - 10) / 3)
        self.parallel = p.parallel or min(20 * p.control_cores, inventory_size, max_parallel)

    def _start_s(self, d: Device) -> float:
        k = d.kind
        return (k.init_s + load_catalog().models[k.model].weight_bytes / GB / k.load_gbs
                + k.compile_s + k.capture_s)

    def __call__(self, cmd: list[str], env: Any, cwd: Path) -> tuple[int, str, dict[str, str]]:
        hosts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--limit"]
        run_dir = Path(env["SPECDEC_REPORTS_DIR"]) / env["SPECDEC_RUN_ID"]
        up = [self.devices[h] for h in hosts if not self.devices[h].down]
        lost = {h: "Could not connect (timed out)" for h in hosts if self.devices[h].down}
        # phase 1: weights and image over each site's link, then the site network
        wan_s, lan_s, fetch = 0.0, 0.0, {}
        for site in sorted({d.site for d in up}):
            here = [d for d in up if d.site == site]
            wan = 0.0
            for d in here:
                for thing, size in ((d.kind.model, self.weights[d.kind.name]),
                                    (_image(d.kind), d.kind.image_gb)):
                    if not self.mirror:
                        wan += size
                    elif (site, thing) not in self.site_has:
                        self.site_has.add((site, thing))
                        wan += size
            lan = sum(self.weights[d.kind.name] + d.kind.image_gb for d in here) / self.p.lan_gbs
            s = wan * GB * 8 / (self.p.site_mbps * 1e6)
            wan_s = max(wan_s, s)
            lan_s = max(lan_s, lan if self.mirror else 0.0)
            self.clock.wan_bytes += wan * GB
            for d in here:
                fetch[d.name] = s + (lan if self.mirror else 0.0)
        phase1 = max(fetch.values(), default=0.0) + self.p.provision_s
        # phase 2: engine starts, tune (once per key), gate
        work, tuning = [], set()
        for d in up:
            k = d.kind
            tunes = k.name not in self.tuned
            if tunes:
                tuning.add(k.name)
            starts = k.restarts_tune if tunes else 2
            cold = 0.0 if d.name in self.started else k.compile_cold_s
            self.started.add(d.name)
            work.append(starts * self._start_s(d) + cold + k.gate_bench_s
                        + (k.tune_bench_s if tunes else 0.0))
        self.tuned |= tuning
        phase2 = _makespan(work, self.parallel)
        hosts_s = self.p.provision_s + _makespan(work, self.parallel)
        cpu_s = len(hosts) * self.p.cpu_s_per_host / self.p.control_cores
        took = max(phase1 + phase2, cpu_s)
        bound = max((("control node", cpu_s), ("site link", wan_s),
                     ("site network (mirror NIC)", lan_s), ("per-host work", hosts_s)),
                    key=lambda x: x[1])[0]
        self.clock.bound[bound] = self.clock.bound.get(bound, 0.0) + took
        self.clock.t += took
        self.batch_ends.append(self.clock.t)
        for d in up:
            write_host_report(run_dir, skipped_report(d.name, env["SPECDEC_RUN_ID"], "sim",
                                                      outcome="kept", phase="done"),
                              fleet=False)
        return (1 if lost else 0), "", lost


def _image(k: Kind) -> str:
    """The engine image a kind pulls: one per platform (L4T for every Jetson, SBSA for Spark)."""
    return "image:sbsa" if k.name == "dgx-spark" else "image:l4t"


def make_fleet(n: int, sites: int, kinds: Sequence[Kind]) -> list[Device]:
    out: list[Device] = []
    counts = [math.floor(k.share * n) for k in kinds]
    for i in range(n - sum(counts)):
        counts[i % len(kinds)] += 1
    for k, c in zip(kinds, counts, strict=True):
        out += [Device(f"{k.name}-{len(out) + j:05d}", k, 0) for j in range(c)]
    out.sort(key=lambda d: d.name[-5:])  # kinds interleaved, as an inventory by site would be
    for i, d in enumerate(out):
        d.site = i % sites
    return out


def simulate(n: int, sites: int, mirror: bool, control_nodes: int, p: Params,
             batches: str, seed: int = 1) -> dict[str, Any]:
    import random

    rng = random.Random(seed)
    fleet = make_fleet(n, sites, p.kinds)
    for d in rng.sample(fleet, int(round(p.drop * n))):
        if d is not fleet[0]:  # the canary is up: a down canary stops a run by design
            d.down = True
    devices = {d.name: d for d in fleet}
    clock = Clock()
    runner = SimPyinfra(devices, p, mirror, clock, n)
    order = [[d.name] for d in fleet]
    spec = ro.parse_batches(batches)

    def say(_: str) -> None:
        pass

    with tempfile.TemporaryDirectory(prefix="fleet-sim-") as tmp:
        root = Path(tmp)
        ends = []
        if control_nodes == 1:
            plan = ro.RolloutPlan(inventory=root / "inv.py", hosts=[d.name for d in fleet],
                                  batches=ro.batch_units(order, spec), max_fail_percent=0,
                                  run_id="sim", reports_root=root)
            ro.run_rollout(plan, runner, say=say)
            ends.append(clock.t)
        else:
            store = LocalStore(root / "store")
            shards = []
            for i in range(1, control_nodes + 1):
                shard = sh.Shard(i, control_nodes)
                mine, runs, has = sh.shard_batches(order, {}, shard, spec, True)
                shards.append((shard, mine, runs, has))
            shards.sort(key=lambda x: not x[2])  # the canary's shard first: the rest wait
            canary_end = 0.0
            for shard, mine, runs, has in shards:
                clock.t = canary_end
                runner.batch_ends.clear()
                coord = sh.ShardCoordinator(
                    store=store, run_id="sim", shard=shard, runs_canary=runs, has_canary=has,
                    digest="sim", tune_dir=root / f"n{shard.index}" / "tune",
                    max_fail_percent=0, max_unreachable_percent=100, say=say)
                coord.register()
                plan = ro.RolloutPlan(inventory=root / "inv.py", hosts=[d.name for d in fleet],
                                      batches=mine, max_fail_percent=0, run_id="sim",
                                      reports_root=root / f"n{shard.index}")
                ro.run_rollout(plan, runner, say=say, coord=coord)
                if runs and runner.batch_ends:
                    canary_end = runner.batch_ends[0]
                ends.append(clock.t)
        first_pass = max(ends)
        # resume the devices that dropped off, once they are back
        down = [d.name for d in fleet if d.down]
        resumed_end = first_pass
        if down:
            for d in fleet:
                d.down = False
            clock.t = max(first_pass, p.back_after_s)
            plan = ro.RolloutPlan(inventory=root / "inv.py", hosts=down,
                                  batches=ro.batch_units([[h] for h in down],
                                                         ro.parse_batches("100%")),
                                  max_fail_percent=0, run_id="sim",
                                  reports_root=root / "resume", resume=True)
            ro.run_rollout(plan, runner, say=say)
            resumed_end = clock.t
    bound = max(clock.bound.items(), key=lambda x: x[1])[0] if clock.bound else "-"
    return {"devices": n, "sites": sites, "mirror": mirror, "control_nodes": control_nodes,
            "parallel": runner.parallel, "wall_s": first_pass, "resumed_s": resumed_end,
            "bound": bound, "wan_gb": clock.wan_bytes / GB, "dropped": len(down)}


def inputs_line(inputs: Mapping[str, Any], path: Path, p: Params, cpu_given: bool) -> str:
    """Where the run's measured inputs come from, and what they are."""
    at = {sec: str((inputs.get(sec) or {}).get("commit", "?")) for sec in fleetinputs.WRITERS}
    cpu = "given" if cpu_given else f"measured at {at['control_node']}"
    return (f"fleet_sim: inputs {path.name} (tune costs measured at {at['tune']}; control-node "
            f"CPU {cpu}); per device restarts / tune s / gate s: " + ", ".join(
                f"{k.name} {k.restarts_tune:g} / {k.tune_bench_s:.0f} / {k.gate_bench_s:.0f}"
                for k in p.kinds))


def _hm(s: float) -> str:
    return f"{int(s // 3600)}:{int(s % 3600 // 60):02d}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="10,100,1000,10000")
    ap.add_argument("--batches", default="1,5%,25%,100%")
    ap.add_argument("--site-mbps", type=float, default=Params.site_mbps)
    ap.add_argument("--inputs", default=str(fleetinputs.DEFAULT),
                    help="the measured inputs JSON (benchmarks/fleetinputs.py)")
    ap.add_argument("--cpu-s-per-host", type=float, default=None,
                    help="control-node CPU s per host (default: the inputs' control_node)")
    ap.add_argument("--control-cores", type=int, default=Params.control_cores)
    ap.add_argument("--parallel", type=int, default=None)
    ap.add_argument("--drop", type=float, default=Params.drop)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    path = Path(args.inputs)
    try:
        inputs = fleetinputs.load(path)
        ks = kinds(inputs, path)
        cpu = args.cpu_s_per_host if args.cpu_s_per_host is not None else \
            cpu_s_per_host(inputs, path)
    except ValueError as e:
        print(f"fleet_sim: {e}", file=sys.stderr)
        return 2
    p = Params(ks, cpu, site_mbps=args.site_mbps, control_cores=args.control_cores,
               parallel=args.parallel, drop=args.drop)
    out = []
    for n in (int(x) for x in args.devices.split(",")):
        many = max(2, min(20, n // 50))  # several sites: ~50 devices each, at most 20
        cases = [(1, False, 1), (1, True, 1), (many, False, 1), (many, True, 1)]
        if n >= 1000:
            cases.append((many, True, min(10, n // 500)))  # --shard I/N over N nodes
        out += [simulate(n, sites, mirror, nodes, p, args.batches)
                for sites, mirror, nodes in cases]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(inputs_line(inputs, path, p, args.cpu_s_per_host is not None))
    print(f"batches {args.batches}; site link {p.site_mbps:g} Mbit/s; control node "
          f"{p.control_cores} cores, {p.cpu_s_per_host:g} CPU-s/host; {p.drop:.0%} of devices "
          f"unreachable at their batch, back after {p.back_after_s / 3600:g} h (--resume); "
          "device time")
    print("| devices | sites | site mirror | control nodes | --parallel | wall (h:mm) | "
          "with resume | bound | WAN GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['devices']:,} | {r['sites']} | {'yes' if r['mirror'] else 'no'} | "
              f"{r['control_nodes']} | {r['parallel']} | {_hm(r['wall_s'])} | "
              f"{_hm(r['resumed_s'])} | {r['bound']} | {r['wan_gb']:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
