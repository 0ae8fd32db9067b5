"""What one control node spends per host, at 8, 16 and 32 lab hosts.

For each size it boots a lab instance of that many hosts (`inventories/lab.py`:
SPECDEC_LAB_HOSTS = size - 4, plus the Dynamo groups: 2 members, and from 9 table hosts a
second group), prints the lab's memory (PSS) per host and boot time, then measures on the
control node, each as its own process tree (``os.wait4``: CPU seconds user + system and peak
RSS of the command and every process it waited for):

1. a provisioning deploy: ``pyinfra -y --parallel P inventories/lab.py deploys/specdec.py
   --data specdec_verify=false``;
2. a full rollout: ``specdec rollout inventories/lab.py --batches 1,25%,100% --parallel P
   --data specdec_reverify=true`` (tune, gate, per-host reports: the provisioning deploy's
   releases count as verified otherwise);
3. a no-op re-run: ``pyinfra -y --parallel P inventories/lab.py deploys/specdec.py`` (every
   host unchanged);

with the wall time and the SSH connections opened (TCP SYNs from this machine to port 22 in
the instance's subnet, counted by an iptables rule the benchmark adds and removes). ``P`` is
pyinfra's own ``--parallel`` (default here 40: pyinfra's default on this 2-CPU machine,
min(20 x CPUs, inventory size, open-files limit / 3), pyinfra 3.10 ``api/state.py``; given
explicitly so every size runs with the same). With ``--dropoff`` the largest size also runs the
drop-off drill: 2 hosts cut off before an unchanged rollout, a third during it, back up, then
``--resume``.

Heavy: run it alone, under the lab lock, with the exact command of the README:
``flock /run/specdec-heavy.lock python3 benchmarks/fleet_scale.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))  # fleetinputs

import fleetinputs  # noqa: E402

from specdec.report.fleet import REPORTS_ENV  # noqa: E402
from specdec_lab.instance import Instance  # noqa: E402

INVENTORY = "inventories/lab.py"
DEPLOY = "deploys/specdec.py"
# Short benchmarks on the emulator (as the end-to-end tests use): the control node's cost per
# host is what is measured here, not the gate.
BENCH = {"SPECDEC_BENCH_REQUESTS": "16", "SPECDEC_BENCH_MAX_TOKENS": "64",
         "SPECDEC_BENCH_WARMUP": "1", "SPECDEC_BENCH_TIMEOUT": "120"}


FACT_CACHE_OFF = "SPECDEC_FACT_CACHE"  # roles/factcache.py: "off" reads every fact live
STEPS = ("provision", "rollout", "noop", "noop")
STEP_NAMES = {"provision": "provision", "rollout": "rollout", "noop": "no-op",
              "noop-live": "no-op, facts live"}


@dataclass
class Run:
    what: str
    rc: int
    wall_s: float
    cpu_s: float
    maxrss_mib: float
    ssh: int
    tail: str

    @property
    def changed(self) -> int | None:
        """Operations that changed a host (pyinfra's "Grand total" row), None if not printed."""
        m = re.search(r"Grand total\s+(\d+)\s+(\d+|-)", self.tail)
        return None if m is None else (0 if m.group(2) == "-" else int(m.group(2)))


class SynCounter:
    """TCP SYNs to port 22 of the instance's subnet, counted by one iptables rule."""

    def __init__(self, inst: Instance) -> None:
        self.rule = ["OUTPUT", "-p", "tcp", "--syn", "--dport", "22", "-d", str(inst.subnet),
                     "-m", "comment", "--comment", f"specdec-fleet-scale-{inst.name}", "-j",
                     "ACCEPT"]

    def __enter__(self) -> SynCounter:
        subprocess.run(["iptables", "-I", *self.rule], check=True)
        return self

    def count(self) -> int:
        out = subprocess.run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if f"/* {self.rule[11]} */" in line:
                return int(line.split()[0])
        return 0

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["iptables", "-D", *self.rule], check=False)


def measured(what: str, argv: list[str], env: dict[str, str], syn: SynCounter,
             during: Any = None, log: Path | None = None) -> Run:
    """Run ``argv`` as its own process tree; its output, each line with the seconds since the
    start, goes to ``log`` (where the time went)."""
    before = syn.count()
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                lines.append(f"{time.monotonic() - t0:8.2f} {line}")

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        if during is not None:
            threading.Thread(target=during, args=(out,), daemon=True).start()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        reader.join(30)
        text = "".join(line[9:] for line in lines)
    if log is not None:
        log.write_text("".join(lines))
    rc = os.waitstatus_to_exitcode(status)
    tail = " | ".join(text.strip().splitlines()[-3:])[-400:]
    return Run(what, rc, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024,
               syn.count() - before, tail)


def specdec(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=3600)


def one_size(size: int, inst: Instance, parallel: int, dropoff: bool,
             reports: Path, steps: Sequence[str] = STEPS) -> dict[str, Any]:
    env = {**os.environ, **BENCH, "SPECDEC_LAB_INSTANCE": inst.name,
           "SPECDEC_LAB_HOSTS": str(size - (4 if size - 4 >= 9 else 2)),
           "PYTHONUNBUFFERED": "1"}
    env.pop("SPECDEC_LAB_FAULTS", None)
    t0 = time.monotonic()
    up = specdec("lab", "up", INVENTORY, env=env)
    up_s = time.monotonic() - t0
    if up.returncode != 0:
        raise SystemExit(f"lab up ({size} hosts) failed: {up.stderr.strip()[-600:]}")
    out: dict[str, Any] = {"size": size, "up_s": up_s}
    try:
        st = specdec("lab", "status", INVENTORY, "--json", env=env)
        rows = json.loads(st.stdout)
        assert len(rows) == size, f"{len(rows)} hosts up, expected {size}"
        mem = sorted(r.get("memory_mib") or 0.0 for r in rows)
        boot = sorted(r.get("boot_s") or 0.0 for r in rows)
        out.update(mem_median=mem[len(mem) // 2], mem_max=mem[-1], mem_total=sum(mem),
                   boot_median=boot[len(boot) // 2], boot_max=boot[-1])
        par = ["--parallel", str(parallel)]
        pyinfra = [sys.executable, "-m", "pyinfra", "-y", *par, INVENTORY, DEPLOY]
        runs = []
        with SynCounter(inst) as syn:
            logs = reports.parent / "logs"
            logs.mkdir(exist_ok=True)
            for step in steps:
                if step == "provision":
                    runs.append(measured("provision", [*pyinfra, "--data",
                                                       "specdec_verify=false"],
                                         env, syn, log=logs / f"provision-{size}.log"))
                elif step == "rollout":
                    # the provisioning deploy marked its releases last-good unverified:
                    # re-verify
                    runs.append(measured("rollout", [
                        sys.executable, "-m", "specdec", "rollout", INVENTORY, *par,
                        "--batches", "1,25%,100%", "--reports", str(reports), "--run-id",
                        f"scale{size}", "--data", "specdec_reverify=true"], env, syn,
                        log=logs / f"rollout-{size}.log"))
                else:  # no-op, or no-op with every fact read live (roles/factcache.py)
                    # the rollout's reports directory: the control node's state (last-verified
                    # records, the facts each host was asked for) is the rollout's
                    off = {FACT_CACHE_OFF: "off"} if step == "noop-live" else {}
                    n = sum(r.what == STEP_NAMES[step] for r in runs) + 1
                    runs.append(measured(STEP_NAMES[step], pyinfra,
                                         {**env, **off, REPORTS_ENV: str(reports)}, syn,
                                         log=logs / f"{step}-{size}-{n}.log"))
            if dropoff:
                out["dropoff"] = drill(size, env, par, reports, syn)
        out["runs"] = [{**r.__dict__, "changed": r.changed} for r in runs]
    finally:
        down = specdec("lab", "down", INVENTORY, env=env)
        if down.returncode != 0:
            print(f"lab down failed: {down.stderr.strip()[-400:]}", file=sys.stderr)
    return out


def drill(size: int, env: dict[str, str], par: list[str], reports: Path,
          syn: SynCounter) -> dict[str, Any]:
    """2 hosts down before an unchanged rollout, 1 during; up; --resume."""
    names = [r["host"] for r in json.loads(specdec("lab", "status", INVENTORY, "--json",
                                                    env=env).stdout)]
    plain = [n for n in names if not n.startswith("lab-dyn")]
    before, late = plain[3:5], plain[-1]  # the canary (first host) stays up
    for h in before:
        assert specdec("lab", "net", h, "down", env=env).returncode == 0
    cut: list[float] = []

    def during(out: Any) -> None:
        while True:  # once batch 2 started, cut a host of batch 3
            out.seek(0)
            if re.search(r"batch 2/3", out.read()):
                specdec("lab", "net", late, "down", env=env)
                cut.append(time.monotonic())
                return
            time.sleep(0.5)

    run_id = f"drop{size}"
    first = measured("drop-off rollout", [
        sys.executable, "-m", "specdec", "rollout", INVENTORY, *par, "--batches", "1,25%,100%",
        "--reports", str(reports), "--run-id", run_id], env, syn, during)
    for h in [*before, late]:
        specdec("lab", "net", h, "up", env=env)
    reps = {p.stem: json.loads(p.read_text())["outcome"]
            for p in (reports / run_id).glob("*.json") if p.stem not in ("hosts", "run")}
    again = measured("--resume", [sys.executable, "-m", "specdec", "rollout", INVENTORY, *par,
                                  "--reports", str(reports), "--resume", run_id], env, syn)
    after = {p.stem: json.loads(p.read_text())["outcome"]
             for p in (reports / run_id).glob("*.json") if p.stem not in ("hosts", "run")}
    return {"down": [*before, late], "rc": first.rc, "unreachable":
            sorted(h for h, o in reps.items() if o == "unreachable"),
            "resume_rc": again.rc, "after": {h: after.get(h) for h in [*before, late]},
            "cut_during": bool(cut), "resume_wall_s": again.wall_s}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,16,32")
    ap.add_argument("--parallel", type=int, default=40)
    ap.add_argument("--instance", default="fscale")
    ap.add_argument("--no-dropoff", action="store_true")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="steps per size, in order, from: " + ", ".join(STEP_NAMES) +
                    " (noop-live: the no-op with SPECDEC_FACT_CACHE=off, every fact read "
                    "live as pyinfra does); a step may repeat")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--write-inputs", metavar="FILE", help="write the control node's CPU "
                    "seconds per host of the largest size's rollout to FILE's control_node "
                    "section (benchmarks/fleetinputs.py; fleet_sim.py reads it)")
    ap.add_argument("--logs", metavar="DIR", help="keep reports and timed logs here")
    args = ap.parse_args(argv)
    inst = Instance(args.instance)
    sizes = [int(x) for x in args.sizes.split(",")]
    steps = [x.strip() for x in args.steps.split(",") if x.strip()]
    if bad := [x for x in steps if x not in STEP_NAMES]:
        ap.error(f"--steps: unknown step {bad[0]!r} (known: {', '.join(STEP_NAMES)})")
    results = []
    at = fleetinputs.commit()  # what the figures were measured on
    work = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    for size in sizes:
        dropoff = not args.no_dropoff and size == max(sizes)
        reports = work / "reports"
        reports.mkdir(parents=True, exist_ok=True)
        r = one_size(size, inst, args.parallel, dropoff, reports, steps)
        results.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    print(f"(reports and timed logs: {work})", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.write_inputs:
        write_inputs(Path(args.write_inputs), results, at)
    print(f"fleet_scale: pyinfra --parallel {args.parallel}; control node: this machine "
          f"({os.cpu_count()} CPUs); CPU = user + system seconds of the command's process tree")
    print("| hosts | lab up s | boot median / max s | memory per host median / max MiB | "
          "step | wall s | rc | changed ops | CPU s | CPU s / host | peak RSS MiB | "
          "RSS MiB / host | SSH connections |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for i, run in enumerate(r["runs"]):
            head = (f"| {r['size']} | {r['up_s']:.0f} | {r['boot_median']:.1f} / "
                    f"{r['boot_max']:.1f} | {r['mem_median']:.0f} / {r['mem_max']:.0f} "
                    if i == 0 else "| | | | ")
            n = r["size"]
            ch = "?" if run.get("changed") is None else run["changed"]
            print(f"{head}| {run['what']} | {run['wall_s']:.1f} | {run['rc']} | {ch} | "
                  f"{run['cpu_s']:.1f} | {run['cpu_s'] / n:.2f} | {run['maxrss_mib']:.0f} | "
                  f"{run['maxrss_mib'] / n:.1f} | {run['ssh']} |")
    by = {r["size"]: r for r in results}

    def first(size: int, what: str) -> dict[str, Any] | None:
        """The step's first run; for a no-op, its first run that changed nothing."""
        return next((x for x in by[size]["runs"] if x["what"] == what
                     and (what != "no-op" or x.get("changed") == 0)), None)

    if 8 in by and 32 in by:
        for what in ("provision", "rollout", "no-op"):
            a8, a32 = first(8, what), first(32, what)
            if a8 and a32:
                print(f"{what}: CPU s per host at 32 / at 8 = "
                      f"{a32['cpu_s'] / 32 / (a8['cpu_s'] / 8):.2f} (target <= 1.2)")
    if 32 in by:
        for what in ("no-op", "no-op, facts live"):
            runs32 = [x for x in by[32]["runs"] if x["what"] == what]
            walls = [f"{x['wall_s']:.1f}" + ("" if x.get("changed") == 0 else
                                             f" ({x.get('changed')} ops changed: not a no-op)")
                     for x in runs32]
            if walls:
                print(f"{what} re-run of 32 hosts: {' / '.join(walls)} s (target <= 30)")
    for r in results:
        if "dropoff" in r:
            d = r["dropoff"]
            print(f"drop-off drill at {r['size']}: cut {', '.join(d['down'])} (the last during "
                  f"the rollout: {d['cut_during']}); rollout rc {d['rc']}, unreachable "
                  f"{', '.join(d['unreachable'])}; --resume rc {d['resume_rc']} in "
                  f"{d['resume_wall_s']:.0f} s: {d['after']}")
    return 0


def write_inputs(path: Path, results: list[dict[str, Any]], at: str) -> None:
    """benchmarks/fleetinputs.py's ``control_node`` section: CPU seconds per host of the
    largest size's first rollout (what fleet_sim.py charges each host of a batch)."""
    top = max(results, key=lambda r: r["size"])
    run = next((x for x in top["runs"] if x["what"] == "rollout" and x["rc"] == 0), None)
    if run is None:
        print(f"--write-inputs: no successful rollout at {top['size']} hosts: nothing written "
              f"to {path}", file=sys.stderr)
        return
    fleetinputs.update(path, "control_node", {
        "hosts": top["size"], "cpus": os.cpu_count(),
        "cpu_s_per_host": round(run["cpu_s"] / top["size"], 3)}, at)
    print(f"wrote the control_node section of {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
