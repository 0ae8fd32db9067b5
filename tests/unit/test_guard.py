"""The host-side guard's script and commit command, run by a real shell against a temp state
dir (systemctl and systemd-run replaced by recorders on PATH)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specdec.host import guard


@pytest.fixture()
def state(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    for rid in ("aaa", "bbb"):
        (d / "releases" / rid).mkdir(parents=True)
    os.symlink("releases/aaa", d / "last-good")
    os.symlink("releases/bbb", d / "current")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("systemctl", "systemd-run"):
        (bin_ / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/calls"\n')
        (bin_ / tool).chmod(0o755)
    return d


def _sh(state: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{state.parent / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True,
                          check=False)


def _calls(state: Path) -> list[str]:
    p = state.parent / "calls"
    return p.read_text().splitlines() if p.exists() else []


def _run_guard(state: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = state.parent / "guard.sh"
    script.write_text(guard.script(str(state)))
    return _sh(state, f"sh {script} {mode}")


def test_deadline_reverts_an_unconfirmed_release(state: Path) -> None:
    (state / "pending").write_text("release=bbb deadline=60s\n")
    assert _run_guard(state, "deadline").returncode == 0
    assert os.readlink(state / "current") == "releases/aaa"
    assert not (state / "pending").exists()
    assert _calls(state) == ["systemctl daemon-reload", "systemctl restart specdec-engine.service"]
    log = (state / "guard.log").read_text()
    assert "deadline: reverted bbb to last-good aaa" in log and "release=bbb" in log


def test_boot_reverts_without_restarting(state: Path) -> None:
    (state / "pending").write_text("release=bbb deadline=60s\n")
    assert _run_guard(state, "boot").returncode == 0
    assert os.readlink(state / "current") == "releases/aaa"
    assert _calls(state) == ["systemctl daemon-reload"]  # the engine starts after the guard


def test_nothing_pending_changes_nothing(state: Path) -> None:
    assert _run_guard(state, "deadline").returncode == 0
    assert os.readlink(state / "current") == "releases/bbb"
    assert _calls(state) == [] and not (state / "guard.log").exists()


def test_without_last_good_only_clears_the_marker(state: Path) -> None:
    (state / "last-good").unlink()
    (state / "pending").write_text("release=bbb\n")
    assert _run_guard(state, "deadline").returncode == 0
    assert os.readlink(state / "current") == "releases/bbb"
    assert not (state / "pending").exists() and _calls(state) == []


def test_commit_marks_last_good_and_disarms(state: Path) -> None:
    (state / "pending").write_text("release=bbb\n")
    proc = _sh(state, guard.commit_command("bbb", str(state)))
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(state / "last-good") == "releases/bbb"
    assert not (state / "pending").exists()
    assert any(c.startswith(f"systemctl stop {guard.DEADLINE_UNIT}.timer") for c in _calls(state))


def test_commit_refuses_after_the_guard_reverted(state: Path) -> None:
    (state / "pending").write_text("release=bbb\n")
    _run_guard(state, "deadline")
    proc = _sh(state, guard.commit_command("bbb", str(state)))
    assert proc.returncode == 3
    assert "current is releases/aaa, not bbb" in proc.stderr
    assert "reverted bbb to last-good aaa" in proc.stderr
    assert os.readlink(state / "last-good") == "releases/aaa"


def test_arm_writes_the_marker_and_starts_the_deadline_timer(state: Path) -> None:
    cmd = guard.arm_command("bbb", 90).replace(guard.PENDING_FILE, str(state / "pending"))
    assert _sh(state, cmd).returncode == 0
    assert (state / "pending").read_text() == "release=bbb deadline=90s\n"
    run = [c for c in _calls(state) if c.startswith("systemd-run")]
    # the transient guard sandboxed as the boot unit (root, the state dir, systemd only)
    props = " ".join(f"-p {p}" for p in guard._sandbox())
    assert run == [f"systemd-run --quiet --unit={guard.DEADLINE_UNIT} --on-active=90s "
                   f"--timer-property=AccuracySec=1s {props} {guard.SCRIPT_PATH} deadline"]
    assert "-p ReadWritePaths=/var/lib/specdec" in run[0] and "-p IPAddressDeny=any" in run[0]


def test_boot_unit_runs_before_the_engine_only_when_pending() -> None:
    unit = guard.boot_unit()
    assert "Before=specdec-engine.service specdec-etcd.service specdec-frontend.service " \
           "specdec-proxy.service\n" in unit
    assert f"ConditionPathExists={guard.PENDING_FILE}" in unit
    assert f"ExecStart={guard.SCRIPT_PATH} boot" in unit
