"""Verification of a Dynamo serving group through its frontend (plain Python, like
`specdec.verify`: every host command and request goes through a member's `HostIO`).

A group verifies, keeps, disables and rolls back as one:

1. **health** — every member's worker unit is up (failed, crash-looping or restarted → fail at
   once, with the journal's last error line) and its system server answers ``/health``; then the
   frontend's readiness route (``/v1/models/<model>/ready``) counts every member as a worker;
2. **process** — each worker's memlock and no HF token in its argv or environment;
3. **bench** — through the frontend: the candidate (every member on its candidate release) and
   the baseline (every member on its speculation-off release), in ABAB rounds as a single host;
   acceptance from the workers' ``vllm:spec_decode_*`` counters (their system servers carry
   vLLM's metrics);
4. **gate** — `specdec.gate.decide`; keep or disable on every member, each committed under its
   own guard;
5. any failure on any member restores *every* member's last-good release (the frontend
   member's etcd and frontend units with it, where they differ) and confirms the group serves
   again → every member ``rolled_back``.
"""

from __future__ import annotations

import json
import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec import layout, release
from specdec.bench.device_time import to_device_time
from specdec.bench.metrics import Counters, add_counters, parse_vllm, spec_delta
from specdec.engines.dynamo.facts import READY_PATH
from specdec.errors import BenchError, SpecdecError, one_line
from specdec.phases.bench import Bench, bench_summary
from specdec.phases.gate import Arm, run_gate
from specdec.phases.health import unit_failure
from specdec.phases.host import SERVICE, Ctx, VerifyFailure, now_iso, upload_command
from specdec.phases.process import check_process
from specdec.plan_types import DynamoPlan
from specdec.rounds import RoundBench
from specdec.verify import Verifier, engine_url
from specdec.verify_spec import FileSpec, HostIO, VerifySpec

__all__ = ["GroupFailure", "GroupOps", "GroupVerifier", "Member", "ready_workers"]


@dataclass
class Member:
    spec: VerifySpec
    io: HostIO
    state: release.ReleaseState
    v: Verifier = field(init=False)
    restore_to: str | None = None

    def __post_init__(self) -> None:
        self.v = Verifier(self.spec, self.io)
        ctx = self.ctx
        ctx.running, ctx.releases, ctx.last_good = (self.state.current, set(self.state.releases),
                                                    self.state.last_good)
        self.v.report["last_good"] = self.state.last_good
        prior = self.spec.prior_current
        self.restore_to = self.state.last_good or (prior if prior in ctx.releases else None)

    @property
    def ctx(self) -> Ctx:
        return self.v.ctx

    @property
    def name(self) -> str:
        return self.spec.plan.host

    @property
    def dyn(self) -> DynamoPlan:
        assert self.spec.plan.dynamo is not None
        return self.spec.plan.dynamo

    @property
    def system_url(self) -> str:
        return engine_url(self.dyn.address, self.dyn.system_port)


class GroupFailure(Exception):
    def __init__(self, member: str, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.member, self.phase, self.reason = member, phase, " ".join(reason.split())


def ready_workers(body: str) -> int:
    """Workers the frontend's readiness answer counts (over namespaces and worker types)."""
    try:
        doc = json.loads(body)
        spaces = doc.get("namespaces") or {}
        return sum(int(t.get("workers") or 0) for ns in spaces.values()
                   for t in (ns.get("worker_types") or {}).values())
    except (ValueError, AttributeError, TypeError):
        return 0


class GroupBench(Bench):
    """`specdec.phases.bench.Bench` for a whole group, so the gate's rounds
    (`specdec.phases.gate.run_gate`) run unchanged: activating an arm switches every member,
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


class GroupOps:
    """A group's members and frontend: run something on each, switch releases together, wait
    until the frontend serves with every worker, record the group's measurements."""

    def __init__(self, members: Sequence[Member], time_scale: float | None = None) -> None:
        self.members = list(members)
        self.front = next(m for m in self.members if m.dyn.is_frontend)
        plan = self.front.spec.plan
        self.url = engine_url(self.front.dyn.frontend_address, plan.port)
        self.model = plan.served_model_name
        self.time_scale = time_scale
        self.io = self.front.io
        self.cands = {m.name: m.spec.candidate for m in self.members}
        self.bases = {m.name: m.spec.baseline_id or "" for m in self.members}
        self.shared: list[dict[str, Any]] = []  # group measurements, copied to every member
        self.info: dict[str, Any] = {
            "name": self.front.dyn.group, "frontend": self.front.name, "url": self.url,
            "members": [m.name for m in self.members], "failed_member": None,
        }

    # -- members ---------------------------------------------------------------------------------
    def each(self, what: str, fn: Any) -> None:
        for m in self.members:
            try:
                fn(m)
            except VerifyFailure as f:
                raise GroupFailure(m.name, f.phase, f"{what}: {f.reason}") from None

    def switch(self, rids: Mapping[str, str]) -> None:
        """Every member onto its release in ``rids``; etcd and the frontend restart only where
        the release changes their units."""
        for m in self.members:
            rid = rids[m.name]
            if m.ctx.running == rid:
                continue
            arm = m.ctx._guard_arm(rid, m.spec.plan.health_timeout_s)
            new = f"releases/{rid}"
            cmd = (f"cd {layout.STATE_DIR} && old=$(readlink current || true) && "
                   f"{release.activate(rid)} && {arm + ' && ' if arm else ''}"
                   f"systemctl daemon-reload && {{ {release.aux_restart('$old', new)}; }} && "
                   f"systemctl restart {SERVICE}")
            try:
                m.ctx.sh(cmd, f"activating release {rid}", 300)
            except VerifyFailure as f:
                raise GroupFailure(m.name, "release", f.reason) from None
            m.ctx.running = rid
            m.ctx.event(f"activated release {rid} and restarted the worker")

    def wait_ready(self, label: str, phase: str = "health") -> float:
        """Every member's worker up and healthy, then the frontend ready with all of them."""
        timeout = float(max(m.spec.plan.health_timeout_s for m in self.members))
        t0 = self.io.monotonic()
        restarts0 = {m.name: _int(m.ctx.unit_state().get("NRestarts")) for m in self.members}
        healthy: set[str] = set()
        inactive: dict[str, int] = {}
        last = "no answer yet"
        while True:
            for m in self.members:
                if m.name in healthy:
                    continue
                st = m.ctx.unit_state()
                active, sub = st.get("ActiveState", ""), st.get("SubState", "")
                n0, n = restarts0[m.name], _int(st.get("NRestarts"))
                inactive[m.name] = inactive.get(m.name, 0) + 1 if active == "inactive" else 0
                if (active == "failed" or sub == "auto-restart" or inactive[m.name] >= 2
                        or (n0 is not None and n is not None and n > n0)):
                    f = unit_failure(m.ctx, f"{label} on {m.name}", st)
                    raise GroupFailure(m.name, f.phase, f.reason)
                status, _ = m.io.http_get(m.system_url + "/health", 5.0)
                if status == 200:
                    healthy.add(m.name)
                    m.ctx.measure(phase, f"time_to_healthy[{label}]",
                                  round(self.io.monotonic() - t0, 2), timeout, True, "s",
                                  release=m.ctx.running)
                else:
                    last = f"{m.name}'s worker /health answered {status or 'nothing'}"
            if len(healthy) == len(self.members):
                path, status, workers = self.frontend_workers()
                if workers == len(self.members):
                    took = self.io.monotonic() - t0
                    self._measure(phase, f"group_ready[{label}]", round(took, 2), timeout, True,
                                  "s", workers=workers)
                    return took
                last = (f"the frontend counts {workers} of {len(self.members)} workers"
                        if status == 200 else f"the frontend's {path} answered "
                        f"{status or 'nothing'}")
            elapsed = self.io.monotonic() - t0
            if elapsed >= timeout:
                who = next((m.name for m in self.members if m.name not in healthy),
                           self.front.name)
                raise GroupFailure(who, "health", f"{label} not ready after {timeout:.0f}s "
                                   f"(health_timeout_s): {last}")
            self.io.sleep(min(self.front.spec.poll_s, max(0.0, timeout - elapsed)))

    def frontend_workers(self) -> tuple[str, int, int]:
        """The frontend's readiness route for the model: (path, HTTP status, workers it
        counts; 0 unless it answered 200)."""
        path = READY_PATH.format(model=urllib.parse.quote(self.model, safe=""))
        status, body = self.io.http_get(self.url + path, 5.0)
        return path, status, ready_workers(body) if status == 200 else 0

    def serving_as_verified(self) -> bool:
        """Every member is a worker behind the frontend now (an unchanged group needs no more)."""
        return self.frontend_workers()[2] == len(self.members)

    # -- measurement ---------------------------------------------------------------------------
    def _measure(self, phase: str, name: str, value: Any, threshold: Any = None,
                 ok: bool | None = None, unit: str | None = None, **extra: Any) -> None:
        self.shared.append({"phase": phase, "name": name, "value": value,
                            "threshold": threshold, "unit": unit, "ok": ok, "time": now_iso(),
                            **extra})

    def _counters(self) -> Counters:
        total = Counters(per_pos=None)
        for m in self.members:
            status, body = m.io.http_get(m.system_url + "/metrics", 10.0)
            if status == 200:
                try:
                    total = add_counters(total, parse_vllm(body))
                except BenchError:
                    continue
        return total



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
            role = "etcd, frontend, worker" if m.dyn.is_frontend else "worker"
            m.v.report["group"] = {**self.info, "role": role}
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
                _stop_failing(m)
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


def _stop_failing(m: Member) -> None:
    try:
        st = m.ctx.unit_state()
        if st.get("ActiveState") in ("failed", "activating") or st.get("SubState") == \
                "auto-restart":
            m.io.run(f"systemctl stop {SERVICE}", 120)
    except Exception:  # noqa: BLE001 - best effort on an already failed host
        pass


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v not in (None, "", "[not set]") else None
    except ValueError:
        return None
