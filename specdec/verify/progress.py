"""Progress of one host's verification on the terminal: each event of the report (release
switched, engine healthy, a benchmark round, a tune point, the gate's rounds) as one line,
``specdec: HOST +MM:SS PHASE: what`` on stderr as it happens, so the minutes of tuning and gating
inside one pyinfra operation are not silent. Lines are the report's events: one line each and
redacted (`specdec.errors.one_line`), and the host's token once more here."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from specdec.errors import redact

__all__ = ["Progress", "eta_text"]


def eta_text(done: int, most: int, spent_s: float) -> str:
    """``"; at most ~N s left"`` from the mean time of what is done, or ``""``."""
    if done <= 0 or most <= done:
        return ""
    return f"; at most ~{(most - done) * spent_s / done:.0f}s left"


class Progress:
    """A line printer for one host (``stream`` default stderr; ``clock`` monotonic seconds;
    ``secret``: a value never to print, e.g. the host's HF token)."""

    def __init__(self, host: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, secret: str | None = None) -> None:
        self.host = host
        self.secret = secret
        self.stream = stream
        self.clock = clock
        self.t0 = clock()

    def __call__(self, phase: str, text: str) -> None:
        s = int(self.clock() - self.t0)
        out = self.stream or sys.stderr
        line = redact(f"{phase}: {text}", self.secret)
        out.write(f"specdec: {self.host} +{s // 60:02d}:{s % 60:02d} {line}\n")
        out.flush()
