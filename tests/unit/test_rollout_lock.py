"""specdec.host.lock: the deploy lock's shell, run for real against a temporary state directory, on
a
host whose clocks the test moves: its boot id and monotonic clock (files the commands read
instead of /proc), and its wall clock (a ``date`` on PATH a year off, and lock files dated a
year off): the lease follows the first two and ignores the third."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from specdec.host import lock

ME = lock.machine_id()
OTHER_MACHINE = "f" * 32
YEAR = 365 * 24 * 3600


class Host:
    """The host's clocks: boot id and uptime in files; ``date`` shifted by ``offset`` s."""

    def __init__(self, root: Path) -> None:
        self.root = root
        clock = root / "clock"
        clock.mkdir()
        self.boot_file, self.up_file = clock / "boot_id", clock / "uptime"
        self.bin = root / "bin"
        self.bin.mkdir()
        self.boot("b001-0001", 100)
        self.wall(0)

    def boot(self, boot_id: str, up: int = 10) -> None:
        self.boot_file.write_text(boot_id + "\n")
        self.up_file.write_text(f"{up}.42 77.0\n")

    def tick(self, seconds: int) -> None:
        up = int(float(self.up_file.read_text().split()[0]))
        self.up_file.write_text(f"{up + seconds}.42 77.0\n")

    def wall(self, offset: int) -> None:
        """The wall clock ``offset`` seconds off: ``date`` says so, lock files are dated so."""
        self.offset = offset
        fake = self.bin / "date"
        fake.write_text("#!/bin/sh\nexec /bin/date -d "
                        f"@$(( $(/bin/date +%s) + {offset} )) \"$@\"\n")
        fake.chmod(0o755)
        for p in [self.root, *self.root.rglob("*")]:
            if p.name != "date" and not p.is_symlink():
                t = time.time() + offset
                os.utime(p, (t, t))

    def sh(self, cmd: str) -> list[str]:
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}
        out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=90,
                             check=True, env=env)
        return out.stdout.splitlines()


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr("specdec.host.layout.STATE_DIR", str(state))
    monkeypatch.setattr("specdec.host.layout.LOCK_FILE", str(state / "deploy.lock"))
    h = Host(tmp_path)
    monkeypatch.setattr(lock, "BOOT_ID_FILE", str(h.boot_file))
    monkeypatch.setattr(lock, "UPTIME_FILE", str(h.up_file))
    h.state = state  # type: ignore[attr-defined]
    return h


def state_of(h: Host) -> Path:
    return h.state  # type: ignore[attr-defined,no-any-return]


def info_text(h: Host) -> str:
    return (state_of(h) / "deploy.lock" / "info").read_text()


def leftovers(h: Host) -> list[str]:
    return sorted(p.name for p in state_of(h).iterdir()
                  if p.name not in ("deploy.lock", lock.FLOCK_FILE))


def held_by_other(h: Host) -> tuple[lock.LockInfo, lock.LockStatus]:
    """A lock of another control node (its pid says nothing here), taken now."""
    other = lock.LockInfo("elsewhere", 1, "r0", "0ther0ther0ther0", OTHER_MACHINE)
    assert lock.parse_acquire(h.sh(lock.acquire_command(other))).acquired
    return other, lock.parse_acquire(h.sh(lock.acquire_command(lock.new_lock("me"))))


def test_commands_follow_the_state_dir(host: Host) -> None:
    info = lock.new_lock("r")
    for cmd in (lock.acquire_command(info), lock.takeover_command(None, info),
                lock.release_command(info), lock.renew_command(info)):
        assert str(state_of(host)) in cmd and "/var/lib/specdec" not in cmd
        assert "date" not in cmd  # the wall clock is never read


def test_acquire_held_renew_release(host: Host) -> None:
    a, b = lock.new_lock("run-a"), lock.new_lock("run-b")
    got = lock.parse_acquire(host.sh(lock.acquire_command(a)))
    assert got.acquired and (got.boot, got.uptime) == ("b001-0001", 100)
    host.tick(30)
    st = lock.parse_acquire(host.sh(lock.acquire_command(b)))
    assert not st.acquired and st.holder is not None
    assert (st.holder.control, st.holder.machine, st.holder.pid, st.holder.token) == (
        a.control, ME, a.pid, a.token)
    assert (st.holder.boot, st.holder.renewed, st.holder.lease) == ("b001-0001", 100, lock.LEASE_S)
    assert st.age == 30 and "renewed 30s ago" in lock.describe(st)
    host.tick(500)
    assert lock.parse_acquire(host.sh(lock.renew_command(a))).state == "renewed"
    assert "renewed=630\n" in info_text(host)
    assert lock.parse_acquire(host.sh(lock.renew_command(b))).state == "lost"  # not b's
    assert f"token={a.token}" in info_text(host)
    host.sh(lock.release_command(b))  # b cannot release a's lock
    assert f"token={a.token}" in info_text(host)
    host.sh(lock.release_command(a))
    assert not (state_of(host) / "deploy.lock").exists() and leftovers(host) == []
    assert lock.parse_acquire(host.sh(lock.acquire_command(b))).acquired


@pytest.mark.parametrize("jump", [YEAR, -YEAR], ids=["+1y", "-1y"])
def test_a_live_lease_survives_a_wall_clock_jump(host: Host, jump: int) -> None:
    """The wall clock a year ahead or behind (date and every file time): a lease renewed a
    minute ago is live; the same lease a lease-length later is stale, whatever the date."""
    _, st = held_by_other(host)
    host.tick(60)
    host.wall(jump)
    st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("me"))))
    assert not lock.is_stale(st, control="here", machine=ME)
    host.tick(lock.LEASE_S)  # no renewal for a whole lease
    host.wall(-jump)
    st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("me"))))
    assert lock.is_stale(st, control="here", machine=ME)
    taker = lock.new_lock("taker")
    assert lock.parse_acquire(host.sh(lock.takeover_command(st.holder, taker))).acquired
    assert f"token={taker.token}" in info_text(host)


def test_a_renewing_holder_is_never_taken_over(host: Host) -> None:
    other, _ = held_by_other(host)
    for _ in range(10):  # an hour and a half, renewed every third of the lease
        host.tick(lock.RENEW_EVERY_S)
        assert lock.parse_acquire(host.sh(lock.renew_command(other))).state == "renewed"
        st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("me"))))
        assert not lock.is_stale(st, control="here", machine=ME)


def test_a_reboot_gives_the_holder_a_whole_lease(host: Host) -> None:
    _, st = held_by_other(host)
    host.boot("b002-0002", 30)  # the host rebooted (its uptime starts again)
    st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("me"))))
    assert not lock.is_stale(st, control="here", machine=ME)
    host.tick(lock.LEASE_S)  # up a whole lease and never renewed
    st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("me"))))
    assert lock.is_stale(st, control="here", machine=ME)


def test_stale_rules() -> None:
    def held(info: lock.LockInfo, boot: str = "b", up: int = 1010) -> lock.LockStatus:
        return lock.LockStatus(False, info, boot, up, None, "held")

    me = lock.LockInfo("here", 42, "r", "t", ME, "b", 1000, 900)
    assert not lock.is_stale(held(me), control="here", machine=ME, pid_alive=lambda p: True)
    assert lock.is_stale(held(me), control="here", machine=ME, pid_alive=lambda p: False)
    # same host name, another machine: its pid says nothing about that lock
    assert not lock.is_stale(held(me), control="here", machine=OTHER_MACHINE,
                             pid_alive=lambda p: False)
    assert not lock.is_stale(held(me), control="here", machine="unknown",
                             pid_alive=lambda p: False)
    other = lock.LockInfo("elsewhere", 1, "r0", "t", OTHER_MACHINE, "b", 1000, 900)
    alive = {"control": "here", "machine": ME, "pid_alive": lambda p: True}
    assert not lock.is_stale(held(other, up=1900), **alive)
    assert lock.is_stale(held(other, up=1901), **alive)
    assert not lock.is_stale(held(other, "b2", 900), **alive)  # rebooted, up < a lease
    assert lock.is_stale(held(other, "b2", 901), **alive)
    # no host clock: never stale (the control node's clock is not the host's)
    assert not lock.is_stale(lock.LockStatus(False, other), **alive)
    # without a lease (an older version's, or no info): from when it was first seen so
    legacy = lock.LockInfo("elsewhere", 1, "r0", "t")
    for holder in (legacy, None):
        seen = lock.LockStatus(False, holder, "b", 4900, ("b", 4000), "held")
        assert not lock.is_stale(seen, **alive)
        assert lock.is_stale(lock.LockStatus(False, holder, "b", 4901, ("b", 4000), "held"),
                             **alive)
        assert not lock.is_stale(lock.LockStatus(False, holder, "b", 10**9, None, "held"),
                                 **alive)


def test_own_dead_pid_is_stale_at_once(host: Host) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = lock.new_lock("old")
    host.sh(lock.acquire_command(mine))
    text = info_text(host).replace(f"pid={mine.pid}", f"pid={dead.pid}")
    (state_of(host) / "deploy.lock" / "info").write_text(text)
    st = lock.parse_acquire(host.sh(lock.acquire_command(lock.new_lock("new"))))
    assert lock.is_stale(st)


def test_takeover_only_replaces_the_same_stale_holder(host: Host) -> None:
    dead, st = held_by_other(host)
    fresh = lock.new_lock("new")
    assert lock.parse_acquire(host.sh(lock.takeover_command(st.holder, fresh))).acquired
    assert f"token={fresh.token}" in info_text(host)
    # a second taker that saw the old holder does not remove the new lock
    late = lock.new_lock("late")
    assert not lock.parse_acquire(host.sh(lock.takeover_command(dead, late))).acquired
    assert f"token={fresh.token}" in info_text(host)
    assert sorted(p.name for p in (state_of(host) / "deploy.lock").iterdir()) == [
        "info", f"owner.{fresh.token}"]
    assert leftovers(host) == []


def test_lock_without_info_is_judged_from_when_it_was_first_seen(host: Host) -> None:
    d = state_of(host) / "deploy.lock"
    d.mkdir()
    (d / "claim.0123456789abcdef").write_text("token=x\n")  # a taker that died mid-way
    taker = lock.new_lock("t")
    st = lock.parse_acquire(host.sh(lock.acquire_command(taker)))
    assert st.holder is None and st.seen == ("b001-0001", 100) and not lock.is_stale(st)
    host.wall(YEAR)  # a year of wall clock says nothing
    st = lock.parse_acquire(host.sh(lock.acquire_command(taker)))
    assert st.seen == ("b001-0001", 100) and not lock.is_stale(st)
    host.tick(lock.LEASE_S + 1)
    st = lock.parse_acquire(host.sh(lock.acquire_command(taker)))
    assert lock.is_stale(st)
    assert lock.parse_acquire(host.sh(lock.takeover_command(None, taker))).acquired
    assert f"token={taker.token}" in info_text(host) and leftovers(host) == []


def test_adopting_never_touches_a_lock_with_info(host: Host) -> None:
    """A taker that judged a lock without info stale, racing a holder that published one
    meanwhile: its adoption fails (``ln`` cannot replace the info), the new lock stays."""
    holder = lock.new_lock("holder")
    assert lock.parse_acquire(host.sh(lock.acquire_command(holder))).acquired
    late = lock.new_lock("late")
    assert not lock.parse_acquire(host.sh(lock.takeover_command(None, late))).acquired
    assert f"token={holder.token}" in info_text(host) and leftovers(host) == []


def test_a_claim_left_by_a_dead_taker_is_broken_after_a_lease(host: Host) -> None:
    """A taker that died holding the claim (``mkdir claim``) blocks the lock until the claim
    has been there a whole lease; then one taker breaks it and takes the lock."""
    other, _ = held_by_other(host)
    (state_of(host) / "deploy.lock" / "claim").mkdir()
    host.tick(lock.LEASE_S + 1)  # the holder's lease ran out too
    me = lock.new_lock("me")
    st = lock.parse_acquire(host.sh(lock.acquire_command(me)))
    assert lock.is_stale(st) and st.claim is not None and not lock.claim_left(st)
    assert not lock.parse_acquire(host.sh(lock.takeover_command(st.holder, me))).acquired
    host.tick(lock.LEASE_S + 1)
    st = lock.parse_acquire(host.sh(lock.acquire_command(me)))
    assert lock.claim_left(st)
    late = lock.new_lock("late")  # saw it too, but after me: its stamp is gone, it breaks none
    got = host.sh(lock.takeover_command(st.holder, me, break_claim=st.claim_stamp))
    assert lock.parse_acquire(got).acquired and f"token={me.token}" in info_text(host)
    got = host.sh(lock.takeover_command(other, late, break_claim=st.claim_stamp))
    assert not lock.parse_acquire(got).acquired and f"token={me.token}" in info_text(host)
    assert leftovers(host) == []


def test_empty_lock_dir_is_replaced(host: Host) -> None:
    # rename(2) replaces an empty directory; specdec never leaves one (a lock is published
    # complete), only a version that did mkdir-then-write could, for an instant or a crash.
    (state_of(host) / "deploy.lock").mkdir()
    taker = lock.new_lock("t")
    assert lock.parse_acquire(host.sh(lock.acquire_command(taker))).acquired
    assert f"token={taker.token}" in info_text(host)


def test_leased_command_renews_while_it_runs(host: Host,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "RENEW_EVERY_S", 1)
    me = lock.new_lock("me")
    assert lock.parse_acquire(host.sh(lock.acquire_command(me))).acquired
    host.tick(500)
    host.sh(lock.leased("sleep 2.5", me))
    assert "renewed=600\n" in info_text(host)


def test_legacy_and_odd_formats_parse() -> None:
    text = "control=elsewhere\npid=1\nrun=other\nsince=990\ntoken=t0k\n"
    assert lock.LockInfo.parse(text.splitlines()) == lock.LockInfo("elsewhere", 1, "other",
                                                                   "t0k")
    st = lock.parse_acquire(["@@specdec-lock held b 1000", *text.splitlines(), "seen="])
    assert "run other of an older version" in lock.describe(st) and st.seen is None
    info = lock.new_lock("a b;rm -rf /")
    assert info.run_id == "a_b_rm_-rf__"
    assert lock.LockInfo.parse(info.to_text().splitlines()) == info
