"""specdec.lock: the deploy lock's shell, run for real against a temporary state directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specdec import lock


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("specdec.layout.STATE_DIR", str(tmp_path))
    monkeypatch.setattr("specdec.layout.LOCK_FILE", str(tmp_path / "deploy.lock"))
    return tmp_path


def sh(cmd: str) -> list[str]:
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30,
                         check=True)
    return out.stdout.splitlines()


def test_acquire_held_release(state_dir):
    a = lock.new_lock("run-a")
    b = lock.new_lock("run-b")
    assert lock.parse_acquire(sh(lock.acquire_command(a))).acquired
    st = lock.parse_acquire(sh(lock.acquire_command(b)))
    assert not st.acquired and st.holder == a and st.host_now is not None
    assert "is held by run run-a" in lock.describe(st)
    # b cannot release a's lock
    sh(lock.release_command(b))
    assert (state_dir / "deploy.lock").is_dir()
    sh(lock.release_command(a))
    assert not (state_dir / "deploy.lock").exists()
    assert lock.parse_acquire(sh(lock.acquire_command(b))).acquired


def test_stale_rules():
    me = lock.new_lock("r", now=1000)
    held = lock.LockStatus(False, me, host_now=1010)
    assert not lock.is_stale(held, control=me.control, pid_alive=lambda p: True)
    assert lock.is_stale(held, control=me.control, pid_alive=lambda p: False)
    other = lock.LockInfo("elsewhere", 1, "r0", 1000, "t")
    st = lock.LockStatus(False, other, host_now=1010)
    assert not lock.is_stale(st, control="here", pid_alive=lambda p: False)  # not our pid
    old = lock.LockStatus(False, other, host_now=1000 + lock.STALE_AFTER_S + 1)
    assert lock.is_stale(old, control="here", pid_alive=lambda p: True)


def test_takeover_only_replaces_the_same_stale_holder(state_dir):
    dead = lock.LockInfo("here", 999999, "old", 1, "deadbeef")
    (state_dir / "deploy.lock").mkdir()
    (state_dir / "deploy.lock" / "info").write_text(dead.to_text())
    fresh = lock.new_lock("new")
    st = lock.parse_acquire(sh(lock.acquire_command(fresh)))
    assert not st.acquired and st.holder == dead
    assert lock.parse_acquire(sh(lock.takeover_command(st.holder, fresh))).acquired
    assert f"token={fresh.token}" in (state_dir / "deploy.lock" / "info").read_text()
    # a second taker that saw the old holder does not remove the new lock
    late = lock.new_lock("late")
    assert not lock.parse_acquire(sh(lock.takeover_command(dead, late))).acquired
    assert f"token={fresh.token}" in (state_dir / "deploy.lock" / "info").read_text()


def test_odd_run_ids_are_sanitised():
    info = lock.new_lock("a b;rm -rf /")
    assert info.run_id == "a_b_rm_-rf__"
    assert lock.LockInfo.parse(info.to_text().splitlines()) == info
