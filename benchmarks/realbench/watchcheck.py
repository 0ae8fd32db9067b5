"""Section ``watch``: `specdec watch`'s live acceptance length against the engine's own counters
over the same window of traffic.

The watch's own reader (`specdec.watch.reader`, run as on a host: ``python3 -I -c <reader>``,
local, no SSH) samples the engine's ``/metrics`` in windows of ``window_s`` with the vLLM sources
`specdec.engines.vllm.metrics` names; its window lines become `Sample`s in a `Window` and
`specdec.watch.estimate.estimate` computes the live acceptance length, as `specdec watch` does.
Independently, the benchmark scrapes ``/metrics`` itself after the reader's first poll and
after the traffic (before the reader's last poll): ``1 + Δaccepted / Δdrafts`` of those two
scrapes, read with a parser of its own (not specdec's)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from realbench.engine import SERVED, Server
from specdec.bench import BenchConfig, run_bench_sync
from specdec.bench.prompts import PromptSet
from specdec.engines.vllm.metrics import COUNTERS, GAUGES
from specdec.watch.estimate import estimate
from specdec.watch.ssh import reader_code
from specdec.watch.window import Window, parse_sample

_LINE = re.compile(r"^(vllm:spec_decode_num_(?:drafts|accepted_tokens)_total)(\{[^}]*\})?\s+(\S+)")


def engine_counters(text: str) -> dict[str, float]:
    """drafts and accepted summed over label sets, straight from the Prometheus text."""
    out = {"drafts": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            key = "drafts" if m.group(1).endswith("drafts_total") else "accepted"
            out[key] += float(m.group(3))
    return out


def _reader(srv: Server, window_s: float, poll_s: float, state: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-I", "-c", reader_code(), str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    json.loads(proc.stdout.readline())  # hello
    cfg = {"sources": [{"role": "engine", "url": f"{srv.url}/metrics", "format": "prometheus",
                        "counters": [list(c) for c in COUNTERS],
                        "gauges": [list(g) for g in GAUGES], "weight": None,
                        "truth_url": None}],
           "window": window_s, "poll": poll_s, "windows": 0, "follow": True}
    proc.stdin.write(json.dumps(cfg) + "\n")
    proc.stdin.flush()
    return proc


def run(srv: Server, pset: PromptSet, c: int, max_tokens: int, window_s: float = 5.0,
        poll_s: float = 0.5) -> dict[str, Any]:
    """Traffic (one ``specdec bench`` level) inside one reader session; both computations."""
    with tempfile.TemporaryDirectory(prefix="specdec-watch-state-") as state:
        proc = _reader(srv, window_s, poll_s, Path(state))
        time.sleep(3 * poll_s)  # the reader's first poll (its baseline) is done
        before = engine_counters(srv.metrics())
        t0 = time.monotonic()
        run_bench_sync(BenchConfig(url=srv.url, model=SERVED, concurrency=(c,),
                                   requests=len(pset.measured), max_tokens=max_tokens,
                                   warmup=0, prompts=pset, progress=False))
        traffic_s = time.monotonic() - t0
        after = engine_counters(srv.metrics())
        time.sleep(3 * poll_s)  # the reader polls again after the traffic
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()  # follow: the reader ends after this window
        lines = [json.loads(x) for x in proc.stdout if x.strip()]
        proc.wait(timeout=30)
    win = Window(length_s=1e9)
    for doc in lines:
        if "w" in doc:
            win.add(parse_sample(doc["w"], doc["w"]["t"], None))
    est = estimate(win, None, 0.0, True)
    d = {k: after[k] - before[k] for k in after}
    return {"traffic_s": traffic_s, "windows": len(win.samples), "engine_drafts": d["drafts"],
            "engine_accepted": d["accepted"],
            "engine_al": 1 + d["accepted"] / d["drafts"] if d["drafts"] else None,
            "watch_drafts": est.drafts, "watch_accepted": est.accepted, "watch_al": est.al,
            "watch_device_s": est.device_s, "mean_batch": est.mean_batch}


def report(res: dict[str, Any], c: int) -> str:
    eq = (res["engine_al"] is not None and res["watch_al"] is not None
          and res["engine_drafts"] == res["watch_drafts"]
          and res["engine_accepted"] == res["watch_accepted"])
    return "\n".join([
        "| traffic | reader windows | engine Δdrafts / Δaccepted | engine AL (1 + acc/drafts) "
        "| watch Δdrafts / Δaccepted | watch live AL | equal |", "|" + "---|" * 7,
        f"| c={c}, {res['traffic_s']:.0f} s | {res['windows']} | "
        f"{res['engine_drafts']:.0f} / {res['engine_accepted']:.0f} | {res['engine_al']:.4f} | "
        f"{res['watch_drafts']:.0f} / {res['watch_accepted']:.0f} | {res['watch_al']:.4f} | "
        f"{'yes' if eq else 'no'} |"])
