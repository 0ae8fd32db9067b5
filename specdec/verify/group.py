"""Verification of a serving group through its one endpoint (plain Python, like
`specdec.verify.verifier`: every host command and request goes through a member's `HostIO`).

A group verifies, keeps, disables and rolls back as one:

1. **health** — every member's worker unit is up (failed, crash-looping or restarted → fail at
   once, with the journal's last error line) and its own server answers ``/health``; then the
   group's endpoint counts every member as a worker (its engine's `GroupSeat.ready_path`;
   Dynamo: the frontend's ``/v1/models/<model>/ready``);
2. **process** — each worker's memlock and no HF token in its argv or environment;
3. **bench** — through the endpoint: the candidate (every member on its candidate release) and
   the baseline (every member on its speculation-off release), in ABAB rounds as a single host;
   acceptance from the members' own speculation counters (Dynamo: its workers' system servers
   carry vLLM's ``vllm:spec_decode_*``);
4. **gate** — `specdec.gate.decide.decide`; keep or disable on every member, each committed under
its
   own guard;
5. any failure on any member restores *every* member's last-good release (the frontend
   member's other units with it, where they differ) and confirms the group serves again →
   every member ``rolled_back``.

`verify_group` is the whole of it for a deploy: it reads every member's release state, reports a
group whose releases stand verified and serve as ``unchanged``, and otherwise runs
`GroupVerifier` (or restores last-good when a member was lost before it could start).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.bench.device_time import to_device_time
from specdec.bench.metrics import spec_delta
from specdec.errors import SpecdecError, one_line
from specdec.gate.rounds import RoundBench
from specdec.host import layout, release
from specdec.plan.types import Group
from specdec.verify.members import GroupFailure, GroupOps, Member, stop_failing
from specdec.verify.phases.bench import Bench, bench_summary
from specdec.verify.phases.gate import Arm, run_gate
from specdec.verify.phases.host import VerifyFailure, now_iso, upload_command
from specdec.verify.phases.process import check_process
from specdec.verify.spec import FileSpec, HostIO, VerifySpec
from specdec.verify.verifier import Verifier, needs_verification, unchanged_report

__all__ = ["GroupBench", "GroupVerifier", "Reached", "failed_report", "verify_group"]


class GroupBench(Bench):
    """`specdec.verify.phases.bench.Bench` for a whole group, so the gate's rounds
    (`specdec.verify.phases.gate.run_gate`) run unchanged: activating an arm switches every member,
    a measurement goes through the frontend, and no baseline is cached (it is the group's)."""

    def __init__(self, gv: GroupVerifier) -> None:
        super().__init__(gv.front.ctx)
        self.gv = gv

    def activate(self, rid: str, label: str, files: Sequence[FileSpec] = ()) -> None:
        gv = self.gv
        arm = "baseline" if rid == gv.bases[gv.front.name] else "candidate"
        rids = gv.bases if arm == "baseline" else gv.cands
        if all(m.ctx.running == rids[m.name] for m in gv.members):
            return
        gv.each(f"uploading the {arm}", lambda m: m.ctx.ensure_uploaded(
            rids[m.name], m.spec.baseline_files if arm == "baseline" else ()))
        gv.switch(rids)
        gv.wait_ready(arm)
        gv.each("process check", lambda m: check_process(m.ctx, rids[m.name], arm))

    def measure(self, arm: str, rid: str, rb: RoundBench, n: int, name: str = ""
                ) -> tuple[dict[str, Any], float]:
        t0 = self.ctx.io.monotonic()
        res = self.gv.bench(arm, rb, n)
        return res, self.ctx.io.monotonic() - t0

    def cached_baseline(self, rid: str) -> dict[str, Any] | None:
        return None

    def store_baseline(self, rid: str, res: Mapping[str, Any]) -> None:
        return None


class GroupVerifier(GroupOps):
    """One group's verification; `run` returns a report per member and never raises for a
    verification failure (``rolled_back``/``failed``/``held`` members must be failed by the
    caller)."""

    def bench(self, arm: str, rb: RoundBench, n: int) -> dict[str, Any]:
        """One round of ``arm`` through the frontend; acceptance from the workers' counters."""
        for m in self.members:
            try:
                m.ctx.arm(m.spec.bench.timeout_s)
            except VerifyFailure as f:
                raise GroupFailure(m.name, f.phase, f"arming the guard: {f.reason}") from None
        work = self.front.spec.work_dir or Path(".")
        out = work / f"group-{self.info['name']}.{arm}.r{n}.bench.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        before = self._counters()
        try:
            res = dict(self.io.bench(self.url, self.model, out, rb))
            spec = spec_delta(before, self._counters())
        except (SpecdecError, OSError, ValueError) as exc:
            raise GroupFailure(self.front.name, "bench", f"benchmark of the {arm} through the "
                               f"frontend failed: {one_line(str(exc))}") from None
        if self.time_scale:
            res = to_device_time(res, self.time_scale)
        res["spec_decode"] = spec
        summ = bench_summary(res, rb.levels)
        for c in rb.levels:
            lvl = summ[f"c{c}"]
            if not lvl["throughput_tok_s"]:
                raise GroupFailure(self.front.name, "bench", f"benchmark of the {arm} measured "
                                   f"no throughput at concurrency {c}")
            for key, unit in (("throughput_tok_s", "tok/s"), ("tpot_ms_p50", "ms")):
                self._measure("bench", f"{arm}.c{c}.{key}", lvl[key], unit=unit, round=n)
        res["_file"] = str(out)
        return res

    # -- the flow ------------------------------------------------------------------------------
    def run(self) -> dict[str, dict[str, Any]]:
        try:
            return self._verify()
        except GroupFailure as fail:
            return self.recover(fail)
        except VerifyFailure as f:  # from the gate's rounds: the frontend member's
            return self.recover(GroupFailure(self.front.name, f.phase, f.reason))

    def _verify(self) -> dict[str, dict[str, Any]]:
        for m in self.members:
            if m.ctx.running is None:
                raise GroupFailure(m.name, "release", "no release is current on the host")
        self.each("arming the guard", lambda m: m.ctx.arm(m.spec.plan.health_timeout_s))
        self.wait_ready("running release")
        self.each("process check", lambda m: check_process(m.ctx, m.ctx.running or "",
                                                            "worker"))
        plan = self.front.spec.plan
        if not all(self.bases.values()) or not plan.speculative or \
                not self.front.spec.benchmark:
            why = ("the benchmark phase is off (specdec_verify=false)"
                   if not self.front.spec.benchmark else "speculation is off in the plan")
            self._commit({m.name: m.ctx.running or "" for m in self.members})
            outcome = "not_verified" if not self.front.spec.benchmark else "no_speculation"
            return self._finish(outcome, f"{why}; every member is healthy and marked last-good")
        front = self.front.name
        dec, last = run_gate(self.front.ctx, GroupBench(self),
                             Arm(self.cands[front]), Arm(self.bases[front]))
        self.front.v._acceptance(last, self.cands[front])
        if dec.decision == "keep":
            GroupBench(self).activate(self.cands[front], "candidate")
            self._commit(self.cands, drop_decision=True)
            return self._finish("kept", f"speculation kept on every member: {dec.reason}")
        if dec.held:
            return self.recover(GroupFailure(front, "gate", dec.reason), "held")
        reason = dec.reason if dec.decision == "disable" else \
            f"inconclusive, disabled conservatively: {dec.reason}"
        GroupBench(self).activate(self.bases[front], "baseline")
        for m in self.members:
            doc = {"outcome": "disabled", "active": self.bases[m.name],
                   "candidate": self.cands[m.name], "reason": reason, "time": now_iso(),
                   "run_id": m.spec.run_id, "group": self.info["name"]}
            path = f"{layout.release_dir(self.cands[m.name])}/decision.json"
            try:
                m.ctx.sh(upload_command(FileSpec(path, json.dumps(doc, indent=2) + "\n")),
                         "recording the decision")
            except VerifyFailure as f:
                raise GroupFailure(m.name, f.phase, f.reason) from None
        self._commit(self.bases)
        return self._finish("disabled", f"speculation disabled on every member: {reason}")

    def _commit(self, rids: Mapping[str, str], drop_decision: bool = False) -> None:
        for m in self.members:
            rid = rids[m.name]
            extra = (f"rm -f {shlex.quote(layout.release_dir(rid) + '/decision.json')}"
                     if drop_decision else "")
            try:
                m.ctx.commit(rid, extra)
            except VerifyFailure as f:
                raise GroupFailure(m.name, "commit", f.reason) from None

    def _finish(self, outcome: str, message: str) -> dict[str, dict[str, Any]]:
        self.info["outcome"] = outcome
        done = outcome in ("kept", "disabled", "not_verified", "no_speculation")
        figures = {k: self.front.v.report.get(k) for k in ("baseline", "candidate", "gate",
                                                           "acceptance")}
        out: dict[str, dict[str, Any]] = {}
        for m in self.members:
            m.v.report.update(figures)
            m.v.report["measurements"].extend(self.shared)
            m.v.report["group"] = {**self.info, "role": m.seat.role}
            if outcome in ("kept", "disabled"):
                m.v._roofline()
            out[m.name] = m.ctx.finish(outcome, "done" if done else
                                       self.info.get("phase", "group"),
                                       f"group {self.info['name']}: {message}")
        return out

    def recover(self, fail: GroupFailure, outcome: str = "rolled_back"
                 ) -> dict[str, dict[str, Any]]:
        self.info.update(failed_member=fail.member, phase=fail.phase)
        what = f"{fail.member}: {fail.phase}: {fail.reason}"
        for m in self.members:
            m.ctx.event(f"group failure ({what}); restoring last-good on every member")
        restored: dict[str, str] = {}
        problems: list[str] = []
        for m in self.members:
            if m.restore_to is None or m.restore_to not in m.ctx.releases:
                problems.append(f"{m.name} has no last-good release")
                stop_failing(m)
                continue
            restored[m.name] = m.restore_to
        try:
            self.members, everyone = [m for m in self.members if m.name in restored], self.members
            if self.members:
                self.switch(restored)
                self.wait_ready("last-good", phase="restore")
                for m in self.members:
                    if m.ctx.last_good != restored[m.name]:
                        m.ctx.commit(restored[m.name])  # it had committed before the failure
                    else:
                        m.ctx.disarm()
        except (GroupFailure, VerifyFailure) as again:
            problems.append(f"restoring last-good failed too: {getattr(again, 'reason', again)} "
                            "(each host's guard reverts it unless confirmed)")
        finally:
            self.members = everyone
        outcome = "failed" if problems else outcome
        note = "; ".join(problems) if problems else \
            "every member rolled back to its last-good release (serving)"
        return self._finish(outcome, f"member {what}; {note}")


@dataclass(frozen=True)
class Reached:
    """A member the deploy reached: what to verify on it, its host, whether serve restarted its
    engine in this run."""

    spec: VerifySpec
    io: HostIO
    restarted: bool = False


def failed_report(spec: VerifySpec, io: HostIO, group: Group, why: str) -> dict[str, Any]:
    """A member's report when its group could not be verified at all."""
    v = Verifier(spec, io)
    v.report["group"] = {**group.to_dict(), "outcome": "failed"}
    return v.finish("failed", "group", why)


def verify_group(group: Group, reached: Mapping[str, Reached], lost: Sequence[str],
                 previous: Callable[[VerifySpec], dict[str, Any] | None]
                 ) -> dict[str, dict[str, Any]]:
    """Every reached member's report: ``unchanged`` when every release stands verified and the
    group serves with every worker; otherwise verified as one (`GroupVerifier`); restored to
    last-good when a member (``lost``, or one whose state cannot be read) is gone.
    ``previous``: a member's last verification report (its figures are carried over)."""
    lost = list(lost)
    members: list[Member] = []
    why: dict[str, str] = {}
    for name in group.members:
        r = reached.get(name)
        if name in lost or r is None:
            continue
        ok, out = r.io.run(release.read_state(), 60)
        if not ok:
            lost.append(name)
            continue
        state = release.parse_state(out)
        members.append(Member(r.spec, r.io, state))
        reason = needs_verification(state, r.spec.desired, r.restarted, r.spec.reverify)
        if reason:
            why[name] = reason
    front = next((m for m in members if m.seat.is_frontend), None)
    scale = time_scale(members)
    if lost or front is None:
        failed = lost[0] if lost else group.frontend
        text = "the deploy failed on this member before the group could be verified"
        if front is None:
            return {m.name: failed_report(m.spec, m.io, group, f"group {group.name}: {failed}: "
                                          f"{text}; the frontend member is lost")
                    for m in members}
        return GroupVerifier(members, scale).recover(GroupFailure(failed, "deploy", text))
    gv = GroupVerifier(members, scale)
    if not why and gv.serving_as_verified():
        reports: dict[str, Any] = {}
        for m in members:
            rep = unchanged_report(m.spec, m.state, (200, ""), previous(m.spec))
            rep["group"] = {**group.to_dict(), "outcome": "unchanged", "url": gv.url}
            reports[m.name] = rep
        return reports
    return gv.run()


def time_scale(members: Sequence[Member]) -> float | None:
    """The lab's engine emulator runs at SPECDEC_EMU_TIME_SCALE (a group's endpoint has no
    /lab/truth to ask): its figures become device time."""
    for m in members:
        raw = dict(m.spec.plan.env).get("SPECDEC_EMU_TIME_SCALE")
        try:
            scale = float(raw) if raw else None
        except ValueError:
            scale = None
        if scale and scale > 0:
            return scale
    return None
