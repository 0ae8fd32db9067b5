"""The per-host deploy lock: taken first, released last (see `specdec.host.lock`).

The operations talk to the host only at execution time and report "No changes": a re-run of an
unchanged plan stays a no-op. A held, live lock fails the host with one line before anything is
changed; a stale one (its pyinfra process on this control node is gone, or its lease ran out on
the host's monotonic clock, `specdec.host.lock`) is taken over. The lease is renewed before each
long phase (`renew_lease`), during a long command (`leased`: a pull, a download) and between
the verify step's host commands (`keep_lease`); a lease found taken over fails the host at
once, without another change. When the verify step fails a host it releases the lock itself (a
failed host runs no later operation).

pyinfra gathers the facts the roles plan from in its prepare phase, before any operation runs,
so before the lock. `deploy_lock` returns the release state those decisions are based on, and
once the lock is held it reads that state again, with every other fact the deploy planned
from, in one command (`specdec.roles.factcache.refresh`): if it moved in between (another
rollout, or the host's guard), the host fails with one line before anything is changed.

Also the run context shared by the lock and verify roles: the run id (``$SPECDEC_RUN_ID``, set
by `specdec rollout`, else one per pyinfra process) and the reports directory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.state import BaseStateCallback
from pyinfra.connectors.fake import FakeConnector

from specdec.errors import redact
from specdec.host import layout
from specdec.host import lock as speclock
from specdec.host.release import ReleaseState
from specdec.report.fleet import (
    RUN_ID_ENV,
    new_run_id,
    reports_root,
    skipped_report,
    write_host_report,
)
from specdec.roles.factcache import lock_only, refresh, save
from specdec.roles.facts import SpecdecReleases

__all__ = [
    "SKIP_ON_FAKE_CONNECTOR",
    "LockLost",
    "deploy_lock",
    "deploy_unlock",
    "fail_command",
    "host_run",
    "keep_lease",
    "leased",
    "lock_run",
    "moved",
    "release_now",
    "renew_lease",
    "run_dir",
    "run_id",
    "skip_host",
]

# pyinfra's @fake connector executes nothing: there is no engine to lock, health-check or
# benchmark. Tests of these roles switch this off and inject fakes.
SKIP_ON_FAKE_CONNECTOR = True

_held: dict[str, speclock.LockInfo] = {}
_planned: dict[str, speclock.LockInfo] = {}  # made in prepare: long commands renew with it
_renewed: dict[str, float] = {}  # host -> the control node's monotonic time of the last renewal
_run_id: list[str] = []


class LockLost(Exception):
    """The host's deploy lock was taken over while this run held it (its lease ran out)."""


def run_id() -> str:
    env = os.environ.get(RUN_ID_ENV)
    if env:
        return env
    if not _run_id:
        _run_id.append(new_run_id())
    return _run_id[0]


def run_dir() -> Path:
    return reports_root() / run_id()


def skip_host() -> bool:
    return SKIP_ON_FAKE_CONNECTOR and isinstance(host.connector, FakeConnector)


def connector_args() -> dict[str, Any]:
    """The executing operation's connector arguments (``_sudo`` …) for direct commands."""
    ga = host.current_op_global_arguments or {}
    return {k: ga[k] for k in CONNECTOR_ARGUMENT_KEYS if k in ga and k != "_timeout"}


def host_run(command: str, conn: dict[str, Any], timeout: float | None = None
             ) -> tuple[bool, list[str]]:
    """Run ``command`` on the current host now (not as an operation's change)."""
    st = host.state
    kwargs = dict(conn)
    if timeout:
        kwargs["_timeout"] = int(timeout)
    ok, output = host.run_shell_command(
        StringCommand(command), print_output=st.print_output, print_input=st.print_input,
        **kwargs)
    return bool(ok), list(output.stdout_lines)


def fail_command(message: str) -> StringCommand:
    """A command that prints one line on stderr and fails: pyinfra fails the host with it."""
    text = "specdec: " + " ".join(redact(message).split())
    return StringCommand(f"printf '%s\\n' {shlex.quote(text)} >&2; exit 1")


def lock_run(command: str, conn: dict[str, Any], timeout: float | None = None
             ) -> tuple[bool, list[str]]:
    """`host_run` for a command that touches only the deploy lock (`specdec.roles.factcache`: not a
    change of the host the facts describe)."""
    with lock_only(host):
        return host_run(command, conn, timeout)


def release_now(conn: dict[str, Any]) -> None:
    save(host)  # the facts this run read, for the next run to read in one command
    info = _held.pop(host.name, None)
    if info is not None:
        lock_run(speclock.release_command(info), conn, 60)


def leased(command: str) -> str:
    """``command`` renewing this host's lease while it runs (no lock: as it is)."""
    info = _planned.get(host.name)
    return speclock.leased(command, info) if info is not None and not skip_host() else command


def _renew(name: str, run: Any) -> None:
    info = _held.get(name)
    if info is None:
        return
    ok, out = run(speclock.renew_command(info), 60)
    status = speclock.parse_acquire(out)
    if status.state == "lost":
        _held.pop(name, None)
        raise LockLost(f"the deploy lock {layout.LOCK_FILE} was taken over (its lease ran out): "
                       "nothing more is changed on this host")
    if ok and status.state == "renewed":
        _renewed[name] = time.monotonic()


def keep_lease(name: str, run: Any) -> None:
    """Renew ``name``'s lease when a third of it has passed (``run(command, timeout)`` runs on
    that host); `LockLost` when it was taken over."""
    if name in _held and time.monotonic() - _renewed.get(name, 0.0) >= speclock.RENEW_EVERY_S:
        _renew(name, run)


def moved(planned: ReleaseState, now: ReleaseState) -> str | None:
    """How the release state changed since the deploy planned from it, or None."""
    if (planned.current, planned.last_good, set(planned.releases), planned.decisions) == \
            (now.current, now.last_good, set(now.releases), now.decisions):
        return None
    if (planned.current, planned.last_good) != (now.current, now.last_good):
        return (f"current {planned.current} -> {now.current}, last-good {planned.last_good} -> "
                f"{now.last_good}")
    return "the releases or their recorded decisions changed"


def _refuse(message: str):
    try:
        rep = skipped_report(host.name, run_id(), message, outcome="failed", phase="lock")
        write_host_report(run_dir(), rep)
    except OSError:
        pass
    yield fail_command(f"{host.name}: {message}")


@operation(is_idempotent=False)
def acquire(planned: ReleaseState | None = None):
    """Take the host's deploy lock, or fail the host if another rollout holds it.

    + planned: the release state the deploy planned from; re-read under the lock
    """
    if not host.state.is_executing:
        host.noop(f"take the deploy lock {layout.LOCK_FILE}")
        return
    conn = connector_args()
    info = _planned.get(host.name) or speclock.new_lock(run_id())
    ok, out = lock_run(speclock.acquire_command(info), conn, 90)
    status = speclock.parse_acquire(out)
    if ok and not status.acquired and speclock.is_stale(status):
        left = status.claim_stamp if speclock.claim_left(status) else None
        ok, out = lock_run(speclock.takeover_command(status.holder, info, break_claim=left),
                           conn, 90)
        status = speclock.parse_acquire(out)
        if status.acquired:
            host.noop("took over a stale deploy lock")
    if not (ok and status.acquired):
        yield from _refuse(speclock.describe(status) if ok else "could not take the deploy lock")
        return
    _held[host.name] = info
    _renewed[host.name] = time.monotonic()
    host.noop(f"deploy lock {layout.LOCK_FILE} taken")
    # every fact the deploy planned from, read again in one command now that the lock is held:
    # operations that change nothing are answered from it (roles/factcache.py)
    refresh(host)
    change = moved(planned, host.get_fact(SpecdecReleases)) if planned is not None else None
    if change is not None:
        release_now(conn)
        yield from _refuse(f"the release state changed after this deploy planned ({change}); "
                           "another rollout or the host's guard moved it: nothing was changed, "
                           "run the deploy again")


@operation(is_idempotent=False)
def renew():
    """Renew this run's lease on the host's deploy lock when a third of it has passed (fails
    the host if it was lost)."""
    if not host.state.is_executing or host.name not in _held:
        host.noop("renew the deploy lock's lease when due")
        return
    conn = connector_args()
    try:
        keep_lease(host.name, lambda cmd, t: lock_run(cmd, conn, t))
    except LockLost as exc:
        yield fail_command(f"{host.name}: {exc}")
        return
    host.noop("the deploy lock's lease holds")


@operation(is_idempotent=False)
def release():
    """Release the deploy lock taken by this run."""
    if not host.state.is_executing:
        host.noop("release the deploy lock")
        return
    release_now(connector_args())
    host.noop("deploy lock released")
    yield from ()  # a generator that changes nothing


class _ReleaseOnError(BaseStateCallback):
    """pyinfra has no rescue: when any operation fails a host, release its lock right away
    (a failed host runs no later operation, so `deploy_unlock` would never run)."""

    @staticmethod
    def operation_host_error(state: Any, host: Any, op_hash: str, *args: Any,
                             **kwargs: Any) -> None:
        try:
            ga = state.get_op_data_for_host(host, op_hash).global_arguments
        except (KeyError, AttributeError):
            return
        if ga.get("_ignore_errors") or ga.get("_continue_on_error"):
            return
        info = _held.pop(host.name, None)
        if info is None:
            return
        conn = {k: ga[k] for k in CONNECTOR_ARGUMENT_KEYS if k in ga and k != "_timeout"}
        with contextlib.suppress(Exception):  # best effort on a host that just failed
            host.run_shell_command(StringCommand(speclock.release_command(info)), _timeout=60,
                                   **conn)


def _register_release_on_error() -> None:
    st = host.state
    if not getattr(st, "_specdec_release_on_error", False):
        st.add_callback_handler(_ReleaseOnError())
        st._specdec_release_on_error = True


@deploy("Deploy lock")
def deploy_lock(recheck: bool = True) -> ReleaseState:
    """Take the lock first: nothing below runs on a host another rollout is changing.

    Returns the host's release state as read now (prepare): the roles plan from it, and with
    ``recheck`` the lock fails the host if it differs once the lock is held.
    """
    planned = host.get_fact(SpecdecReleases)
    if skip_host():
        return planned
    _planned.setdefault(host.name, speclock.new_lock(run_id()))
    _register_release_on_error()
    acquire(name=f"Take the deploy lock ({layout.LOCK_FILE})",
            planned=planned if recheck else None)
    return planned


@deploy("Renew the deploy lock")
def renew_lease() -> None:
    """Before a long phase: renew the lease (a lease found taken over fails the host)."""
    if skip_host():
        return
    renew(name=f"Renew the lease on {layout.LOCK_FILE}")


@deploy("Deploy unlock")
def deploy_unlock() -> None:
    if skip_host():
        return
    release(name="Release the deploy lock")

