"""Devices that drop off and several control nodes, on the lab.

* Drop-off: with the deploy converged, two hosts are cut off the network before a rollout and a
  third while it runs (after its canary batch started): the three are reported
  ``unreachable`` (not failed), the others unchanged, the run exits 3; back up, ``specdec
  rollout --resume RUN`` finishes exactly those three under the same run id, one report per
  host with the earlier attempt kept.
* Two shards: ``specdec rollout --shard 1/2`` and ``--shard 2/2`` at once, as two control
  nodes (their own reports directories), sharing a real etcd: one canary, one budget, every
  host deployed once, the Dynamo group whole in one shard; ``specdec report --merge`` gives
  one run.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec.fleet.store import EtcdStore, open_store
from tests.e2e.conftest import ROOT, LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e

BENCH = {"SPECDEC_BENCH_REQUESTS": "16", "SPECDEC_BENCH_MAX_TOKENS": "64",
         "SPECDEC_BENCH_WARMUP": "1", "SPECDEC_BENCH_TIMEOUT": "60"}


def _reports(run_dir: Path) -> dict[str, dict[str, Any]]:
    from specdec.report.fleet import load_reports

    return {r["host"]: r for r in load_reports(run_dir)}


def test_dropped_hosts_are_unreachable_and_resume_finishes_them(
        lab: LabFleet, deployed: PyinfraRun, tmp_path: Path) -> None:
    plain = [h.name for h in lab.hosts if h.engine != "dynamo"]
    assert len(plain) >= 4, plain
    canary, before, late = plain[0], plain[1:3], plain[3]
    limit = ",".join(plain[:4])
    run_id = f"drop-{int(time.time())}"
    argv = [sys.executable, "-m", "specdec", "rollout", lab.inventory, "--limit", limit,
            "--batches", "1,100%", "--run-id", run_id, "--reports", str(tmp_path)]
    cut = []
    try:
        for h in before:
            assert lab.specdec("lab", "net", h, "down").returncode == 0
            cut.append(h)
        proc = subprocess.Popen(argv, cwd=ROOT, env={**lab.env, **BENCH},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        out = []
        for line in proc.stdout:  # the canary batch runs: the third host drops off now
            out.append(line)
            if "batch 1/2" in line and late not in cut:
                assert lab.specdec("lab", "net", late, "down").returncode == 0
                cut.append(late)
        proc.wait(900)
        text = "".join(out)
    finally:
        for h in cut:
            lab.specdec("lab", "net", h, "up")
    assert cut == [*before, late], text[-2000:]
    assert proc.returncode == 3, text[-3000:]  # only unreachable hosts left
    reps = _reports(tmp_path / run_id)
    assert reps[canary]["outcome"] == "unchanged", reps[canary]["message"]
    for h in cut:
        assert reps[h]["outcome"] == "unreachable", (h, reps[h]["message"])
        assert "Could not connect" in reps[h]["message"] or "SSH" in reps[h]["message"], \
            reps[h]["message"]
    summary = (tmp_path / run_id / "summary.md").read_text()
    assert "3 unreachable" in summary and "--resume" in text
    assert "unreachable" in (tmp_path / run_id / "index.html").read_text()

    again = lab.specdec("rollout", lab.inventory, "--reports", str(tmp_path), "--resume",
                        run_id, env=BENCH)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-1000:]
    assert f"3 host(s) to finish: {before[0]} (unreachable)" in again.stdout
    after = _reports(tmp_path / run_id)
    assert set(after) == set(plain[:4])  # one run, one report per host
    for h in cut:
        assert after[h]["outcome"] == "unchanged", (h, after[h]["message"])
        assert [a["outcome"] for a in after[h]["attempts"]] == ["unreachable"]
    assert "attempts" not in after[canary]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdStore]:
    """A single-node etcd of this test on loopback (Debian's etcd-server), stopped after."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed ('make setup' installs etcd-server)")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    client, peer = ports
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp_path / "etcd"), "--name", "fleet",
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"fleet=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        store = open_store(f"etcd://127.0.0.1:{client}")
        deadline = time.monotonic() + 30
        while True:
            try:
                store.get("ping")
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert proc.poll() is None and time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.2)
        assert isinstance(store, EtcdStore)
        yield store
    finally:
        proc.terminate()
        proc.wait(15)


def test_two_shards_one_canary_one_budget_no_host_twice(
        lab: LabFleet, deployed: PyinfraRun, tmp_path: Path, etcd: EtcdStore) -> None:
    run_id = f"shards-{int(time.time())}"
    url = "etcd://" + etcd.endpoints[0].removeprefix("http://")
    procs = []
    for i in (1, 2):
        argv = [sys.executable, "-m", "specdec", "rollout", lab.inventory, "--shard", f"{i}/2",
                "--store", url, "--run-id", run_id, "--batches", "1,100%",
                "--reports", str(tmp_path / f"node{i}")]
        procs.append(subprocess.Popen(argv, cwd=ROOT, env={**lab.env, **BENCH},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(o[-2000:] for o in outs)
    names = [h.name for h in lab.hosts]
    by_shard = [_reports(tmp_path / f"node{i}" / run_id) for i in (1, 2)]
    done = [h for reps in by_shard for h, r in reps.items() if r["outcome"] != "skipped"]
    assert sorted(done) == sorted(names)  # every host once, none twice
    groups = [h.name for h in lab.hosts if h.engine == "dynamo"]
    assert any(set(groups) <= set(reps) for reps in by_shard)  # the group whole in one shard
    canary = json.loads(etcd.get(f"runs/{run_id}/canary") or "{}")
    assert canary["ok"] and canary["hosts"] == [names[0]], canary  # one canary
    assert sum("waiting for the canary" in o for o in outs) <= 1
    budget = json.loads(etcd.get(f"runs/{run_id}/budget") or "{}")
    assert budget == {"done": len(names), "failed": 0, "unreachable": 0}  # one budget
    claims = etcd.list(f"runs/{run_id}/claims")
    assert len(claims) == len(names) and set(claims.values()) <= {"1/2", "2/2"}
    merged = lab.specdec("report", run_id, "--reports", str(tmp_path / "merged"), "--merge",
                         str(tmp_path / "node1" / run_id), str(tmp_path / "node2" / run_id))
    assert merged.returncode == 0, merged.stderr
    assert all(f"| {h} |" in merged.stdout for h in names)
    assert f"{len(names)} host(s)" in merged.stdout
