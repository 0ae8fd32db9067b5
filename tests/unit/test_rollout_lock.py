"""specdec.lock: the deploy lock's shell, run for real against a temporary state directory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from specdec import lock

ME = lock.machine_id()
OTHER_MACHINE = "f" * 32


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("specdec.layout.STATE_DIR", str(tmp_path))
    monkeypatch.setattr("specdec.layout.LOCK_FILE", str(tmp_path / "deploy.lock"))
    return tmp_path


def sh(cmd: str) -> list[str]:
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=90,
                         check=True)
    return out.stdout.splitlines()


def info_text(state_dir: Path) -> str:
    return (state_dir / "deploy.lock" / "info").read_text()


def leftovers(state_dir: Path) -> list[str]:
    return sorted(p.name for p in state_dir.iterdir()
                  if p.name not in ("deploy.lock", lock.FLOCK_FILE))


def test_commands_follow_the_state_dir(state_dir):
    info = lock.new_lock("r")
    for cmd in (lock.acquire_command(info), lock.takeover_command(None, info),
                lock.release_command(info)):
        assert str(state_dir) in cmd and "/var/lib/specdec" not in cmd


def test_acquire_held_release(state_dir):
    a = lock.new_lock("run-a")
    b = lock.new_lock("run-b")
    before = int(time.time())
    got = lock.parse_acquire(sh(lock.acquire_command(a)))
    assert got.acquired and got.host_now is not None and got.host_now >= before
    st = lock.parse_acquire(sh(lock.acquire_command(b)))
    assert not st.acquired and st.holder is not None and st.host_now is not None
    # the time in the lock is the host's, written there (the control node sends none)
    assert a.since == 0 and st.holder.since == got.host_now
    assert (st.holder.control, st.holder.machine, st.holder.pid, st.holder.token) == (
        a.control, ME, a.pid, a.token)
    assert st.lock_mtime is not None
    assert "is held by run run-a" in lock.describe(st)
    # b cannot release a's lock
    sh(lock.release_command(b))
    assert f"token={a.token}" in info_text(state_dir)
    sh(lock.release_command(a))
    assert not (state_dir / "deploy.lock").exists()
    assert leftovers(state_dir) == []
    assert lock.parse_acquire(sh(lock.acquire_command(b))).acquired


def test_stale_rules_use_the_hosts_clock_and_machine_id():
    me = lock.LockInfo("here", 42, "r", 1000, "t", ME)
    held = lock.LockStatus(False, me, host_now=1010)
    assert not lock.is_stale(held, control="here", machine=ME, pid_alive=lambda p: True)
    assert lock.is_stale(held, control="here", machine=ME, pid_alive=lambda p: False)
    # same host name, another machine: its pid says nothing about that lock
    assert not lock.is_stale(held, control="here", machine=OTHER_MACHINE,
                             pid_alive=lambda p: False)
    # our machine-id unknown: no pid judgement at all
    assert not lock.is_stale(held, control="here", machine="unknown", pid_alive=lambda p: False)
    legacy = lock.LockInfo("here", 42, "r", 1000, "t")  # an older version's lock: no machine
    assert not lock.is_stale(lock.LockStatus(False, legacy, host_now=1010), control="here",
                             machine=ME, pid_alive=lambda p: False)
    other = lock.LockInfo("elsewhere", 1, "r0", 1000, "t", OTHER_MACHINE)
    assert not lock.is_stale(lock.LockStatus(False, other, host_now=1000 + lock.STALE_AFTER_S),
                             control="here", machine=ME, pid_alive=lambda p: True)
    assert lock.is_stale(lock.LockStatus(False, other, host_now=1001 + lock.STALE_AFTER_S),
                         control="here", machine=ME, pid_alive=lambda p: True)
    # no host clock: never stale (the control node's clock is not the host's)
    assert not lock.is_stale(lock.LockStatus(False, other, host_now=None), control="here",
                             machine=ME, pid_alive=lambda p: False)
    # no info: judged by the lock directory's own age on the host
    assert not lock.is_stale(lock.LockStatus(False, None, 5000, 4000))
    assert lock.is_stale(lock.LockStatus(False, None, 4001 + lock.STALE_AFTER_S, 4000))
    assert not lock.is_stale(lock.LockStatus(False, None, 10**9, None))


def test_own_dead_pid_is_stale_at_once(state_dir):
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = lock.new_lock("old")
    sh(lock.acquire_command(mine))
    text = info_text(state_dir).replace(f"pid={mine.pid}", f"pid={dead.pid}")
    (state_dir / "deploy.lock" / "info").write_text(text)
    st = lock.parse_acquire(sh(lock.acquire_command(lock.new_lock("new"))))
    assert lock.is_stale(st)


def test_takeover_only_replaces_the_same_stale_holder(state_dir):
    dead = lock.LockInfo("here", 999999, "old", 1, "deadbeef", ME)
    (state_dir / "deploy.lock").mkdir()
    (state_dir / "deploy.lock" / "info").write_text(dead.to_text())
    fresh = lock.new_lock("new")
    st = lock.parse_acquire(sh(lock.acquire_command(fresh)))
    assert not st.acquired and st.holder == dead
    assert lock.parse_acquire(sh(lock.takeover_command(st.holder, fresh))).acquired
    assert f"token={fresh.token}" in info_text(state_dir)
    # a second taker that saw the old holder does not remove the new lock
    late = lock.new_lock("late")
    assert not lock.parse_acquire(sh(lock.takeover_command(dead, late))).acquired
    assert f"token={fresh.token}" in info_text(state_dir)
    assert sorted(p.name for p in (state_dir / "deploy.lock").iterdir()) == [
        "info", f"owner.{fresh.token}"]
    assert leftovers(state_dir) == []


def test_lock_without_info_is_replaced_only_when_old(state_dir):
    d = state_dir / "deploy.lock"
    d.mkdir()
    (d / "claim.0123456789abcdef").write_text("token=x\n")  # a taker that died mid-way
    taker = lock.new_lock("t")
    st = lock.parse_acquire(sh(lock.acquire_command(taker)))
    assert st.holder is None and st.lock_mtime is not None and not lock.is_stale(st)
    assert not lock.parse_acquire(sh(lock.takeover_command(None, taker))).acquired
    assert d.is_dir() and not (d / "info").exists()
    old = time.time() - lock.STALE_AFTER_S - 60
    os.utime(d, (old, old))
    st = lock.parse_acquire(sh(lock.acquire_command(taker)))
    assert lock.is_stale(st)
    assert lock.parse_acquire(sh(lock.takeover_command(None, taker))).acquired
    assert f"token={taker.token}" in info_text(state_dir)


def test_empty_lock_dir_is_replaced(state_dir):
    # rename(2) replaces an empty directory; specdec never leaves one (a lock is published
    # complete), only a version that did mkdir-then-write could, for an instant or a crash.
    (state_dir / "deploy.lock").mkdir()
    taker = lock.new_lock("t")
    assert lock.parse_acquire(sh(lock.acquire_command(taker))).acquired
    assert f"token={taker.token}" in info_text(state_dir)


def test_legacy_lock_format_parses():
    text = "control=elsewhere\npid=1\nrun=other\nsince=990\ntoken=t0k\n"
    assert lock.LockInfo.parse(text.splitlines()) == lock.LockInfo(
        "elsewhere", 1, "other", 990, "t0k", "")
    st = lock.parse_acquire(["@@specdec-lock held 1000", *text.splitlines()])
    assert "is held by run other (pid 1 on elsewhere, 10s ago)" in lock.describe(st)


def test_odd_run_ids_are_sanitised():
    info = lock.new_lock("a b;rm -rf /")
    assert info.run_id == "a_b_rm_-rf__"
    assert lock.LockInfo.parse(info.to_text().splitlines()) == info
