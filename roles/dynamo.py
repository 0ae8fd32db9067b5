"""NVIDIA Dynamo serving groups: the group's verification (thin: the logic is
`specdec.dynamo.groupverify`).

A group's members verify as one. Each member's verify operation runs on its own host, as every
host's does; the first member to get there verifies the whole group through the frontend, using
every member's connection (`MemberIO`), and the others wait for it and take their own report.
pyinfra runs an operation on every host before the next one, so when the first member gets
there every member's release is active, or that member has failed (the group then rolls back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gevent.event
import gevent.lock
from pyinfra import host
from pyinfra.api import FunctionCommand, HiddenValue, StringCommand, deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_host

from roles.common import HostPlan
from roles.lock import connector_args, fail_command, release_now
from roles.serve import ServeResult
from roles.verify import PyinfraIO, _previous, _write
from specdec import release
from specdec import verify as sv
from specdec.dynamo.groupverify import GroupFailure, GroupVerifier, Member
from specdec.errors import redact
from specdec.plan_types import Group
from specdec.verify_spec import VerifySpec

__all__ = ["MemberIO", "verify_group"]


# -- the group's verification -------------------------------------------------------------------

@dataclass
class _Entry:
    spec: VerifySpec
    changed: tuple[OperationMeta, ...]
    host: Any  # the member's pyinfra Host
    conn: dict[str, Any]


def _box(group: str) -> dict[str, Any]:
    st: Any = host.state
    boxes = getattr(st, "_specdec_groups", None)
    if boxes is None:
        boxes = st._specdec_groups = {}
    return boxes.setdefault(group, {"members": {}, "lock": gevent.lock.Semaphore(),
                                    "done": gevent.event.Event(), "leader": None,
                                    "results": {}})


def _conn(data: Any) -> dict[str, Any]:
    """Escalation for a member's direct commands, as deploys/specdec.py decides it."""
    sudo = data.get("_sudo")
    if sudo is not None:
        return {"_sudo": bool(sudo)}
    user = data.get("ssh_user")
    return {"_sudo": True} if user and user != "root" else {}


class MemberIO(PyinfraIO):
    """`specdec.verify_spec.HostIO` on another member of the group."""

    def __init__(self, member: Any, conn: dict[str, Any], spec: VerifySpec) -> None:
        super().__init__(conn, spec)
        self.member = member

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        kwargs = dict(self.conn)
        if timeout:
            kwargs["_timeout"] = int(timeout)
        st = self.member.state
        with ctx_host.use(self.member):
            ok, output = self.member.run_shell_command(
                StringCommand(command), print_output=st.print_output,
                print_input=st.print_input, **kwargs)
        return bool(ok), list(output.stdout_lines)


def _failed_report(e: _Entry, group: Group, why: str) -> dict[str, Any]:
    v = sv.Verifier(e.spec, MemberIO(e.host, e.conn, e.spec))
    v.report["group"] = {**group.to_dict(), "outcome": "failed"}
    return v.finish("failed", "group", why)


def _run_group(group: Group, box: dict[str, Any], secret: str | None) -> dict[str, Any]:
    st: Any = host.state
    entries: dict[str, _Entry] = box["members"]
    lost = [n for n in group.members if n not in entries or entries[n].host in st.failed_hosts]
    members: list[Member] = []
    why: dict[str, str] = {}
    for name in group.members:
        e = entries.get(name)
        if name in lost or e is None:
            continue
        io = MemberIO(e.host, e.conn, e.spec)
        ok, out = io.run(release.read_state(), 60)
        if not ok:
            lost.append(name)
            continue
        state = release.parse_state(out)
        members.append(Member(e.spec, io, state))
        restarted = any(op.is_complete() and op.did_change() for op in e.changed)
        reason = sv.needs_verification(state, e.spec.desired, restarted, e.spec.reverify)
        if reason:
            why[name] = reason
    front = next((m for m in members if m.dyn.is_frontend), None)
    scale = _time_scale(members)
    if lost or front is None:
        failed = lost[0] if lost else group.frontend
        text = "the deploy failed on this member before the group could be verified"
        if front is None:
            return {m.name: _failed_report(entries[m.name], group, f"group {group.name}: "
                                           f"{failed}: {text}; the frontend member is lost")
                    for m in members}
        return GroupVerifier(members, scale).recover(GroupFailure(failed, "deploy", text))
    gv = GroupVerifier(members, scale)
    if not why and gv.serving_as_verified():
        reports: dict[str, Any] = {}
        for m in members:
            rep = sv.unchanged_report(m.spec, m.state, (200, ""), _previous(m.spec))
            rep["group"] = {**group.to_dict(), "outcome": "unchanged", "url": gv.url}
            reports[m.name] = rep
        return reports
    return gv.run()


def _time_scale(members: list[Member]) -> float | None:
    """The lab's engine emulator runs at SPECDEC_EMU_TIME_SCALE (the frontend has no
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


def _verify_group_once(group: Group, me: str, token: HiddenValue | None,
                       result: dict[str, Any]) -> None:
    """The first member here verifies the whole group and writes every member's report; the
    others wait for it. ``result``: this member's report."""
    box = _box(group.name)
    secret = token.unmask() if token is not None else None
    with box["lock"]:
        lead = box["leader"] is None
        if lead:
            box["leader"] = me
    if lead:
        reports: dict[str, Any] = {}
        try:
            reports = _run_group(group, box, secret)
        except Exception as exc:  # noqa: BLE001 - an unexpected error must still fail cleanly
            reports = {n: _failed_report(e, group, f"group verification crashed: {exc!r}")
                       for n, e in box["members"].items()}
        finally:
            box["results"] = reports
            box["done"].set()
        for name, rep in reports.items():
            e = box["members"].get(name)
            _write(rep, secret, e.spec if e is not None else None)
    else:
        box["done"].wait()
    rep = box["results"].get(me)
    result.update(rep or {"outcome": "failed", "message": f"group {group.name}: no report"})


def _verified() -> bool:
    """What a member whose group verification changed something yields (the work is done)."""
    return True


@operation(is_idempotent=False)
def verify_group_release(group: Group, token: HiddenValue | None = None):
    """Verify this member's group (once, by the first member to get here); keep, disable or
    roll back every member. A group whose releases stand verified and serve reports no change.

    + group: the serving group
    + token: the HF token (only to keep it out of reports)
    """
    if not host.state.is_executing:
        host.noop(f"verify serving group {group.name} through its frontend")
        return
    box = _box(group.name)
    box["members"][host.name].conn = connector_args() or box["members"][host.name].conn
    result: dict[str, Any] = {}
    # Run here, not in a FunctionCommand: the members' greenlets meet in the box, and a member
    # yields a command (a change) only when its group's verification changed something.
    _verify_group_once(group, host.name, token, result)
    outcome = str(result.get("outcome") or "failed")
    if outcome == "unchanged":
        host.noop(f"serving group {group.name} verified before; not re-benchmarked")
        return
    if outcome in sv.FAILURE_OUTCOMES:
        conn = connector_args()
        release_now(conn)
        secret = token.unmask() if token is not None else None
        msg = redact(str(result.get("message") or "verification did not complete"), secret)
        yield fail_command(f"{host.name}: {outcome}: {msg}")
        return
    yield FunctionCommand(_verified, (), {})


@deploy("Verify the serving group")
def verify_group(hp: HostPlan, spec: VerifySpec, served: ServeResult,
                 token: HiddenValue | None = None) -> None:
    """Register this member's verification with its group, then verify the group."""
    assert hp.group is not None
    box = _box(hp.group.name)
    box["members"][host.name] = _Entry(spec, served.changed, ctx_host.get(), _conn(host.data))
    verify_group_release(name=f"Verify serving group {hp.group.name} (health, benchmark and "
                              "gate through its frontend)", group=hp.group, token=token)
