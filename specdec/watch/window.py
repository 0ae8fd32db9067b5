"""One host's readings: a `Sample` per reader window (checked: the host's output is input like any
other), and the sliding window of them in device time (`Window`).

A sample sums the host's engine (or Dynamo worker) sources: the speculation counters' deltas,
generated tokens and sequence-steps (vLLM: generated − accepted, every step of a sequence yields
one token plus those accepted; TRT-LLM: decoding requests per iteration), finished requests,
the time-weighted histogram of requests running, the mean of those waiting. A frontend (Dynamo)
is kept apart: it counts the group's requests, not one engine's steps.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specdec.errors import redact

__all__ = ["KEYS", "Sample", "Window", "clean", "parse_sample"]

KEYS = ("drafts", "draft_tokens", "accepted", "generated", "steps", "requests")
_CAP = 1e12  # no engine counts this much in one window: a larger delta is garbage
_MAX_BATCH = 4096


def _f(x: Any, cap: float = _CAP) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x) if 0 <= x <= cap else None


@dataclass
class Sample:
    t: float  # control node time (unix) the window ended
    wall_s: float  # the window's length on the host's clock (monotonic)
    device_s: float  # the same in device time (wall / the emulator's time scale)
    counts: dict[str, float] = field(default_factory=dict)  # engine sources, summed
    has_steps: bool = False  # the engine counts sequence-steps itself (else generated − accepted)
    busy: dict[int, float] = field(default_factory=dict)  # batch size -> device seconds
    waiting: float | None = None
    frontend: dict[str, float] = field(default_factory=dict)
    restart: bool = False
    deploying: bool = False
    missed: int = 0  # TRT-LLM iterations lost between two reads (the queue overflowed)
    errors: list[str] = field(default_factory=list)
    ok: bool = True  # every engine source answered at least once

    @property
    def steps(self) -> float:
        c = self.counts
        if self.has_steps:
            return c.get("steps", 0.0)
        return max(0.0, c.get("generated", 0.0) - c.get("accepted", 0.0))


def parse_sample(w: Mapping[str, Any], t: float, scale: float | None) -> Sample:
    """A reader window as a `Sample`; malformed numbers count as missing, never as data."""
    wall = _f(w.get("span"), 1e7) or 0.0
    sc = scale if scale and scale > 0 else 1.0
    s = Sample(t=t, wall_s=wall, device_s=wall / sc, deploying=bool(w.get("busy")))
    raw = w.get("src")
    src: list[Any] = raw if isinstance(raw, list) else []
    engines = [x for x in src if isinstance(x, Mapping) and x.get("role") != "frontend"]
    for x in src:
        if not isinstance(x, Mapping):
            continue
        d: Mapping[str, Any] = x["d"] if isinstance(x.get("d"), Mapping) else {}
        if x.get("err"):
            s.errors.append(clean(f"{x.get('role')}: {x.get('err')}"))
        if x.get("role") == "frontend":
            s.frontend = {k: v for k in ("requests", "generated") if (v := _f(d.get(k)))
                          is not None}
            s.frontend["busy_mean"] = _mean_busy(x.get("busy"), sc)
            continue
        s.restart = s.restart or bool(x.get("restart"))
        s.missed += int(_f(x.get("missed")) or 0)
        s.ok = s.ok and bool(x.get("ok"))
        if "steps" in d:
            s.has_steps = True
        for k in KEYS:
            v = _f(d.get(k))
            if v is not None:
                s.counts[k] = s.counts.get(k, 0.0) + v
        for b, secs in _busy(x.get("busy"), sc).items():
            s.busy[b] = s.busy.get(b, 0.0) + secs
        wv = _f(x.get("waiting"), 1e6)
        if wv is not None:
            s.waiting = (s.waiting or 0.0) + wv
    if not engines:
        s.ok = False
    return s


def clean(text: Any, cap: int = 160) -> str:
    """Text from a host, fit for a table cell or a report: printable, one line, capped."""
    return redact("".join(c if c.isprintable() else "?" for c in str(text)))[:cap]


def _busy(raw: Any, scale: float) -> dict[int, float]:
    out: dict[int, float] = {}
    if not isinstance(raw, Mapping):
        return out
    for k, v in raw.items():
        try:
            b = int(k)
        except (TypeError, ValueError):
            continue
        secs = _f(v, 1e7)
        if secs and 0 <= b <= _MAX_BATCH:
            out[b] = out.get(b, 0.0) + secs / scale
    return out


def _mean_busy(raw: Any, scale: float) -> float:
    h = _busy(raw, scale)
    tot = sum(h.values())
    return sum(b * s for b, s in h.items()) / tot if tot else 0.0


@dataclass
class Window:
    """The samples of the last ``length_s`` device seconds of one host."""

    length_s: float
    samples: deque[Sample] = field(default_factory=deque)

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        total = sum(x.device_s for x in self.samples)
        while len(self.samples) > 1 and total - self.samples[0].device_s >= self.length_s:
            total -= self.samples.popleft().device_s

    def clear(self) -> None:
        self.samples.clear()

    def usable(self) -> list[Sample]:
        return [s for s in self.samples if not s.deploying]

    def total(self, key: str) -> float:
        return sum(s.counts.get(key, 0.0) for s in self.usable())

    @property
    def device_s(self) -> float:
        return sum(s.device_s for s in self.usable())

    def busy(self) -> dict[int, float]:
        return _merge(s.busy for s in self.usable())


def _merge(hs: Iterable[Mapping[int, float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for h in hs:
        for b, v in h.items():
            out[b] = out.get(b, 0.0) + v
    return out
