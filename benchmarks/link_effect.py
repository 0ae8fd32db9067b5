"""What a link between the benchmark client and the engine does to the gate: gate decisions and
TPOT error with and without 80 ms ± 30 ms links, with the client on the host (loopback,
``specdec_bench_mode: host``, the default) and on the control node (``control``).

Run as root, under the machine's heavy lock (it starts two engine emulators in a network
namespace and, for the link, the lab's NFQUEUE link emulator):

    flock /run/specdec-heavy.lock python3 benchmarks/link_effect.py --trials 2

Setup: one lab-style host (a network namespace ``specdec-lab-<instance>-bench`` with the lab's
/30 veth, `specdec_lab.host.create_netns`) runs two vLLM emulators of an AGX Orin 64GB (at half the
device's speed in wall time: ``--time-scale 0.5``; the link is scaled alike, so in device time it is
80 ms ± 30 ms): the candidate (Qwen3-8B with its EAGLE-3 head, k=3)
and the baseline (no speculation). The link is the lab's own (`specdec_lab.link.apply` with
``lab_link: {delay_ms: 80, jitter_ms: 30}``: each direction of the veth; this kernel has no
``sch_netem``, so it is the NFQUEUE emulator). The control client is ``specdec bench`` on this
machine across the veth; the host client is `specdec.bench.onhost` run inside the namespace
against 127.0.0.1 through `specdec.bench.remote.run_on_host` (the deploy's own code path).

Per (link, mode):

* TPOT error: the candidate at c=1 (``--tpot-requests`` requests, no warmup), the client's TPOT
  p50 against the emulator's own (``/lab/truth``: chunk write times on the server), both in
  device time (the clients convert an emulator's figures); TTFT too (the client's includes the
  link's request and response delay; the server's does not);
* gate: ``--trials`` full gates as the deploy runs them (`specdec.gate.rounds` rounds, ABAB, up to
  ``max_rounds``; `specdec.gate.decide.decide`), each its decision and rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's specdec

from specdec.bench import remote  # noqa: E402
from specdec.gate.decide import decide  # noqa: E402
from specdec.gate.rounds import BenchSettings, RoundBench, round_bench  # noqa: E402
from specdec.plan.types import GatePolicy  # noqa: E402
from specdec.verify import verifier as sv  # noqa: E402
from specdec_lab import host as hostmod  # noqa: E402
from specdec_lab import link as linkmod  # noqa: E402
from specdec_lab.emulator.local import lab_truth, reset_truth  # noqa: E402
from specdec_lab.instance import Instance  # noqa: E402
from specdec_lab.spec import LabHost  # noqa: E402
from specdec_lab.system import Proc, run, stop_process  # noqa: E402

MODEL = "Qwen/Qwen3-8B"
HEAD = "RedHatAI/Qwen3-8B-speculator.eagle3"
PORTS = {"candidate": 8001, "baseline": 8002}
LINK = linkmod.Link(delay_ms=80, jitter_ms=30)


class Host:
    """The namespace, its two emulators and (later) its link; removed on exit."""

    def __init__(self, instance: str, scale: float, work: Path) -> None:
        inst = Instance(instance)
        addr = inst.host_address(1)
        self.h = LabHost(name="bench", device="agx-orin-64gb", address=addr,
                         gateway=addr[:-1] + "1", index=64, port=PORTS["candidate"],
                         fault=None, engine="vllm", runtime="native", instance=instance)
        self.scale, self.work = scale, work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.link: Proc | None = None

    def url(self, arm: str, where: str) -> str:
        return f"http://{'127.0.0.1' if where == 'host' else self.h.address}:{PORTS[arm]}"

    def up(self) -> None:
        if Path(f"/run/netns/{self.h.netns}").exists():
            raise SystemExit(f"{self.h.netns} exists: another run of this benchmark?")
        hostmod.create_netns(self.h)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECDEC_EMU_DEVICE": self.h.device,
               "SPECDEC_EMU_TIME_SCALE": str(self.scale), "SPECDEC_EMU_SEED": "7"}
        spec = json.dumps({"method": "eagle3", "model": HEAD, "num_speculative_tokens": 3})
        for arm, port in PORTS.items():
            args = ["--speculative-config", spec] if arm == "candidate" else []
            with open(self.work / f"{arm}.log", "wb") as log:
                self.procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", self.h.netns, sys.executable, "-m",
                     "specdec_lab.emulator", "vllm", "serve", MODEL, *args, "--host", "0.0.0.0",
                     "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=ROOT))
        deadline = time.monotonic() + 90
        for arm in PORTS:
            while sv.http_get(self.url(arm, "control") + "/health", 2.0)[0] != 200:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the {arm} emulator did not come up (see {self.work})")
                time.sleep(0.2)

    def set_link(self) -> None:
        """`LINK` in device time: the emulator runs ``scale`` wall seconds per device second,
        and the results are in device time, so the wall link is ``LINK`` times ``scale``."""
        wall = linkmod.Link(LINK.delay_ms * self.scale, LINK.jitter_ms * self.scale)
        self.link = linkmod.apply(self.h.netns, self.h.veth, wall, self.work / "link.log")

    def down(self) -> None:
        for p in self.procs:
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                p.kill()
        stop_process(self.link, grace=5)
        run(["ip", "link", "del", self.h.veth], "ip link del", check=False)
        run(["ip", "netns", "del", self.h.netns], "ip netns del", check=False)

    def run_in(self, command: str, timeout: float | None) -> tuple[bool, list[str]]:
        """`remote.Run` inside the namespace: the host's shell."""
        p = subprocess.run(["ip", "netns", "exec", self.h.netns, "sh", "-c", command],
                           capture_output=True, text=True, timeout=timeout, check=False)
        return p.returncode == 0, p.stdout.splitlines()


@contextlib.contextmanager
def lab_host(instance: str, scale: float, work: Path) -> Iterator[Host]:
    h = Host(instance, scale, work)
    try:
        h.up()
        yield h
    finally:
        h.down()


def bench(h: Host, mode: str, arm: str, rb: RoundBench, out: Path) -> dict[str, Any]:
    if mode == "control":
        return sv.bench_subprocess(h.url(arm, "control"), MODEL, out, rb, 900.0)
    # the client runs as nobody (as on a host): its files in a directory nobody can read
    onhost = h.work / "onhost"
    onhost.mkdir(exist_ok=True)
    for d in (h.work, onhost):
        d.chmod(0o755)
    b = remote.bundle(base=str(onhost))
    # the emulators here run without an API key (no proxy in front of them)
    return remote.run_on_host(h.run_in, b, PORTS[arm], MODEL, rb.argv(), 900.0, "host",
                              key_file=None)


def tpot_error(h: Host, mode: str, n: int, max_tokens: int) -> dict[str, float]:
    rb = RoundBench((1,), (n,), (0,), max_tokens, 0)
    reset_truth(h.url("candidate", "control"))
    res = bench(h, mode, "candidate", rb, h.work / f"tpot-{mode}.json")
    truth = lab_truth(h.url("candidate", "control"))["unscaled"]  # device time, as the result
    lvl = res["concurrency"]["1"]
    return {"tpot_client": lvl["tpot_ms_p50"], "tpot_truth": truth["tpot_ms_p50"],
            "tpot_err_pct": 100 * (lvl["tpot_ms_p50"] / truth["tpot_ms_p50"] - 1),
            "ttft_client": lvl["ttft_ms_p50"], "ttft_truth": truth["ttft_ms_p50"]}


def gate(h: Host, mode: str, trial: int) -> tuple[str, int, float]:
    """One gate as the deploy's verify phase runs it: (decision, rounds, seconds)."""
    bs, pol = BenchSettings(), GatePolicy()
    bases: list[dict[str, Any]] = []
    cands: list[dict[str, Any]] = []
    levels: tuple[int, ...] | None = None
    alloc: dict[str, float] = {}
    t0 = time.monotonic()
    for rnd in range(pol.max_rounds):
        used = [r["prompt_id"] for c in cands
                for r in (c["concurrency"].get(str(pol.keep_concurrency)) or {}).get(
                    "requests", [])]
        for arm, out in (("baseline", bases), ("candidate", cands)):
            # trials move through the prompt set as rounds do
            rb = round_bench(bs, pol, arm, rnd + trial * pol.max_rounds, levels, alloc, used)
            out.append(bench(h, mode, arm, rb, h.work / f"{mode}-{trial}-{rnd}-{arm}.json"))
        dec = decide(bases, cands, pol)
        if dec.decision != "inconclusive" or dec.held:
            return dec.decision, rnd + 1, time.monotonic() - t0
        levels, alloc = dec.pending, dec.allocation
    return "inconclusive", pol.max_rounds, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2, help="gates per link and mode")
    ap.add_argument("--tpot-requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-scale", type=float, default=0.5)
    ap.add_argument("--instance", default="lnkbm", help="lab instance naming the namespace")
    a = ap.parse_args()
    rows: list[tuple[str, str, dict[str, float], list[tuple[str, int, float]]]] = []
    with tempfile.TemporaryDirectory(prefix="link-effect-") as tmp, \
            lab_host(a.instance, a.time_scale, Path(tmp)) as h:
        for label in ("none", str(LINK)):
            if label != "none":
                h.set_link()
            for mode in ("host", "control"):
                err = tpot_error(h, mode, a.tpot_requests, a.max_tokens)
                gates = [gate(h, mode, t) for t in range(a.trials)]
                rows.append((label, mode, err, gates))
                print(f"# {label} {mode}: {err} {gates}", file=sys.stderr, flush=True)
    print(f"link effect: {MODEL} + EAGLE-3 (k=3) vs no speculation, vLLM emulator of an AGX "
          f"Orin 64GB, time scale {a.time_scale:g}; link on the host's veth, each direction; "
          "figures in device time")
    print(f"{'link':<14} {'client':<8} {'TPOT p50 client/truth ms':>25} {'TPOT err':>9} "
          f"{'TTFT p50 client/truth ms':>25}  gate decisions (rounds)")
    for label, mode, e, gates in rows:
        decs = ", ".join(f"{d} ({r})" for d, r, _ in gates)
        secs = statistics.mean(s for _, _, s in gates)
        print(f"{label:<14} {mode:<8} {e['tpot_client']:>12.2f} / {e['tpot_truth']:<10.2f} "
              f"{e['tpot_err_pct']:>+8.1f}% {e['ttft_client']:>12.1f} / {e['ttft_truth']:<10.1f}"
              f"  {decs}; {secs:.0f} s/gate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
