"""Waiting for events, not for an amount of time: a test that sleeps and then asserts fails on
a busy machine. Wait for the condition with a generous deadline, then assert the order."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["flock_waiters", "wait_until"]


def wait_until(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Return once ``check()`` is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.02)


def flock_waiters(path: Path) -> int:
    """How many flock(2) requests on ``path`` are blocked (the ``->`` lines of /proc/locks)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for ln in lines if " -> FLOCK " in ln and ln.split()[-3] == dev)
