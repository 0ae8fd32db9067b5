"""The per-host deploy lock, as pure shell-command builders and output parsers.

Two rollouts to one host must not interleave. A deploy takes the lock first with an atomic
``mkdir /var/lib/specdec/deploy.lock`` and writes ``info`` in it (control node, pid, run id,
time, a random token); it removes the lock at the end, only if the token is still its own.

A held lock is *stale* (and taken over) when the holder ran on this control node and its pid
is gone, or when it is older than `STALE_AFTER_S`. Used by ``roles/lock.py``; nothing here
talks to a host.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specdec import layout

__all__ = [
    "MARK",
    "STALE_AFTER_S",
    "LockInfo",
    "LockStatus",
    "acquire_command",
    "describe",
    "is_stale",
    "new_lock",
    "parse_acquire",
    "release_command",
    "takeover_command",
]

MARK = "@@specdec-lock"
STALE_AFTER_S = 6 * 3600
_VALUE = re.compile(r"[A-Za-z0-9._:@+-]{1,128}")


@dataclass(frozen=True)
class LockInfo:
    control: str  # control node host name
    pid: int  # pyinfra process on the control node
    run_id: str
    since: int  # epoch seconds
    token: str  # random; proves ownership at release

    def to_text(self) -> str:
        return (
            f"control={self.control}\npid={self.pid}\nrun={self.run_id}\n"
            f"since={self.since}\ntoken={self.token}\n"
        )

    @classmethod
    def parse(cls, lines: Iterable[str]) -> LockInfo | None:
        kv: dict[str, str] = {}
        for line in lines:
            key, sep, value = line.strip().partition("=")
            if sep:
                kv[key] = value
        try:
            return cls(kv["control"], int(kv["pid"]), kv["run"], int(kv["since"]), kv["token"])
        except (KeyError, ValueError):
            return None


def _clean(value: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._:@+-]", "_", value)[:128]
    return value if _VALUE.fullmatch(value) else "unknown"


def new_lock(run_id: str, now: float | None = None) -> LockInfo:
    return LockInfo(
        control=_clean(socket.gethostname()),
        pid=os.getpid(),
        run_id=_clean(run_id),
        since=int(time.time() if now is None else now),
        token=secrets.token_hex(8),
    )


def _write_info(info: LockInfo) -> str:
    path = shlex.quote(f"{layout.LOCK_FILE}/info")
    return f"printf '%s' {shlex.quote(info.to_text())} > {path}"


def acquire_command(info: LockInfo) -> str:
    """Take the lock or report its holder: prints ``MARK acquired`` or ``MARK held <now>``
    followed by the holder's info lines. Always exits 0 when the state dir can be made."""
    q = shlex.quote
    lock = q(layout.LOCK_FILE)
    return (
        f"mkdir -p {q(layout.STATE_DIR)} && "
        f"if mkdir {lock} 2>/dev/null; then {_write_info(info)} && echo {MARK} acquired; "
        f"else echo {MARK} held $(date +%s); cat {lock}/info 2>/dev/null; echo; fi"
    )


def takeover_command(stale: LockInfo | None, info: LockInfo) -> str:
    """Replace a stale lock (only if it is still the same holder), then take it."""
    q = shlex.quote
    lock = q(layout.LOCK_FILE)
    if stale is not None:
        drop = (f"if grep -qxF {q('token=' + stale.token)} {lock}/info 2>/dev/null; "
                f"then rm -rf {lock}; fi; ")
    else:  # a lock dir without readable info, older than the stale age
        drop = f"[ -f {lock}/info ] || rm -rf {lock}; "
    return (
        f"{drop}if mkdir {lock} 2>/dev/null; then {_write_info(info)} && echo {MARK} acquired; "
        f"else echo {MARK} held $(date +%s); cat {lock}/info 2>/dev/null; echo; fi"
    )


def release_command(info: LockInfo) -> str:
    """Remove the lock only if it still carries our token."""
    q = shlex.quote
    lock = q(layout.LOCK_FILE)
    return (
        f"if grep -qxF {q('token=' + info.token)} {lock}/info 2>/dev/null; "
        f"then rm -rf {lock}; fi; true"
    )


@dataclass(frozen=True)
class LockStatus:
    acquired: bool
    holder: LockInfo | None = None
    host_now: int | None = None


def parse_acquire(lines: Iterable[str]) -> LockStatus:
    lines = list(lines)
    for i, line in enumerate(lines):
        if line.startswith(MARK + " acquired"):
            return LockStatus(True)
        if line.startswith(MARK + " held"):
            parts = line.split()
            now = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
            return LockStatus(False, LockInfo.parse(lines[i + 1:]), now)
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
    now: float | None = None,
    pid_alive: Callable[[int], bool] = _pid_alive,
    stale_after_s: int = STALE_AFTER_S,
) -> bool:
    """Whether a held lock may be taken over."""
    holder = status.holder
    now_s = status.host_now if status.host_now is not None else (now or time.time())
    if holder is None:
        # No readable info: a half-written lock; stale only if we cannot tell its age.
        return True
    if holder.control == _clean(control or socket.gethostname()) and not pid_alive(holder.pid):
        return True
    return now_s - holder.since > stale_after_s


def describe(status: LockStatus) -> str:
    h = status.holder
    if h is None:
        return f"deploy lock {layout.LOCK_FILE} is held (no holder info)"
    age = ""
    if status.host_now is not None:
        age = f", {max(0, status.host_now - h.since)}s ago"
    return (
        f"deploy lock {layout.LOCK_FILE} is held by run {h.run_id} "
        f"(pid {h.pid} on {h.control}{age}); another rollout is in progress — retry when it "
        f"ends, or remove the lock if that rollout is dead"
    )
