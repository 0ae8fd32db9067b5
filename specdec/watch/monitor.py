"""One watched unit (a host, or a Dynamo serving group through its members' workers and its
frontend): its samples, window, estimate, verdict and the row the table, the JSON, the
exposition and the fleet report show. No I/O here but the reverify mark (`specdec.watch.marks`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specdec.plan.types import GatePolicy
from specdec.watch import marks
from specdec.watch.estimate import Estimate, estimate
from specdec.watch.gatefacts import GateFacts
from specdec.watch.verdict import (
    CANNOT_TELL,
    FAVOURABLE,
    NOT_PAYING,
    Levels,
    Tracker,
)
from specdec.watch.window import Sample, Window

__all__ = ["Monitor", "Running"]


@dataclass
class Running:
    """What runs on one member, as its release's plan says."""

    release: str | None
    method: str
    k: int
    engine: str
    time_scale: float | None
    caveats: tuple[str, ...] = ()

    @property
    def speculative(self) -> bool:
        return self.method != "none"


@dataclass
class Monitor:
    name: str  # the host, or "group:<name>"
    members: tuple[str, ...]
    policy: GatePolicy
    levels: Levels
    window_s: float
    action: str = "report"  # specdec_watch.action
    gate: GateFacts | None = None
    running: dict[str, Running] = field(default_factory=dict)  # member -> what runs
    windows: dict[str, Window] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # member -> ok | why not
    tracker: Tracker = field(default_factory=Tracker)
    marked: bool = False
    last: Estimate | None = None
    reader_cpu: dict[str, float] = field(default_factory=dict)

    def window(self, member: str) -> Window:
        return self.windows.setdefault(member, Window(self.window_s))

    # -- inputs ----------------------------------------------------------------------------
    def set_running(self, member: str, running: Running) -> None:
        before = self.running.get(member)
        if before is not None and before.release != running.release:
            self.window(member).clear()  # another release: its traffic tells nothing of this
            self.tracker = Tracker()
        self.running[member] = running

    def add(self, member: str, s: Sample, cpu: float | None = None) -> None:
        if s.deploying:
            self.window(member).clear()
        self.window(member).add(s)
        if cpu is not None:
            self.reader_cpu[member] = cpu

    # -- the look ------------------------------------------------------------------------------
    def merged(self) -> Window:
        w = Window(self.window_s)
        for member in self.members:
            w.samples.extend(self.window(member).samples)
        return w

    def speculative(self) -> bool | None:
        runs = [r for m in self.members if (r := self.running.get(m)) is not None]
        return runs[0].speculative if runs else None

    def look(self, now: float, root: Path | None) -> str:
        spec = self.speculative()
        if spec is None:
            return self.tracker.verdict
        caveats = [c for m in self.members for c in (self.running[m].caveats
                                                     if m in self.running else ())]
        cost = self.gate.cost if self.gate is not None else None
        est = estimate(self.merged(), cost, self.policy.run_noise, spec,
                       self.gate.tokens_per_step if self.gate is not None else None)
        self.last = est
        amount = est.draft_tokens if spec else est.generated
        traffic = amount >= self.levels.min_draft_tokens
        readable = not traffic or (not (spec and caveats) and cost is not None
                                   and bool(est.batch_mix))
        full = est.device_s >= 0.9 * self.window_s
        verdict = self.tracker.update(now, self.levels, amount, est.speedup, est.se_log, spec,
                                      readable=readable, full=full,
                                      se_noise=est.se_noise or 0.0)
        wants = (verdict == NOT_PAYING and spec) or (verdict == FAVOURABLE and not spec)
        if self.action == "reverify" and wants and root is not None and not self.answered():
            since = datetime.fromtimestamp(self.tracker.since, UTC).isoformat(timespec="seconds")
            for m in self.members:
                marks.mark(root, m, {"by": "specdec watch", "verdict": verdict, "since": since,
                                     "speedup": est.speedup, "release": self._release(m)})
        if root is not None:
            self.marked = bool(marks.marked(root, self.members))
        return verdict

    def answered(self) -> bool:
        """The release that runs was already re-verified for a mark of this watch (the gate,
        on its prompt set, kept its decision): not marked again, or every rollout would."""
        return self.gate is not None and self.gate.answered is not None and \
            self.gate.answered == self._release(self.members[0])

    def _release(self, member: str) -> str | None:
        r = self.running.get(member)
        return r.release if r is not None else None

    # -- the row -----------------------------------------------------------------------------
    def row(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        g, est = self.gate, self.last
        spec = self.speculative()
        runs = [self.running[m] for m in self.members if m in self.running]
        scale = next((r.time_scale for r in runs if r.time_scale), None)
        status = sorted({v for v in self.status.values()}) or ["starting"]
        notes = self._notes(runs, spec)
        row: dict[str, Any] = {
            "host": self.name, "members": list(self.members),
            "status": "ok" if status == ["ok"] else "; ".join(s for s in status if s != "ok"),
            "decision": g.outcome if g else None,
            "decided_at": g.decided_at.isoformat() if g and g.decided_at else None,
            "decision_age_s": round(now - g.decided_at.timestamp(), 1)
            if g and g.decided_at else None,
            "speculative": spec,
            "method": runs[0].method if runs else None, "k": runs[0].k if runs else None,
            "release": runs[0].release if runs else None,
            **_gate_columns(g),
            **_live_columns(est, self.levels.z),
            "verdict": self.tracker.verdict,
            "verdict_since": datetime.fromtimestamp(self.tracker.since, UTC)
            .isoformat(timespec="seconds") if self.tracker.since else None,
            "verdict_changes": self.tracker.total_changes,
            "keep_level": self.levels.keep, "floor_level": self.levels.floor,
            "action": self.action, "marked": self.marked, "notes": notes,
            "reader_cpu_s": round(sum(self.reader_cpu.values()), 3),
            "as_of": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
            "device_time": {"emulated": scale is not None, "time_scale": scale},
        }
        frontend = self._frontend()
        if frontend is not None:
            row["frontend"] = frontend
        return row

    def _notes(self, runs: list[Running], spec: bool | None) -> list[str]:
        """What the row's figures cannot show: caveats, missing gate facts, extrapolation."""
        g, est = self.gate, self.last
        notes = sorted({c for r in runs for c in r.caveats})
        if g is None:
            notes.append("no gate report for this host on the control node")
        elif g.cost is None:
            notes.append("no step cost: neither a tune curve nor the gate's benchmark files")
        if est is not None and est.extrapolated > 0.05:
            notes.append(f"{est.extrapolated:.0%} of busy time beyond the batch sizes measured")
        if self.action == "reverify" and self.answered():
            notes.append("re-verified after this watch's mark; the gate decided again: not "
                         "marked again for this release")
        if self.tracker.verdict == CANNOT_TELL and spec is False:
            notes.append("speculation is off: live acceptance is not observable")
        return notes

    def _frontend(self) -> dict[str, Any] | None:
        """A serving group's frontend figures over the window (None: no frontend samples)."""
        fronts = [s.frontend for m in self.members for s in self.window(m).usable()
                  if s.frontend]
        if not fronts:
            return None
        secs = sum(s.device_s for m in self.members for s in self.window(m).usable()
                   if s.frontend)
        return {
            "requests_per_s": sum(f.get("requests", 0.0) for f in fronts) / secs
            if secs else None,
            "tokens_per_s": sum(f.get("generated", 0.0) for f in fronts) / secs
            if secs else None,
            "inflight_mean": sum(f.get("busy_mean", 0.0) for f in fronts) / len(fronts)}


def _gate_columns(g: GateFacts | None) -> dict[str, Any]:
    """What the gate measured at deploy time."""
    return {"gate_al": g.al if g else None, "gate_gain_c1": g.gain_c1 if g else None,
            "gate_gain_c8": g.gain_c8 if g else None,
            "gate_tokens_per_step": g.tokens_per_step if g else None,
            "cost_source": g.cost.source if g and g.cost else None}


def _live_columns(est: Estimate | None, z: float) -> dict[str, Any]:
    """The live estimate: acceptance, the gain and its interval at ``z``, the traffic."""
    s = est.speedup if est is not None else None
    se = est.se_log if est is not None else None
    lo_hi: tuple[float | None, float | None] = (None, None)
    if s is not None and se is not None:
        lo_hi = (s * math.exp(-z * se) - 1, s * math.exp(z * se) - 1)
    return {"live_al": est.al if est else None,
            "est_gain": None if s is None else round(s - 1.0, 4),
            "est_gain_ci": [None if x is None else round(x, 4) for x in lo_hi],
            "hypothetical": bool(est and est.hypothetical),
            "tokens_per_s": est.tokens_s if est else None,
            "requests_per_s": est.requests_s if est else None,
            "window": est.to_dict() if est else None}
