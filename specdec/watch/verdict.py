"""Verdicts on the live speed-up, with the gate's own thresholds and indifference logic, so that
steady traffic never flaps.

Speculation on: the estimated speed-up S (`specdec.watch.estimate`) against two levels, the
keep level K = ``1 + keep_min_throughput_gain`` (1.30) and the floor F = ``1 + disable_below_gain``
(1.10), each as a distance θ = log(S / level) with the estimate's standard error SE, the gate's
indifference zone ±m (``indifference``, 0.10: a true θ inside it may be answered either way) and
the gate's ``z`` (`specdec.gate.decide.z_for`). SE_s is the part of SE that moves from look to look
(the
sampling; the step cost's part is fixed while a release runs). A look *clears* a level

* upwards to an edge e (0 or m) when the gate would pass it, ``θ − z·SE ≥ −m``, and the estimate
  is above the edge by more than its sampling noise, ``θ − z·SE_s ≥ e``;
* downwards to an edge e (0 or −m) when the gate would fail it, ``θ + z·SE ≤ m``, and
  ``θ + z·SE_s ≤ e``.

The gate decides once; the watch looks every interval, so a verdict is left at the level and
entered again only beyond the level's zone: the zone is the hysteresis.

==============  ================================  ====================================
verdict         left for                          when the look clears
==============  ================================  ====================================
``paying``      ``marginal`` / ``not paying``     K down to 0 / and F down to 0
``marginal``    ``paying`` / ``not paying``       K up to m / F and K down to 0
``not paying``  ``marginal`` / ``paying``         F up to m / K up to m
==============  ================================  ====================================

So (the defaults, each less the sampling noise) ``paying`` is left below 1.30 and entered again
above 1.44, ``not paying`` entered below 1.10 and left above 1.22: steady traffic never goes
back and forth; sitting on a level, its first verdict may settle once to the other side. A
change needs its candidate in ``confirm`` looks in a row (a look that argues for none resets
the streak). The first verdict needs
``min_draft_tokens`` drafted in the window and a look that clears a level (paying: K up to 0;
not paying: F down to 0; marginal: K down and F up to 0), or else a full window (then by the
estimate: paying from K, not paying below F, marginal between); below half of the minimum the
host goes back to ``no traffic``.

Speculation off: ``favourable`` when the speed-up the live batch mix implies at the gate's
acceptance clears K upwards (entered again to m), ``cannot tell`` when it clears K downwards
(with speculation off the engine drafts nothing: the live acceptance is not observable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specdec.gate.decide import z_for
from specdec.plan.types import GatePolicy

__all__ = ["CANNOT_TELL", "FAVOURABLE", "MARGINAL", "NO_TRAFFIC", "NOT_PAYING", "PAYING",
           "VERDICTS", "Levels", "Tracker", "clears"]

PAYING, MARGINAL, NOT_PAYING, NO_TRAFFIC = "paying", "marginal", "not paying", "no traffic"
FAVOURABLE, CANNOT_TELL = "favourable", "cannot tell"
VERDICTS = (PAYING, MARGINAL, NOT_PAYING, NO_TRAFFIC, FAVOURABLE, CANNOT_TELL)
MAX_CHANGES = 50


def clears(speedup: float, se: float, se_noise: float, level: float, edge: float, up: bool,
           m: float, z: float) -> bool:
    """Whether S clears ``level`` upwards (``up``) to ``+edge`` or downwards to ``-edge``."""
    theta = math.log(speedup / level)
    if up:
        return theta - z * se >= -m and theta - z * se_noise >= edge
    return theta + z * se <= m and theta + z * se_noise <= -edge


@dataclass(frozen=True)
class Levels:
    keep: float
    floor: float
    m: float
    z: float
    confirm: int = 2
    min_draft_tokens: float = 2000.0

    @staticmethod
    def of(policy: GatePolicy, confirm: int = 2, min_draft_tokens: float = 2000.0) -> Levels:
        return Levels(1.0 + policy.keep_min_throughput_gain,
                      1.0 + policy.disable_below_gain, policy.indifference, z_for(policy),
                      confirm, min_draft_tokens)

    def candidate(self, s: float, se: float, speculative: bool, current: str | None = None,
                  se_noise: float = 0.0) -> str | None:
        """The verdict this look argues for from ``current`` (None: the first one)."""
        def up(level: float, edge: float) -> bool:
            return clears(s, se, se_noise, level, edge, True, self.m, self.z)

        def down(level: float, edge: float) -> bool:
            return clears(s, se, se_noise, level, edge, False, self.m, self.z)

        k_in = 0.0 if current in (None, PAYING, FAVOURABLE) else self.m  # entering K needs m
        if not speculative:
            return FAVOURABLE if up(self.keep, k_in) else \
                CANNOT_TELL if down(self.keep, 0.0) else None
        if up(self.keep, k_in):
            return PAYING
        if down(self.floor, 0.0) and down(self.keep, 0.0):
            return NOT_PAYING
        if current in (None, PAYING) and down(self.keep, 0.0) and \
                (current is not None or up(self.floor, 0.0)):
            return MARGINAL
        if current == NOT_PAYING and up(self.floor, self.m):
            return MARGINAL
        return None

    def first(self, s: float, speculative: bool) -> str:
        """A first verdict by the estimate alone."""
        if not speculative:
            return FAVOURABLE if s >= self.keep else CANNOT_TELL
        return PAYING if s >= self.keep else NOT_PAYING if s < self.floor else MARGINAL


@dataclass
class Tracker:
    """One host's verdict over time (persisted in the watch file)."""

    verdict: str = NO_TRAFFIC
    since: float = 0.0
    streak: str | None = None
    count: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    total_changes: int = 0

    def update(self, now: float, levels: Levels, amount: float, s: float | None,
               se: float | None, speculative: bool, readable: bool = True,
               full: bool = True, se_noise: float = 0.0) -> str:
        """One look: ``amount`` is what the window drafted (speculation on) or generated (off);
        ``s``/``se`` None while the window has too few samples for an interval; ``readable``
        False when the figures cannot be read at all (no step cost, counters that are no
        counts); ``full``: the window spans its whole length (a first verdict by the estimate
        alone waits for it). The new verdict."""
        if not readable:
            return self._set(now, CANNOT_TELL, s)
        # with speculation off, "cannot tell" is a verdict like the others
        decided = self.verdict != NO_TRAFFIC and (self.verdict != CANNOT_TELL or not speculative)
        enough = amount >= (levels.min_draft_tokens / 2 if decided else levels.min_draft_tokens)
        if not enough:
            self.streak, self.count = None, 0
            return self._set(now, NO_TRAFFIC, s)
        if s is None or se is None:
            return self.verdict
        if not decided:
            first = levels.candidate(s, se, speculative, None, se_noise)
            if first is None and full:
                first = levels.first(s, speculative)
            return self._set(now, first, s) if first is not None else self.verdict
        cand = levels.candidate(s, se, speculative, self.verdict, se_noise)
        if cand is None or cand == self.verdict:
            self.streak, self.count = None, 0
            return self.verdict
        self.count = self.count + 1 if cand == self.streak else 1
        self.streak = cand
        if self.count >= levels.confirm:
            return self._set(now, cand, s)
        return self.verdict

    def _set(self, now: float, verdict: str, s: float | None) -> str:
        if verdict != self.verdict:
            self.changes.append({"t": round(now, 3), "from": self.verdict, "to": verdict,
                                 "speedup": None if s is None else round(s, 4)})
            del self.changes[:-MAX_CHANGES]
            self.total_changes += 1
            self.verdict, self.since = verdict, now
            self.streak, self.count = None, 0
        return verdict

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "since": self.since, "streak": self.streak,
                "count": self.count, "changes": self.changes,
                "total_changes": self.total_changes}

    @staticmethod
    def from_dict(d: Any) -> Tracker:
        if not isinstance(d, dict) or d.get("verdict") not in VERDICTS:
            return Tracker()
        try:
            return Tracker(str(d["verdict"]), float(d.get("since") or 0.0), d.get("streak"),
                           int(d.get("count") or 0), list(d.get("changes") or [])[-MAX_CHANGES:],
                           int(d.get("total_changes") or 0))
        except (TypeError, ValueError):
            return Tracker()
