"""The per-host deploy lock, as pure shell-command builders and output parsers.

Two rollouts to one host must not interleave. The lock is the directory
``/var/lib/specdec/deploy.lock`` holding ``info`` (control node, its machine-id, pid, run id,
time, a random token). Every step is one shell command on the host:

* **acquire**: build the lock complete under a name unique to this attempt (``info`` and an
  ``owner.<token>`` marker), then ``mv -T`` it onto ``deploy.lock``: a rename onto a non-empty
  directory fails, so a lock is never seen half-written and exactly one of any number of
  racers gets it (verified by its marker; only an *empty* ``deploy.lock``, which no specdec
  lock ever is, would be replaced). The time in ``info`` is the host's (``date +%s``), and so
  is the "now" staleness is judged against.
* **takeover** of a stale lock: rename its ``info`` to a name unique to us (exactly one
  renamer succeeds), verify it is the stale holder's token (else put it back), then rename
  the whole directory away to a unique name, delete that, and acquire as above.
* **release**: the same claim-and-verify with our own token, so a late release never removes
  someone else's lock.

All three also run under ``flock`` on ``.deploy.lock.flock`` (released by the kernel when the
process dies, so it can never go stale), so they never interleave on one host; the renames
keep the protocol correct on their own (``tests/unit/test_lock_race.py`` races both).

A held lock is *stale* when its holder ran on this control node (same host name and
``/etc/machine-id``) and that pid is gone, or when it is older than `STALE_AFTER_S` by the
host's clock. Used by ``roles/lock.py``; nothing here talks to a host.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specdec import layout

__all__ = [
    "MARK",
    "STALE_AFTER_S",
    "LockInfo",
    "LockStatus",
    "acquire_command",
    "describe",
    "is_stale",
    "machine_id",
    "new_lock",
    "parse_acquire",
    "release_command",
    "takeover_command",
]

MARK = "@@specdec-lock"
STALE_AFTER_S = 6 * 3600
FLOCK_FILE = ".deploy.lock.flock"
FLOCK_WAIT_S = 60
_VALUE = re.compile(r"[A-Za-z0-9._:@+-]{1,128}")
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class LockInfo:
    control: str  # control node host name
    pid: int  # pyinfra process on the control node
    run_id: str
    since: int  # epoch seconds on the host (0 in a lock not yet written there)
    token: str  # random; proves ownership at release
    machine: str = ""  # control node's /etc/machine-id ("" in locks of older versions)

    def to_text(self) -> str:
        return (
            f"control={self.control}\nmachine={self.machine}\npid={self.pid}\n"
            f"run={self.run_id}\nsince={self.since}\ntoken={self.token}\n"
        )

    @classmethod
    def parse(cls, lines: Iterable[str]) -> LockInfo | None:
        kv: dict[str, str] = {}
        for line in lines:
            key, sep, value = line.strip().partition("=")
            if sep:
                kv[key] = value
        try:
            return cls(kv["control"], int(kv["pid"]), kv["run"], int(kv["since"]), kv["token"],
                       kv.get("machine", ""))
        except (KeyError, ValueError):
            return None


def _clean(value: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._:@+-]", "_", value)[:128]
    return value if _VALUE.fullmatch(value) else "unknown"


@cache
def machine_id() -> str:
    """This machine's systemd machine-id (machine-id(5)); "unknown" when unreadable."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if _MACHINE_ID.fullmatch(text):
            return text
    return "unknown"


def new_lock(run_id: str) -> LockInfo:
    return LockInfo(
        control=_clean(socket.gethostname()),
        pid=os.getpid(),
        run_id=_clean(run_id),
        since=0,
        token=secrets.token_hex(8),
        machine=machine_id(),
    )


def _lock(state_dir: str) -> str:
    return shlex.quote(f"{state_dir}/deploy.lock")


def _publish(info: LockInfo, state_dir: str) -> str:
    """Write our lock under a unique name and rename it into place (needs ``$now``)."""
    q = shlex.quote
    lock = _lock(state_dir)
    new = q(f"{state_dir}/deploy.lock.new.{info.token}")
    fmt = q("control=%s\nmachine=%s\npid=%s\nrun=%s\nsince=%s\ntoken=%s\n")
    fields = " ".join(q(str(v)) for v in (info.control, info.machine, info.pid, info.run_id))
    owner = q(f"owner.{info.token}")
    return (
        f"rm -rf {new}; mkdir {new} && printf {fmt} {fields} \"$now\" {q(info.token)} "
        f"> {new}/info && : > {new}/{owner} && if mv -T {new} {lock} 2>/dev/null && "
        f"[ -e {lock}/{owner} ]; then echo {MARK} acquired \"$now\"; "
        f"else rm -rf {new}; echo {MARK} held \"$now\" $(stat -c %Y {lock} 2>/dev/null); "
        f"cat {lock}/info 2>/dev/null; echo; fi"
    )


def _dir(state_dir: str | None) -> str:
    return layout.STATE_DIR if state_dir is None else state_dir  # read now: tests move it


def _flocked(script: str, state_dir: str, serialize: bool) -> str:
    q = shlex.quote
    prefix = f"mkdir -p {q(state_dir)} && "
    if not serialize:
        return prefix + script
    return (prefix + f"flock -w {FLOCK_WAIT_S} {q(state_dir + '/' + FLOCK_FILE)} "
            f"sh -c {q(script)}")


def acquire_command(info: LockInfo, state_dir: str | None = None,
                    serialize: bool = True) -> str:
    """Take the lock or report its holder: prints ``MARK acquired <now>`` or
    ``MARK held <now> [<lock mtime>]`` followed by the holder's info lines (host clock)."""
    d = _dir(state_dir)
    return _flocked(f"now=$(date +%s); {_publish(info, d)}", d, serialize)


def _dispose(lock: str, name: str) -> str:
    """Rename the lock directory to a unique name, then delete it there."""
    return f"mv -T {lock} {name} && rm -rf {name}"


def takeover_command(stale: LockInfo | None, info: LockInfo,
                     state_dir: str | None = None, serialize: bool = True) -> str:
    """Replace a stale lock (only the very holder judged stale), then take it.

    ``stale`` None: a lock without readable info (an older version's, or a taker that died
    mid-way), replaced only when the directory itself is older than `STALE_AFTER_S`.
    """
    q = shlex.quote
    state_dir = _dir(state_dir)
    lock = _lock(state_dir)
    gone = q(f"{state_dir}/deploy.lock.stale.{info.token}")
    if stale is not None:
        claim = q(f"{state_dir}/deploy.lock/claim.{info.token}")
        drop = (
            f"if mv -T {lock}/info {claim} 2>/dev/null; then "
            f"if grep -qxF {q('token=' + stale.token)} {claim}; then {_dispose(lock, gone)}; "
            f"else mv -T {claim} {lock}/info; fi; fi; "
        )
    else:
        drop = (
            f"if [ -d {lock} ] && [ ! -e {lock}/info ] && "
            f"[ $((now - $(stat -c %Y {lock}))) -gt {STALE_AFTER_S} ]; then "
            f"{_dispose(lock, gone)}; fi; "
        )
    return _flocked(f"now=$(date +%s); {drop}{_publish(info, state_dir)}", state_dir, serialize)


def release_command(info: LockInfo, state_dir: str | None = None,
                    serialize: bool = True) -> str:
    """Remove the lock only if it still carries our token."""
    q = shlex.quote
    state_dir = _dir(state_dir)
    lock = _lock(state_dir)
    claim = q(f"{state_dir}/deploy.lock/release.{info.token}")
    gone = q(f"{state_dir}/deploy.lock.released.{info.token}")
    script = (
        f"if mv -T {lock}/info {claim} 2>/dev/null; then "
        f"if grep -qxF {q('token=' + info.token)} {claim}; then {_dispose(lock, gone)}; "
        f"else mv -T {claim} {lock}/info; fi; fi; true"
    )
    return _flocked(script, state_dir, serialize)


@dataclass(frozen=True)
class LockStatus:
    acquired: bool
    holder: LockInfo | None = None
    host_now: int | None = None  # the host's clock
    lock_mtime: int | None = None  # of the lock directory, host clock


def _int(words: list[str], i: int) -> int | None:
    return int(words[i]) if len(words) > i and words[i].isascii() and words[i].isdigit() \
        else None


def parse_acquire(lines: Iterable[str]) -> LockStatus:
    lines = list(lines)
    for i, line in enumerate(lines):
        words = line.split()
        if line.startswith(MARK + " acquired"):
            return LockStatus(True, host_now=_int(words, 2))
        if line.startswith(MARK + " held"):
            return LockStatus(False, LockInfo.parse(lines[i + 1:]), _int(words, 2),
                              _int(words, 3))
    return LockStatus(False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(
    status: LockStatus,
    *,
    control: str | None = None,
    machine: str | None = None,
    pid_alive: Callable[[int], bool] = _pid_alive,
    stale_after_s: int = STALE_AFTER_S,
) -> bool:
    """Whether a held lock may be taken over. Ages are judged on the host's clock only."""
    now = status.host_now
    if now is None:
        return False
    holder = status.holder
    if holder is None:  # no readable info: being replaced right now, or an older version's
        return status.lock_mtime is not None and now - status.lock_mtime > stale_after_s
    me = machine if machine is not None else machine_id()
    here = (holder.control == _clean(control or socket.gethostname())
            and me != "unknown" and holder.machine == me)
    if here and not pid_alive(holder.pid):
        return True
    return now - holder.since > stale_after_s


def describe(status: LockStatus) -> str:
    h = status.holder
    if h is None:
        return (f"deploy lock {layout.LOCK_FILE} is held (no holder info: being taken over, "
                f"or left by an older version; it is replaced once older than "
                f"{STALE_AFTER_S // 3600} h)")
    age = ""
    if status.host_now is not None:
        age = f", {max(0, status.host_now - h.since)}s ago"
    where = h.control + (f" [{h.machine[:8]}]" if h.machine else "")
    return (
        f"deploy lock {layout.LOCK_FILE} is held by run {h.run_id} "
        f"(pid {h.pid} on {where}{age}); another rollout is in progress — retry when it "
        f"ends, or remove the lock if that rollout is dead"
    )
