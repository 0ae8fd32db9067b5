"""Small process, namespace and mount helpers for the lab (control node, root only)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from specdec_lab.errors import LabError

__all__ = [
    "Mount",
    "Proc",
    "cmdline",
    "first_child",
    "is_mounted",
    "mount_at",
    "mounts",
    "proc_alive",
    "run",
    "start_time",
    "stop_process",
]


def run(argv: Sequence[str], what: str, *, timeout: float = 120, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise a one-line `LabError` naming ``what`` and its stderr."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except FileNotFoundError:
        raise LabError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"{what}: timed out after {timeout:g}s") from None
    if check and proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split())[-240:] or f"exit {proc.returncode}"
        raise LabError(f"{what}: {err}")
    return proc


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot), or None when there is no PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Counted after the parenthesised command name (which may contain spaces and parens).
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


class Proc:
    """A process the lab started, identified by PID *and* start time (PIDs get reused)."""

    def __init__(self, pid: int, start: int | None = None) -> None:
        self.pid = pid
        self.start = start if start is not None else start_time(pid)

    def to_dict(self) -> dict[str, int | None]:
        return {"pid": self.pid, "start": self.start}


def proc_alive(p: Proc | None) -> bool:
    """Whether ``p`` still runs: same PID *and* same start time (a process without a known
    start time is never taken for alive)."""
    if p is None or p.start is None:
        return False
    now = start_time(p.pid)
    if now is None or now != p.start:
        return False
    try:
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_process(p: Proc | None, *, sig: int = signal.SIGTERM, grace: float = 20.0,
                 reap: subprocess.Popen[bytes] | None = None) -> None:
    """Signal ``p`` (only if it is still the process we recorded), wait, then SIGKILL."""
    if not proc_alive(p):
        return
    assert p is not None
    try:
        os.kill(p.pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(p.pid)
        if not proc_alive(p):
            return
        time.sleep(0.2)
    if proc_alive(p):
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
    for _ in range(50):
        _reap(p.pid)
        if not proc_alive(p):
            return
        time.sleep(0.1)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


class Mount(NamedTuple):
    point: str
    fstype: str
    source: str
    options: str  # the superblock options (overlay: lowerdir=…,upperdir=…)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[Mount]:
    """This mount namespace's mounts, in mount order (/proc/self/mountinfo)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) > 4 and len(rest) >= 2:
            out.append(Mount(_unescape(fields[4]), rest[0], _unescape(rest[1]),
                             rest[2] if len(rest) > 2 else ""))
    return out


def mount_at(path: Path) -> Mount | None:
    """The mount on top at ``path`` (symlinks resolved), or None."""
    target = str(path.resolve()) if path.exists() else str(path)
    found = None
    for m in mounts():
        if m.point == target:
            found = m
    return found


def is_mounted(path: Path) -> bool:
    return mount_at(path) is not None


def first_child(pid: int) -> int | None:
    """The first child of ``pid`` (e.g. the nspawn started by a host's boot loop), or None."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None
