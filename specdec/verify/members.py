"""A serving group's members as verification sees them: each one's verifier, host and release
state; running something on each, switching their releases together, waiting until the group's
endpoint serves with every worker."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.bench.metrics import Counters, add_counters, parse_vllm
from specdec.engines.base import GroupSeat
from specdec.engines.registry import engine_of
from specdec.errors import BenchError
from specdec.host import layout, release
from specdec.verify.phases.health import unit_failure
from specdec.verify.phases.host import SERVICE, Ctx, VerifyFailure, now_iso
from specdec.verify.spec import HostIO, VerifySpec
from specdec.verify.verifier import Verifier

__all__ = ["GroupFailure", "GroupOps", "Member", "stop_failing"]


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
    def seat(self) -> GroupSeat:
        seat = engine_of(self.spec.plan).group_seat(self.spec.plan)
        assert seat is not None, f"{self.name} is not a serving group's member"
        return seat


class GroupFailure(Exception):
    def __init__(self, member: str, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.member, self.phase, self.reason = member, phase, " ".join(reason.split())


class GroupOps:
    """A group's members and frontend: run something on each, switch releases together, wait
    until the frontend serves with every worker, record the group's measurements."""

    def __init__(self, members: Sequence[Member], time_scale: float | None = None) -> None:
        self.members = list(members)
        self.front = next(m for m in self.members if m.seat.is_frontend)
        plan = self.front.spec.plan
        self.engine = engine_of(plan)
        self.url = self.front.seat.frontend_url
        self.model = plan.served_model_name
        self.time_scale = time_scale
        self.io = self.front.io
        self.cands = {m.name: m.spec.candidate for m in self.members}
        self.bases = {m.name: m.spec.baseline_id or "" for m in self.members}
        self.metrics_path = self.engine.endpoints(plan).metrics
        self.shared: list[dict[str, Any]] = []  # group measurements, copied to every member
        self.info: dict[str, Any] = {
            "name": self.front.seat.group, "kind": self.front.seat.kind,
            "frontend": self.front.name, "url": self.url,
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
                status, _ = m.io.host_get(m.seat.member_url + "/health", 5.0)
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
        path = self.front.seat.ready_path.format(model=urllib.parse.quote(self.model, safe=""))
        status, body = self.io.http_get(self.url + path, 5.0)
        return path, status, self.engine.ready_workers(body) if status == 200 else 0

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
            status, body = m.io.host_get(m.seat.member_url + self.metrics_path, 10.0)
            if status == 200:
                try:
                    total = add_counters(total, parse_vllm(body))
                except BenchError:
                    continue
        return total


def stop_failing(m: Member) -> None:
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
