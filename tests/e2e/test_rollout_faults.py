"""The rollout fault matrix on the lab: every host ends serving its last-good release, or is
reported failed with its previous service intact; a rolled-back host is never a success.

Each fault is injected into the engine emulator of one host (``SPECDEC_LAB_FAULTS``, which
changes the host's plan, so a new candidate release is deployed) through ``specdec rollout``;
the host's report must name the outcome and phase, and the host must still serve the release
it served before. Runs after the first deploy (the `deployed` fixture) so hosts have a
last-good release.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specdec.host import guard
from specdec.host.layout import CURRENT, LAST_GOOD, LOCK_FILE
from tests.e2e.conftest import ROOT, LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e

# Fast benchmarks on the emulator; a hung engine is detected within this many seconds.
BENCH = {"SPECDEC_BENCH_REQUESTS": "16", "SPECDEC_BENCH_MAX_TOKENS": "64",
         "SPECDEC_BENCH_WARMUP": "1", "SPECDEC_BENCH_TIMEOUT": "60"}


def _pointer(lab: LabFleet, host: str, path: str) -> str:
    return lab.ssh(host, f"basename $(readlink {path}) 2>/dev/null || true").stdout.strip()


def _serves(lab: LabFleet, host: str) -> bool:
    h = lab.host(host)
    status, doc = lab.http(f"{lab.api(h)}/v1/models", timeout=10)
    return status == 200 and bool(doc and doc.get("data"))


def _rollout(lab: LabFleet, reports: Path, run_id: str, *args: str,
             faults: str | None = None, env: dict[str, str] | None = None,
             timeout: float = 1800) -> tuple[subprocess.CompletedProcess[str], Path]:
    e = {**BENCH, **(env or {})}
    if faults:
        e["SPECDEC_LAB_FAULTS"] = faults
    proc = lab.specdec("rollout", lab.inventory, "--run-id", run_id, "--reports", str(reports),
                       *args, env=e, timeout=timeout)
    return proc, reports / run_id


def _report(run_dir: Path, host: str) -> dict[str, Any]:
    return json.loads((run_dir / f"{host}.json").read_text())


def _before(lab: LabFleet, host: str) -> tuple[str, str]:
    cur, good = _pointer(lab, host, CURRENT), _pointer(lab, host, LAST_GOOD)
    assert cur and cur == good, f"{host}: expected a verified release before the fault"
    assert _serves(lab, host)
    return cur, good


def _assert_restored(lab: LabFleet, host: str, release: str) -> None:
    assert _pointer(lab, host, CURRENT) == release, f"{host}: current is not the last-good"
    assert _pointer(lab, host, LAST_GOOD) == release
    active = lab.ssh(host, "systemctl is-active specdec-engine", check=False).stdout.strip()
    assert active == "active", host
    assert _serves(lab, host), f"{host}: not serving after the rollback"
    assert lab.ssh(host, f"test -e {LOCK_FILE} && echo held || echo free").stdout.strip() == \
        "free", f"{host}: deploy lock left behind"


def _no_token(lab: LabFleet, *texts: str, run_dir: Path | None = None) -> None:
    """Neither the session's token nor anything token-shaped, errors included."""
    from specdec.errors import TOKEN_SHAPED

    for t in texts:
        assert lab.hf_token not in t and TOKEN_SHAPED.search(t) is None
    if run_dir is not None:
        for p in run_dir.rglob("*"):
            if p.is_file():
                text = p.read_text(errors="replace")
                assert lab.hf_token not in text and TOKEN_SHAPED.search(text) is None, p


def test_first_deploy_keeps_where_it_pays_and_disables_where_it_does_not(
        lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    from specdec.report.fleet import load_reports

    run_dir = deployed.reports
    assert run_dir is not None and run_dir.is_dir()
    reps = {r["host"]: r for r in load_reports(run_dir)}
    # Charts: TPOT and throughput per host, acceptance per position.
    assert (run_dir / "index.html").read_text().count("<svg") >= 3
    for h in lab.hosts:
        rep = reps.get(h.name)
        assert rep is not None, f"{h.name}: no report"
        assert rep["outcome"] in ("kept", "disabled"), (h.name, rep["message"])
        assert rep["measurements"], h.name
        assert _pointer(lab, h.name, CURRENT) == _pointer(lab, h.name, LAST_GOOD)
    if "lab-agx" in reps:  # EAGLE-3 on the AGX pays
        assert reps["lab-agx"]["outcome"] == "kept", reps["lab-agx"]["message"]
        assert reps["lab-agx"]["acceptance"]["length"] > 1
    if "lab-nx" in reps:  # n-gram on chat prompts does not
        assert reps["lab-nx"]["outcome"] == "disabled", reps["lab-nx"]["message"]


@pytest.mark.parametrize(("host", "fault", "phase", "extra", "env"), [
    ("lab-agx", "crash_at_start", ("unit",), (), {}),
    ("lab-nano", "oom", ("oom", "unit"), (), {}),
    ("lab-agx", "slow_start:90", ("health",), ("--data", "specdec_health_timeout=30"), {}),
    ("lab-agx", "hang_after:4", ("bench",), (), {"SPECDEC_BENCH_TIMEOUT": "30"}),
    ("lab-nano", "5xx_burst:3:12", ("bench",), (), {}),
], ids=["crash-at-start", "oom", "slow-start", "hang-mid-bench", "5xx-burst"])
def test_fault_rolls_back_to_last_good(lab: LabFleet, deployed: PyinfraRun, tmp_path: Path,
                                       host: str, fault: str, phase: tuple[str, ...],
                                       extra: tuple[str, ...], env: dict[str, str]) -> None:
    if host not in {h.name for h in lab.hosts}:
        pytest.fail(f"{host} is not in this lab")
    _, good = _before(lab, host)
    run_id = f"fault-{fault.split(':')[0]}-{int(time.time())}"
    proc, run_dir = _rollout(lab, tmp_path, run_id, "--limit", host, *extra,
                             faults=f"{host}={fault}", env=env)
    assert proc.returncode != 0, "a rolled-back host must not count as a success"
    rep = _report(run_dir, host)
    assert rep["outcome"] == "rolled_back", rep["message"]
    assert rep["phase"] in phase, rep
    assert rep["candidate_release"] != good
    assert f"rolled back to last-good {good}" in rep["message"]
    _assert_restored(lab, host, good)
    summary = (run_dir / "summary.md").read_text()
    assert f"| {host} |" in summary and "rolled_back" in summary
    _no_token(lab, proc.stdout, proc.stderr, run_dir=run_dir)


def _wait_for(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _interrupted_rollout(lab: LabFleet, reports: Path, run_id: str, host: str, fault: str,
                         data: tuple[str, ...], interrupt: Callable[[], None]) -> str:
    """``specdec rollout --limit host`` with ``fault``; once the host has activated (and armed
    the guard for) its candidate, ``interrupt()``; returns the rollout's output (it must fail)."""
    argv = [sys.executable, "-m", "specdec", "rollout", lab.inventory, "--limit", host,
            "--run-id", run_id, "--reports", str(reports)]
    for d in data:
        argv += ["--data", d]
    env = {**lab.env, **BENCH, "SPECDEC_LAB_FAULTS": f"{host}={fault}"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for("the candidate to be activated",
                  lab.host_path(host, guard.PENDING_FILE).exists, 600)
        interrupt()
        out = proc.communicate(timeout=1200)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]
    rep = _report(reports / run_id, host)
    # unreachable: pyinfra lost the host (its socket/SSH error) before it could verify
    assert rep["outcome"] in ("rolled_back", "failed", "unreachable"), rep["message"]
    return out


def _assert_serving_last_good(lab: LabFleet, host: str, good: str, timeout: float = 180) -> None:
    _wait_for(f"{host} to serve again", lambda: _serves(lab, host), timeout)
    assert _pointer(lab, host, CURRENT) == good and _pointer(lab, host, LAST_GOOD) == good
    assert lab.ssh(host, f"test -e {guard.PENDING_FILE} && echo armed || echo clear").stdout \
        .strip() == "clear"
    assert lab.ssh(host, "systemctl is-active specdec-engine", check=False).stdout.strip() == \
        "active"


def test_ssh_lost_mid_deploy_the_host_reverts_on_its_own(lab: LabFleet, deployed: PyinfraRun,
                                                         tmp_path: Path) -> None:
    """The network drops right after the candidate is activated and stays down past the
    guard's deadline: the host goes back to last-good by itself; the run reports no success."""
    host = "lab-agx"
    _, good = _before(lab, host)
    log = lab.host_path(host, guard.LOG_FILE)
    log.unlink(missing_ok=True)
    run_id = f"partition-{int(time.time())}"

    def partition() -> None:
        cut = lab.specdec("lab", "net", host, "down")
        assert cut.returncode == 0, cut.stderr
        try:
            _wait_for("the guard's deadline", lambda: log.exists() and "deadline: reverted"
                      in log.read_text(), 240)
        finally:
            assert lab.specdec("lab", "net", host, "up").returncode == 0

    out = _interrupted_rollout(lab, tmp_path, run_id, host, "slow_start:25",
                               ("specdec_health_timeout=30",), partition)
    assert good in log.read_text()
    _assert_serving_last_good(lab, host, good)
    _no_token(lab, out, run_dir=tmp_path / run_id)


def test_reboot_mid_rollout_boots_the_last_good_release(lab: LabFleet, deployed: PyinfraRun,
                                                        tmp_path: Path) -> None:
    """The host reboots while its candidate is unconfirmed: it boots its last-good release
    (the guard runs before the engine), and the run reports no success."""
    host = "lab-agx"
    _, good = _before(lab, host)
    log = lab.host_path(host, guard.LOG_FILE)
    log.unlink(missing_ok=True)
    run_id = f"reboot-{int(time.time())}"

    def reboot() -> None:
        rebooted = lab.specdec("lab", "reboot", host)
        assert rebooted.returncode == 0, rebooted.stderr

    out = _interrupted_rollout(lab, tmp_path, run_id, host, "slow_start:40",
                               ("specdec_health_timeout=60",), reboot)
    assert "boot: reverted" in log.read_text()
    _no_token(lab, out, run_dir=tmp_path / run_id)
    _assert_serving_last_good(lab, host, good)
    # The next run finds the stale lock of the dead run's connection, or none, and proceeds.
    again, run_dir = _rollout(lab, tmp_path, f"after-reboot-{int(time.time())}", "--limit", host)
    assert again.returncode == 0, again.stdout[-2000:]
    assert _report(run_dir, host)["outcome"] == "unchanged"


def test_held_lock_refuses_without_touching_the_host(lab: LabFleet, deployed: PyinfraRun,
                                                     tmp_path: Path) -> None:
    host = lab.hosts[0].name
    cur, _ = _before(lab, host)
    lab.ssh(host, f"mkdir {LOCK_FILE} && printf 'control=elsewhere\\npid=1\\nrun=other\\n"
                  f"since=%s\\ntoken=t0k\\n' \"$(date +%s)\" > {LOCK_FILE}/info")
    try:
        proc, run_dir = _rollout(lab, tmp_path, f"locked-{int(time.time())}", "--limit", host,
                                 "--data", "specdec_reverify=true")
        assert proc.returncode != 0
        rep = _report(run_dir, host)
        assert rep["outcome"] == "failed" and rep["phase"] == "lock", rep
        # a lock in the format before leases: held (taken over only once its holder is gone)
        for text in (rep["message"], proc.stdout + proc.stderr):
            assert "deploy lock" in text and "is held" in text and "run other" in text, text
        assert _pointer(lab, host, CURRENT) == cur and _serves(lab, host)
    finally:
        lab.ssh(host, f"rm -rf {LOCK_FILE}")


def test_two_rollouts_at_once_do_not_interleave(lab: LabFleet, deployed: PyinfraRun,
                                                tmp_path: Path) -> None:
    host = lab.hosts[0].name
    cur, _ = _before(lab, host)
    env = {**lab.env, **BENCH}
    procs = []
    for i in range(2):
        argv = [sys.executable, "-m", "specdec", "rollout", lab.inventory, "--limit", host,
                "--run-id", f"twice{i}-{int(time.time())}", "--reports", str(tmp_path / str(i)),
                "--data", "specdec_reverify=true"]
        procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
        time.sleep(0.5)
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    rcs = [p.returncode for p in procs]
    refused = [o for o in outs if "deploy lock" in o and "is held by run" in o]
    # Re-verification takes long enough that the second always meets the first's lock.
    assert len(refused) == 1, outs
    assert sorted(rcs)[0] == 0, outs
    assert _pointer(lab, host, CURRENT) in (cur, _pointer(lab, host, LAST_GOOD))
    assert _pointer(lab, host, CURRENT) == _pointer(lab, host, LAST_GOOD)
    assert _serves(lab, host)
    _no_token(lab, *outs)


def test_canary_failure_leaves_later_batches_untouched(lab: LabFleet, deployed: PyinfraRun,
                                                       tmp_path: Path) -> None:
    first, rest = lab.hosts[0].name, [h.name for h in lab.hosts[1:]]
    before = {h: _pointer(lab, h, CURRENT) for h in rest}
    _, good = _before(lab, first)
    proc, run_dir = _rollout(lab, tmp_path, f"canary-{int(time.time())}",
                             "--batches", "1,100%", faults=f"{first}=crash_at_start")
    assert proc.returncode != 0
    assert _report(run_dir, first)["outcome"] == "rolled_back"
    for h in rest:
        assert _report(run_dir, h)["outcome"] == "skipped"
        assert _pointer(lab, h, CURRENT) == before[h]
    _assert_restored(lab, first, good)
    out = lab.specdec("report", run_dir.name, "--reports", str(tmp_path))
    assert out.returncode == 0 and "skipped" in out.stdout and "rolled_back" in out.stdout
    page = (run_dir / "index.html").read_text()
    assert all(h.name in page for h in lab.hosts)


def test_unchanged_rerun_is_not_rebenchmarked(lab: LabFleet, deployed: PyinfraRun,
                                              tmp_path: Path) -> None:
    proc, run_dir = _rollout(lab, tmp_path, f"again-{int(time.time())}", "--batches", "100%")
    assert proc.returncode == 0, proc.stdout[-2000:]
    for h in lab.hosts:
        rep = _report(run_dir, h.name)
        assert rep["outcome"] == "unchanged", (h.name, rep["message"])
        assert not any(m["phase"] == "bench" for m in rep["measurements"])
