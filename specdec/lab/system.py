"""Small process, namespace and mount helpers for the lab (control node, root only)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from specdec.errors import LabError

__all__ = [
    "Proc",
    "is_mounted",
    "proc_alive",
    "run",
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


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime), counted after the parenthesised command name.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


class Proc:
    """A process the lab started, identified by PID *and* start time (PIDs get reused)."""

    def __init__(self, pid: int, start: int | None = None) -> None:
        self.pid = pid
        self.start = start if start is not None else _start_time(pid)

    def to_dict(self) -> dict[str, int | None]:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_dict(cls, d: dict[str, int | None] | None) -> Proc | None:
        if not d or not d.get("pid"):
            return None
        return cls(int(d["pid"] or 0), d.get("start"))


def proc_alive(p: Proc | None) -> bool:
    if p is None:
        return False
    now = _start_time(p.pid)
    if now is None or (p.start is not None and now != p.start):
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


def is_mounted(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[4].replace("\\040", " ") == target:
            return True
    return False
