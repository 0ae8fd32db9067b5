"""How fast `specdec watch` tells a traffic shift, how often it cries wolf on steady traffic, how
close its speed-up estimate is, and what watching costs per host.

    python3 benchmarks/watch_detect.py [--seeds 10]                 # simulation (~5 min)
    flock /run/specdec-heavy.lock python3 benchmarks/watch_detect.py --lab --seconds 120

Simulation (no lab; `watchsim`: the emulator's engine core on a virtual clock, device seconds):
lab-nano's kept n-gram k=6 (its tuned setup) with the step cost and tokens per step the gate
hands the watch (one gate round of each arm), under open-loop Poisson traffic of the built-in
prompt categories at ``--rate`` requests per device second, read as the on-host reader reads
(a sample per ``interval``, the running gauge at each poll), through the watch's own window,
estimate and verdict:

* detection: code-heavy (code=0.8,chat=0.2) then chat-heavy (chat=0.9,code=0.1); the delay from
  the shift to the first verdict other than paying, per window length;
* false alarms: an hour of steady traffic per mix after the window filled; verdict changes after
  the first verdict;
* accuracy: the estimated speed-up (mean over the hour) against the truth for that mix: the
  token rate of the speculative engine over the baseline's, closed-loop at the batch size the
  traffic ran at (the rounded mean of requests running while busy).

Lab (``--lab``): boots its own lab instance (``--instance``, default ``wbench``) with lab-nano
(vLLM, native) and lab-spark (trtllm-serve, docker; its /metrics drains), deploys it without the
gate (``specdec_verify=false``: the reading costs the same), sends each host traffic and runs
``specdec watch`` on both; after its start-up, for ``--seconds``: CPU seconds per host per hour
on the control node (the watch process and its ssh clients, from /proc) and on the host (the
reader and its sshd session, from the host's /proc), and the bytes the session sent per look;
then ``lab down``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simlab import ROOT, ROWS, Setup, World  # noqa: E402
from watchsim import Phase, closed_loop_rate, gate_facts, look, run  # noqa: E402

from specdec.plan.types import GatePolicy  # noqa: E402

CODE, CHAT = {"code": 0.8, "chat": 0.2}, {"chat": 0.9, "code": 0.1}
MIXES = {"code-heavy": CODE, "chat-heavy": CHAT,
         "built-in mix": {"chat": 1.0, "code": 1.0, "summarization": 1.0, "repetitive": 1.0},
         "extraction-heavy": {"summarization": 0.6, "repetitive": 0.2, "chat": 0.2}}
HOUR = 3600.0


def _setup(world: World) -> Setup:
    return Setup([h for h, *_ in ROWS].index("lab-nano"), "ngram", None, 6)


def simulate(seeds: int, rate: float, max_tokens: int, min_drafted: float) -> None:
    world = World()
    s = _setup(world)
    cost, tps = gate_facts(world, s)
    model, tok = world.model(s)
    base, _ = world.model(s.baseline)
    pol = GatePolicy()
    print(f"lab-nano n-gram k=6 (orin-nano-8gb, Qwen3-0.6B): step cost from the gate round "
          f"{', '.join(f'b={b}: {c:.3f}' for b, c in cost.points)}; rate {rate:g} req/s, "
          f"{max_tokens} tokens, min drafted {min_drafted:g}, {seeds} seeds (device seconds)")
    print()
    print("| window | look every | delay after the shift: median | max | told | verdict |")
    print("|---|---|---|---|---|---|")
    for window, interval in ((300.0, 10.0), (300.0, 20.0), (600.0, 20.0)):
        delays, told, ends = [], 0, []
        for seed in range(seeds):
            r = run(model, tok, [Phase(window + HOUR / 2, CODE), Phase(3 * window, CHAT)],
                    rate, max_tokens, 100 + seed, interval, interval / 4)
            tr, _ = look(r.samples, cost, window, pol, min_drafted)
            shift = window + HOUR / 2
            after = [c for c in tr.changes if c["t"] > shift and c["to"] != "paying"]
            if after:
                told += 1
                delays.append(after[0]["t"] - shift)
            ends.append(tr.verdict)
        print(f"| {window:.0f} s | {interval:.0f} s | "
              f"{statistics.median(delays) if delays else math.nan:.0f} s | "
              f"{max(delays) if delays else math.nan:.0f} s | {told}/{seeds} | "
              f"{', '.join(sorted(set(ends)))} |")
    print()
    print("| mix (an hour, window 300 s, look every 10 s) | verdict | false alarms | "
          "estimated speed-up | true speed-up at the batch served | error |")
    print("|---|---|---|---|---|---|")
    for name, mix in MIXES.items():
        alarms, verdicts, ests, truths = 0, set(), [], []
        for seed in range(seeds):
            r = run(model, tok, [Phase(300 + HOUR, mix)], rate, max_tokens, 200 + seed)
            tr, trace = look(r.samples, cost, 300.0, pol, min_drafted)
            alarms += max(0, tr.total_changes - 1)
            verdicts.add(tr.verdict)
            ests += [x[2] for x in trace[30:] if x[2] is not None]
            busy: dict[int, float] = {}
            for smp in r.samples:
                for b, v in smp.busy.items():
                    busy[b] = busy.get(b, 0.0) + v
            act = {b: v for b, v in busy.items() if b > 0}
            conc = max(1, round(sum(b * v for b, v in act.items()) / sum(act.values())))
            if seed < 3:
                truths.append(closed_loop_rate(model, tok, mix, conc, 80, max_tokens, seed)
                              / closed_loop_rate(base, tok, mix, conc, 80, max_tokens, seed))
        est, truth = statistics.fmean(ests), statistics.fmean(truths)
        print(f"| {name} | {', '.join(sorted(verdicts))} | {alarms} in {seeds} h | "
              f"{est:.3f} | {truth:.3f} | {est / truth - 1:+.1%} |")


# -- lab ----------------------------------------------------------------------------------------
LAB_HOSTS = ("lab-nano", "lab-spark")


def _sh(cmd: list[str], env: dict[str, str], timeout: float = 3600) -> str:
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}: exit {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of process ``root`` and its descendants, now."""
    procs: dict[int, tuple[int, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / _TICK)
    mine, grew = {root}, True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in mine} - mine
        grew, mine = bool(more), mine | more
    return sum(procs[p][1] for p in mine if p in procs)


# the reader's command line is its code: its docstring's first words find it
_ON_HOST = ("for r in $(pgrep -f 'specdec watc[h]. on the host: reads'); do "
            "s=$(cut -d' ' -f4 /proc/$r/stat); echo $(cut -d' ' -f14,15 /proc/$r/stat) "
            "$(cut -d' ' -f14,15 /proc/$s/stat) $(grep wchar /proc/$s/io | cut -d' ' -f2); "
            "done")


def _on_host(env: dict[str, str], host: str) -> tuple[float, float, float]:
    """(reader CPU s, its sshd session's CPU s, bytes the session wrote) on the host, now."""
    from specdec_lab.fleet import ssh_argv
    from specdec_lab.spec import lab_hosts

    h = next(x for x in lab_hosts("inventories/lab.py") if x.name == host)
    out = subprocess.run(ssh_argv(h, _ON_HOST), capture_output=True, text=True, timeout=30,
                         check=False, env=env).stdout.splitlines()
    rows = [[float(x) for x in ln.split()] for ln in out if len(ln.split()) == 5]
    if not rows:
        return math.nan, math.nan, math.nan
    v = [sum(col) for col in zip(*rows, strict=True)]
    return (v[0] + v[1]) / 100.0, (v[2] + v[3]) / 100.0, v[4]


def lab(instance: str, seconds: float, interval: float, warm: float = 20.0) -> None:
    # no site mirror (its host is not among these two): each host straight from the lab's Hub
    env = {**os.environ, "SPECDEC_LAB_INSTANCE": instance, "SPECDEC_LAB_HOSTS": "3",
           "SPECDEC_LAB_DYNAMO": "0", "SPECDEC_LAB_MIRROR": "none", "PYTHONPATH": str(ROOT)}
    os.environ.update({k: env[k] for k in ("SPECDEC_LAB_INSTANCE", "SPECDEC_LAB_HOSTS",
                                           "SPECDEC_LAB_DYNAMO", "SPECDEC_LAB_MIRROR")})
    spec = [sys.executable, "-m", "specdec"]
    limit = ",".join(LAB_HOSTS)
    _sh([*spec, "lab", "up", "inventories/lab.py", "--limit", limit], env)
    try:
        reports = Path(f"/tmp/watch-bench-{instance}")
        env["SPECDEC_REPORTS_DIR"] = str(reports)
        limits = [x for h in LAB_HOSTS for x in ("--limit", h)]
        _sh([sys.executable, "-m", "pyinfra", "-y", *limits, "inventories/lab.py",
             "deploys/specdec.py", "--data", "specdec_verify=false"], env)
        traffic = [threading.Thread(target=_sh, args=(
            [*spec, "lab", "traffic", h, "--mix", "code=0.5,chat=0.5", "--rate", "0.3",
             "--duration", str((seconds + 30) / 0.1), "--json"], env), daemon=True)
            for h in LAB_HOSTS]
        for t in traffic:
            t.start()
        watch = subprocess.Popen([*spec, "watch", "inventories/lab.py", "--limit", limit,
                                  "--json", "--interval", str(interval), "--duration",
                                  str(seconds + warm + 10), "--reports", str(reports)],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(watch.stdout or []), daemon=True).start()
        time.sleep(warm)  # started: inventory, imports, SSH sessions (not what a look costs)
        t1, c1 = time.monotonic(), _tree_cpu(watch.pid)
        h1 = {h: _on_host(env, h) for h in LAB_HOSTS}
        time.sleep(seconds)
        t2, c2 = time.monotonic(), _tree_cpu(watch.pid)
        h2 = {h: _on_host(env, h) for h in LAB_HOSTS}
        watch.wait(timeout=120)
        for t in traffic:
            t.join(timeout=seconds + 300)
        rows = {r["host"]: r for r in json.loads(
            next(x for x in reversed(lines) if x.startswith("{")))["hosts"]}
        span = t2 - t1
        per_h = 3600.0 / span
        looks = span / interval
        print(f"\nwatch of {len(LAB_HOSTS)} lab hosts, {span:.0f} s wall after {warm:.0f} s "
              f"of start-up, a look every {interval:g} s (4 reads a look; lab time scale 0.1, "
              "CPU is wall CPU)\n")
        print("| host | engine | control node CPU s/h (its share of the watch and its ssh "
              "clients) | reader CPU s/h | sshd session CPU s/h | SSH bytes per look | "
              "status |")
        print("|---|---|---|---|---|---|---|")
        for h in LAB_HOSTS:
            r = rows[h]
            d = [b - a for a, b in zip(h1[h], h2[h], strict=True)]
            print(f"| {h} | {r.get('method')} on {'trtllm' if h == 'lab-spark' else 'vllm'} | "
                  f"{(c2 - c1) / len(LAB_HOSTS) * per_h:.0f} | {d[0] * per_h:.1f} | "
                  f"{d[1] * per_h:.1f} | {d[2] / looks:.0f} | {r['status']} |")
    finally:
        subprocess.run([*spec, "lab", "down", "inventories/lab.py"], cwd=ROOT, env=env,
                       check=False, timeout=600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rate", type=float, default=0.4, help="requests per device second")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--min-drafted", type=float, default=2000)
    ap.add_argument("--lab", action="store_true", help="measure the watch's cost on a lab")
    ap.add_argument("--instance", default="wbench")
    ap.add_argument("--seconds", type=float, default=120.0, help="wall seconds of watching")
    ap.add_argument("--interval", type=float, default=2.0)
    a = ap.parse_args()
    if a.lab:
        lab(a.instance, a.seconds, a.interval)
    else:
        simulate(a.seeds, a.rate, a.max_tokens, a.min_drafted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
