"""`specdec watch` on the lab: speculation watched on a kept host's own traffic, scraped by a
real Prometheus (Debian's package), through a shift of the traffic's prompt categories.

lab-nano keeps n-gram speculation (the gate measured it on the built-in prompt set); n-gram
accepts far more on code than on open chat. The test re-deploys lab-nano with the emulator at
time scale 0.05 (an hour of device time in three minutes; the gate verifies that release on the
host as any deploy does), runs ``specdec watch`` on it (and, with no traffic, on lab-nx:
speculation off, lab-spark: TRT-LLM's draining iteration stats, and the Dynamo group through its
workers and frontend) with ``--serve`` scraped by Prometheus, and sends it:

1. code-heavy traffic (code=0.8,chat=0.2) for the window's fill and then one device hour:
   the verdict is ``paying`` and never changes (0 false alarms), in the watch's own rows and in
   Prometheus' stored series (``changes()`` of the verdict code over the hour);
2. chat-heavy traffic (chat=0.9,code=0.1): the verdict becomes ``marginal`` or ``not paying``
   within the window plus five looks (400 device seconds).

Then the fleet page of the latest run shows the live columns, and lab-nano is deployed back at
the session's time scale. About six minutes.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from specdec.report.fleet import load_reports
from tests.e2e.conftest import ROOT, LabFleet, PyinfraRun, WatchRows
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

HOST = "lab-nano"
PASSIVE = ("lab-nx", "lab-spark", "lab-dyn1", "lab-dyn2")
SCALE = 0.05
WINDOW = 300.0  # device seconds
INTERVAL = 1.0  # wall seconds: 20 device seconds per look
HOUR = 3600.0
RATE = 0.4  # requests per device second


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def _query(prom: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    q = {"query": expr, **({"time": f"{at:.3f}"} if at else {})}
    doc = _get(f"{prom}/api/v1/query?{urllib.parse.urlencode(q)}")
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _verdict_code(prom: str) -> float | None:
    now = _query(prom, f'specdec_watch_verdict_code{{host="{HOST}"}}')
    return float(now[0]["value"][1]) if now else None


def _prometheus(tmp: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.fail("prometheus is missing: the Makefile installs Debian's prometheus package")
    rules = ROOT / "monitoring" / "prometheus" / "specdec-watch-rules.yml"
    cfg = tmp / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                   f"rule_files:\n  - {rules}\n"
                   f"scrape_configs:\n  - job_name: specdec-watch\n    static_configs:\n"
                   f"      - targets: ['{target}']\n")
    check = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True,
                           text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    port = _free_port()
    proc = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "prom.log").open("wb"))
    return proc, f"http://127.0.0.1:{port}"


def _scraped(url: str, timeout: float = 60) -> None:
    """Wait for the first scrape (Prometheus 2.42 applies targets every 5 s, then an offset)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            targets = _get(f"{url}/api/v1/targets")["data"]["activeTargets"]
            if targets and targets[0]["health"] == "up":
                return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"Prometheus did not scrape the watch within {timeout:.0f}s")


def _traffic(lab: LabFleet, mix: str, seconds: float, seed: int) -> dict[str, Any]:
    proc = lab.specdec("lab", "traffic", HOST, "--mix", mix, "--rate", str(RATE),
                       "--duration", str(seconds), "--max-tokens", "128", "--seed", str(seed),
                       "--json", timeout=seconds * SCALE + 300)
    assert proc.returncode == 0, proc.stderr[-600:]
    return json.loads(proc.stdout)


def test_watch_tells_a_shift_and_holds_steady(lab: LabFleet, deployed: PyinfraRun,
                                             tmp_path: Path) -> None:
    assert deployed.rc == 0, deployed.summary()
    assert deployed.reports is not None
    names = {h.name for h in lab.hosts}
    if HOST not in names:
        pytest.fail(f"{HOST} is not in the lab (SPECDEC_LAB_HOSTS too small)")
    first = {r["host"]: r for r in load_reports(deployed.reports)}
    assert first[HOST]["outcome"] == "kept" and first[HOST]["method"] == "ngram", \
        first[HOST]["message"]
    root = deployed.reports.parent
    fast = {"SPECDEC_LAB_TIME_SCALE": str(SCALE), "SPECDEC_REPORTS_DIR": str(root)}
    run = lab.pyinfra("--limit", HOST, env={**fast, "SPECDEC_RUN_ID": "watch-fast"})
    try:
        assert run.rc == 0, run.summary()
        rep = {r["host"]: r for r in load_reports(root / "watch-fast")}[HOST]
        assert rep["outcome"] == "kept", rep["message"]
        _watch_and_shift(lab, root, tmp_path, [h for h in PASSIVE if h in names])
    finally:
        back = lab.pyinfra("--limit", HOST, env={"SPECDEC_REPORTS_DIR": str(root),
                                                 "SPECDEC_RUN_ID": "watch-back"})
        assert back.rc == 0, back.summary()


def _watch_and_shift(lab: LabFleet, root: Path, tmp: Path, passive: list[str]) -> None:
    port = _free_port()
    target = f"127.0.0.1:{port}"
    hours = (WINDOW + HOUR + 3 * WINDOW) * SCALE + 120
    watch = subprocess.Popen(
        [sys.executable, "-m", "specdec", "watch", lab.inventory, "--limit",
         ",".join([HOST, *passive]), "--json", "--interval", str(INTERVAL), "--window",
         str(WINDOW), "--serve", target, "--reports", str(root), "--duration", str(hours)],
        cwd=ROOT, env=lab.env, stdout=subprocess.PIPE, stderr=(tmp / "watch.err").open("w"),
        text=True)
    prom, url = _prometheus(tmp, target)
    try:
        rows = WatchRows(watch)
        _scraped(url)
        # 1. code-heavy: the window fills, then an hour of device time
        t_start = time.time()
        code = _traffic(lab, "code=0.8,chat=0.2", WINDOW + HOUR, seed=1)
        t_end = time.time()
        assert code["failed"] == 0 and code["completed"] > 0.8 * RATE * (WINDOW + HOUR), code
        got = rows.wait(lambda r: r[HOST]["verdict"] == "paying", 60)
        assert got is not None, rows.looks[-1:]
        looks = [(t, r[HOST]) for t, r in rows.looks if t_start <= t <= t_end]
        decided = [(t, r) for t, r in looks if r["verdict"] == "paying"]
        assert decided, [r["verdict"] for _, r in looks]
        t_first = decided[0][0]
        assert t_first - t_start <= WINDOW * SCALE + 10, "no verdict after a window of traffic"
        hour = rows.verdicts(HOST, t_first, t_end)
        assert (t_end - t_first) >= HOUR * SCALE and set(hour) == {"paying"}, hour
        row = decided[-1][1]
        sys.stderr.write(f"\n[watch] {HOST}: paying for {(t_end - t_first) / SCALE:.0f} device "
                         f"s, estimated gain {row['est_gain']:+.0%}, live AL "
                         f"{row['live_al']:.2f} (gate {row['gate_al']:.2f})\n")
        assert row["status"] == "ok" and row["decision"] == "kept", row
        assert row["device_time"] == {"emulated": True, "time_scale": SCALE}
        assert row["live_al"] > 1 and row["gate_al"] > 1 and row["est_gain"] > 0.3, row
        changes = _query(url, f'changes(specdec_watch_verdict_code{{host="{HOST}"}}'
                              f'[{int(t_end - t_first - 2)}s])', t_end)
        assert changes and float(changes[0]["value"][1]) == 0, changes

        # 2. chat-heavy: told within the window and two looks of device time
        t_shift = time.time()
        th = threading.Thread(target=_traffic, args=(lab, "chat=0.9,code=0.1", 3 * WINDOW, 2),
                              daemon=True)
        th.start()
        told = rows.wait(lambda r: r[HOST]["verdict"] in ("marginal", "not paying"),
                         3 * WINDOW * SCALE + 30)
        th.join(timeout=3 * WINDOW * SCALE + 120)
        assert told is not None, [r[HOST]["verdict"] for _, r in rows.looks[-5:]]
        delay = (told[0] - t_shift) / SCALE
        sys.stderr.write(f"\n[watch] {HOST}: {told[1][HOST]['verdict']} {delay:.0f} device s "
                         f"after the shift (window {WINDOW:.0f} s); estimated gain "
                         f"{told[1][HOST]['est_gain']:+.0%}\n")
        assert delay <= WINDOW + 5 * INTERVAL / SCALE, delay
        # Prometheus stores the new verdict at its next scrape: not paying, marginal
        wait_until(lambda: _verdict_code(url) in (1.0, 2.0), "Prometheus to store the verdict")

        # the passive hosts: read, and say so (no traffic, or why not)
        last = rows.looks[-1][1]
        for h in passive:
            r = last.get(h)
            assert r is not None and r["status"] == "ok", (h, r)
        if "lab-nx" in passive:
            assert last["lab-nx"]["speculative"] is False
        if {"lab-dyn1", "lab-dyn2"} <= set(passive):
            group = last["group:spark-pair"]
            assert group["members"] == ["lab-dyn1", "lab-dyn2"] and group["status"] == "ok"
        rules = _get(f"{url}/api/v1/rules")["data"]["groups"]
        assert [g["name"] for g in rules] == ["specdec-watch"]
        assert all(r["health"] == "ok" for r in rules[0]["rules"]), rules
        # one look from a timer (--once, the table), beside the running watch: its window
        # continues from the watch file
        once = lab.specdec("watch", lab.inventory, "--limit", f"{HOST},lab-nx", "--once",
                           "--interval", "2", "--window", str(WINDOW), "--reports", str(root))
        assert once.returncode == 0, once.stderr[-600:]
        lines = once.stdout.splitlines()
        assert lines[0].startswith("host ") and any(ln.startswith(HOST) for ln in lines), lines
        sys.stderr.write("\n" + once.stdout)
        page = max((p for p in root.iterdir() if (p / "index.html").is_file()),
                   key=lambda p: (p / "index.html").stat().st_mtime)
        html = (page / "index.html").read_text()
        assert "live verdict" in html and "est. live gain" in html
    finally:
        for proc in (watch, prom):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
