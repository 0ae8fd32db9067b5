"""Serving groups: the group's verification (thin: the logic is `specdec.verify.group`).

A group's members verify as one. Each member's verify operation runs on its own host, as every
host's does; the first member to get there verifies the whole group through its endpoint, using
every member's connection (`specdec.roles.hostio.MemberIO`), and the others wait for it and take
their
own report. pyinfra runs an operation on every host before the next one, so when the first
member gets there every member's release is active, or that member has failed (the group then
rolls back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gevent.event
import gevent.lock
from pyinfra import host
from pyinfra.api import FunctionCommand, HiddenValue, deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_host

from specdec.errors import redact
from specdec.plan.types import Group
from specdec.roles.common import HostPlan, escalation
from specdec.roles.hostio import MemberIO, previous_report, write_report
from specdec.roles.lock import connector_args, fail_command, release_now
from specdec.roles.serve import ServeResult
from specdec.verify.group import Reached, failed_report, verify_group
from specdec.verify.spec import VerifySpec
from specdec.verify.verifier import FAILURE_OUTCOMES

__all__ = ["verify_group_release", "verify_serving_group"]


@dataclass
class _Entry:
    spec: VerifySpec
    changed: tuple[OperationMeta, ...]
    host: Any  # the member's pyinfra Host
    conn: dict[str, Any]

    def io(self) -> MemberIO:
        return MemberIO(self.host, self.conn, self.spec)


def _box(group: str) -> dict[str, Any]:
    st: Any = host.state
    boxes = getattr(st, "_specdec_groups", None)
    if boxes is None:
        boxes = st._specdec_groups = {}
    return boxes.setdefault(group, {"members": {}, "lock": gevent.lock.Semaphore(),
                                    "done": gevent.event.Event(), "leader": None,
                                    "results": {}})


def _run_group(group: Group, box: dict[str, Any]) -> dict[str, Any]:
    st: Any = host.state
    entries: dict[str, _Entry] = box["members"]
    lost = [n for n in group.members if n not in entries or entries[n].host in st.failed_hosts]
    reached = {n: Reached(e.spec, e.io(), any(op.is_complete() and op.did_change()
                                              for op in e.changed))
               for n, e in entries.items() if n not in lost}
    return verify_group(group, reached, lost, previous_report)


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
            reports = _run_group(group, box)
        except Exception as exc:  # noqa: BLE001 - an unexpected error must still fail cleanly
            reports = {n: failed_report(e.spec, e.io(), group,
                                        f"group verification crashed: {exc!r}")
                       for n, e in box["members"].items()}
        finally:
            box["results"] = reports
            box["done"].set()
        for name, rep in reports.items():
            e = box["members"].get(name)
            write_report(rep, secret, e.spec if e is not None else None)
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
    if outcome in FAILURE_OUTCOMES:
        conn = connector_args()
        release_now(conn)
        secret = token.unmask() if token is not None else None
        msg = redact(str(result.get("message") or "verification did not complete"), secret)
        yield fail_command(f"{host.name}: {outcome}: {msg}")
        return
    yield FunctionCommand(_verified, (), {})


@deploy("Verify the serving group")
def verify_serving_group(hp: HostPlan, spec: VerifySpec, served: ServeResult,
                         token: HiddenValue | None = None) -> None:
    """Register this member's verification with its group, then verify the group.

    + hp: the member's plan and renderings (``hp.group``: its group)
    + spec: what to verify on this member (`specdec.roles.verify.verify_spec`)
    + served: what serve activated and which of its operations restart the engine
    + token: the HF token (only to keep it out of reports)
    """
    assert hp.group is not None
    box = _box(hp.group.name)
    box["members"][host.name] = _Entry(spec, served.changed, ctx_host.get(),
                                       escalation(host.data))
    verify_group_release(name=f"Verify serving group {hp.group.name} (health, benchmark and "
                              "gate through its frontend)", group=hp.group, token=token)
