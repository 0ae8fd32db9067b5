"""Fingerprint of specdec's observable behaviour: one SHA-256 per domain over a large,
deterministic, generated set of cases, so that a refactor can show "behaviour unchanged".

    cd /work/base && python3 /path/to/benchmarks/fingerprint.py [--quick] [--domain plans,...]
                                           [--dump DIR] [--jobs N] [--compare EARLIER.txt]

``specdec`` is imported from the current directory's checkout (printed on the first line), so
one copy of this script fingerprints any checkout: run it in both, compare the lines (lines
starting with ``#`` are information: checkout, commit; they differ). Output:
one line per domain ``DOMAIN  cases=N  errors=E  sha256=HEX`` (E: cases whose outcome is an
error, which is part of the behaviour), then ``ALL sha256=HEX`` over the domains run. ``--dump
DIR`` writes each domain's canonical text (``DIR/<domain>.jsonl``, one case per line, the exact
text hashed), so that two dumps can be diffed to find what changed. ``--compare FILE`` reads an
earlier run's output (another checkout's, saved) and ends each domain's line with ``IDENTICAL``
or ``DIFFERENT`` (exit 1 when any differs). Timings go to stderr.

Domains (see `fingerprint_domains`): plans, renders, inventories, bench, engine, emulator,
gate, tune, reports. Private names the script needs are all in `fingerprint_domains.adapters`.
What is left out (not deterministic) is listed in `EXCLUDED` and printed with ``--explain``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

REPO = Path(os.getcwd()).resolve()
sys.path.insert(0, str(REPO))  # the current directory's specdec, before any installed one
sys.path.insert(1, str(Path(__file__).resolve().parent))  # fingerprint_domains

from fingerprint_domains import bench, decisions, engine, plans  # noqa: E402
from fingerprint_domains.common import Domain, default_jobs, pmap  # noqa: E402

import specdec  # noqa: E402

EXCLUDED = """\
plans, renders, engine, gate, tune: nothing (every float as its repr: bit for bit). Tune-cache
  entries are written to a temporary root (its path appears nowhere in the output).
inventories: the environment `inventories/lab.py` reads is pinned (a lab instance that is never
  up, all 8 table hosts and the Dynamo pair, no faults, no HF_TOKEN), the lab's image digests are
  pinned to "never built" (adapters.lab_inventory_pinned), the tune cache is an empty
  SPECDEC_REPORTS_DIR; the render tree's temporary root is replaced by <OUT>.
bench: every duration, rate and time stamp of the clients' results (keys containing _ms, ending
  _s or _at, *throughput*, duration, steady_window) and their url (it has the port); filler
  requests at c>1 (how many are sent depends on scheduling: recognised by their "fill #" label,
  neither captured nor counted by the server's metrics); the order of requests across
  connections (sorted); the Host header's port. Not covered: TRT-LLM iteration-stats servers
  (their polling is timer driven).
emulator: uuid ids (chatcmpl-/cmpl-/modelperm-), "created", the Date header (and
  Content-Length of /metrics and /lab/truth, which are filtered); /metrics lines that measure
  wall time (names with seconds, _time, latency, process_, python_, _perc, kv_cache_usage,
  _created); /lab/truth keys of durations and rates (_ms, _s, throughput, duration); TRT-LLM's
  /metrics reduced to the integer specDecodingStats of each iteration.
reports: skipped reports get fixed timestamps.
"""


DOMAINS = ["plans", "renders", "inventories", "bench", "engine", "emulator", "gate", "tune",
           "reports"]


def compute(name: str, quick: bool, jobs: int, done: dict[str, Domain]) -> Domain:
    """One domain's lines (plans and renders come from one pass over the plan cases)."""
    if name in done:
        return done[name]
    dom = Domain(name)
    if name in ("plans", "renders"):
        done.update(plans=Domain("plans"), renders=Domain("renders"))
        cases = [(i, k, d) for i, (k, d) in enumerate(plans.plan_cases(quick))]
        for which, entry in pmap(plans.run_chunk, cases, jobs):
            done[which].extend([entry])
        return done[name]
    if name == "inventories":  # in a child: pyinfra_cli, which it imports, patches this one
        with ProcessPoolExecutor(1, mp_context=get_context("fork")) as ex:
            dom = ex.submit(_inventories).result()
    elif name == "bench":
        bench.run(dom, quick)
    elif name == "engine":
        engine.engine_steps(dom, quick, jobs)
    elif name == "emulator":
        engine.emulator_http(dom, REPO)
    elif name == "gate":
        decisions.gate(dom, quick)
    elif name == "tune":
        decisions.tune(dom, quick)
    elif name == "reports":
        decisions.reports(dom)
    return dom


def _inventories() -> Domain:
    dom = Domain("inventories")
    plans.inventories(dom, REPO)
    return dom


def _revision() -> str:
    """The checkout's commit and whether its tree differs from it (information only)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"
    return f"commit {head}" + (" (with uncommitted changes)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller set (about a tenth)")
    ap.add_argument("--domain", default=",".join(DOMAINS), help="comma-separated subset")
    ap.add_argument("--dump", type=Path, help="write each domain's canonical text here")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes")
    ap.add_argument("--explain", action="store_true", help="print what is excluded and exit")
    ap.add_argument("--compare", type=Path, help="an earlier run's output to compare with")
    a = ap.parse_args(argv)
    if a.explain:
        print(EXCLUDED, end="")
        return 0
    names = {n.strip() for n in a.domain.split(",") if n.strip()}
    if names - set(DOMAINS):
        ap.error(f"unknown domain(s) {', '.join(sorted(names - set(DOMAINS)))}; "
                 f"known: {', '.join(DOMAINS)}")
    src = Path(specdec.__file__).resolve().parent.parent
    print(f"# specdec from {src}{' (quick)' if a.quick else ''}", flush=True)
    if src != REPO:
        print(f"fingerprint: specdec came from {src}, not from the current directory {REPO}",
              file=sys.stderr)
        return 2
    print(f"# {_revision()}", flush=True)
    earlier = _earlier(a.compare) if a.compare else None
    differs = False
    total, t00 = hashlib.sha256(), time.monotonic()
    done: dict[str, Domain] = {}
    for name in (n for n in DOMAINS if n in names):
        t0 = time.monotonic()
        dom = compute(name, a.quick, a.jobs, done)
        line = dom.summary()
        if earlier is not None:
            same = earlier.get(name) == line
            differs |= not same
            line += "  IDENTICAL" if same else "  DIFFERENT"
        print(line, flush=True)
        print(f"# {name}: {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
        total.update(f"{dom.name} {dom.digest}\n".encode())
        if a.dump is not None:
            dom.dump(a.dump)
    print(f"ALL sha256={total.hexdigest()}", flush=True)
    print(f"# total {time.monotonic() - t00:.1f}s", file=sys.stderr)
    return 1 if differs else 0


def _earlier(path: Path) -> dict[str, str]:
    """An earlier output's domain lines, by domain (its information lines left out)."""
    out = {}
    for line in path.read_text().splitlines():
        words = line.split()
        if words and words[0] in DOMAINS:
            out[words[0]] = line.removesuffix("  IDENTICAL").removesuffix("  DIFFERENT")
    return out


if __name__ == "__main__":
    sys.exit(main())
