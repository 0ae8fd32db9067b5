"""The host-side guard: an unconfirmed release reverts to last-good without the control node.

The control node verifies a release over SSH; if it loses the host (network cut, control node
killed, host rebooted) mid-verification, nothing on the control node can roll back. So activating
a release that is not last-good *arms* the guard on the host (like Mender/RAUC's uncommitted
update): ``/var/lib/specdec/pending`` plus a transient systemd timer. Committing (marking
last-good) or restoring disarms it. Otherwise the guard script runs

* at the deadline (``specdec-guard-deadline.timer``, re-armed before each verification phase),
* at boot (``specdec-guard.service``, before the engine starts: transient timers do not survive
  a reboot, the pending marker does),

and points ``current`` back at ``last-good``, reloads systemd and (at the deadline) restarts the
engine (and a Dynamo frontend member's etcd and frontend units where last-good's differ), logging
a line to ``/var/lib/specdec/guard.log``. The guard and a commit serialise on
``flock``; a commit fails when the guard already reverted (``current`` moved).

Pure text and command builders; nothing here talks to a host.
"""

from __future__ import annotations

import shlex

from specdec.host import layout, release
from specdec.render import sandbox

__all__ = [
    "BOOT_UNIT",
    "BOOT_UNIT_PATH",
    "BOOT_UNIT_WANTS",
    "DEADLINE_UNIT",
    "LOG_FILE",
    "PENDING_FILE",
    "SCRIPT_PATH",
    "arm_command",
    "boot_unit",
    "commit_command",
    "deadline_for",
    "disarm_command",
    "script",
]

PENDING_FILE = f"{layout.STATE_DIR}/pending"
LOG_FILE = f"{layout.STATE_DIR}/guard.log"
SCRIPT_PATH = "/usr/local/libexec/specdec-guard"
BOOT_UNIT = "specdec-guard.service"
BOOT_UNIT_PATH = f"/etc/systemd/system/{BOOT_UNIT}"
BOOT_UNIT_WANTS = f"/etc/systemd/system/multi-user.target.wants/{BOOT_UNIT}"
DEADLINE_UNIT = "specdec-guard-deadline"  # transient: .timer + .service


def script(state_dir: str = layout.STATE_DIR) -> str:
    """The guard script installed on every host (``SCRIPT_PATH``); argument: boot | deadline."""
    return f"""#!/bin/sh
# specdec guard: revert an unconfirmed release to last-good. Installed by specdec; see
# specdec/guard.py. Usage: specdec-guard boot|deadline
set -u
mode=${{1:-deadline}}
cd {shlex.quote(state_dir)} || exit 0
exec 9>>{release.GUARD_LOCK}
flock 9
[ -e pending ] || exit 0
good=$(readlink last-good 2>/dev/null || true)
cur=$(readlink current 2>/dev/null || true)
if [ -n "$good" ] && [ "$good" != "$cur" ]; then
    ln -sfn "$good" current.guard.tmp && mv -T current.guard.tmp current
    systemctl daemon-reload
    # the firewall loads early at boot, before this: the last-good release's table, now
    if [ "$mode" = boot ] && [ -e current/{layout.FIREWALL_SERVICE}.service ]; then
        systemctl --no-block reload-or-restart {layout.FIREWALL_SERVICE}.service || true
    fi
    if [ "$mode" != boot ]; then
        {release.aux_restart('"$cur"', '"$good"')}
        systemctl restart {layout.SERVICE_NAME}.service
    fi
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $mode: reverted ${{cur#releases/}}" \\
        "to last-good ${{good#releases/}} (not confirmed: $(cat pending))" >> guard.log
fi
rm -f pending
"""


def _sandbox() -> list[str]:
    """The guard: root (it switches ``current`` and asks systemd to reload and restart), but
    writes only the state directory and talks only to systemd (AF_UNIX)."""
    return sandbox.admin([], "AF_UNIX", [layout.STATE_DIR])


def boot_unit() -> str:
    """``specdec-guard.service``: the guard at boot, before the engine and the release's other
    units start."""
    before = " ".join(f"{u}.service" for u in (layout.SERVICE_NAME, *layout.AUX_SERVICES)
                      if u != layout.FIREWALL_SERVICE)
    box = "\n".join(_sandbox())
    return f"""# Managed by specdec: reverts an unconfirmed release at boot (see {SCRIPT_PATH}).
[Unit]
Description=specdec guard: revert an unconfirmed engine release to last-good
Before={before}
ConditionPathExists={PENDING_FILE}

[Service]
Type=oneshot
ExecStart={SCRIPT_PATH} boot
{box}

[Install]
WantedBy=multi-user.target
"""


def _stop_timer() -> str:
    return (f"systemctl stop {DEADLINE_UNIT}.timer {DEADLINE_UNIT}.service >/dev/null 2>&1; "
            f"systemctl reset-failed {DEADLINE_UNIT}.timer {DEADLINE_UNIT}.service "
            f">/dev/null 2>&1; true")


def deadline_for(phase_seconds: float) -> int:
    """The guard's deadline for a phase that may take ``phase_seconds``: with a margin for the
    control node's own polling and SSH round trips."""
    return int(phase_seconds + max(30.0, phase_seconds / 4))


def arm_command(release_id: str, seconds: int) -> str:
    """Mark ``release_id`` unconfirmed and (re)start the deadline timer: ``seconds`` from now."""
    note = shlex.quote(f"release={release_id} deadline={int(seconds)}s")
    pending = shlex.quote(PENDING_FILE)
    props = " ".join(f"-p {shlex.quote(p)}" for p in _sandbox())
    return (
        f"printf '%s\\n' {note} > {pending}.tmp && mv -f {pending}.tmp {pending} && "
        f"{{ {_stop_timer()}; }} && "
        f"systemd-run --quiet --unit={DEADLINE_UNIT} --on-active={int(seconds)}s "
        f"--timer-property=AccuracySec=1s {props} {SCRIPT_PATH} deadline"
    )


def disarm_command() -> str:
    """Nothing is unconfirmed any more: remove the marker and the deadline timer."""
    return f"rm -f {shlex.quote(PENDING_FILE)}; {_stop_timer()}"


def commit_command(release_id: str, state_dir: str = layout.STATE_DIR) -> str:
    """Mark ``release_id`` last-good and disarm, under the guard's lock; fails (exit 3) when
    ``current`` is not ``release_id`` any more (the guard reverted it)."""
    target = shlex.quote(f"releases/{release_id}")
    inner = (
        f"cd {shlex.quote(state_dir)} && "
        f"if [ \"$(readlink current)\" != {target} ]; then "
        f"echo \"current is $(readlink current), not {release_id}: "
        f"$(tail -n 1 guard.log 2>/dev/null)\" >&2; exit 3; fi && "
        f"{release.switch(state_dir + '/last-good', release_id, 'commit')} && rm -f pending && "
        f"{_stop_timer()}"
    )
    lock = shlex.quote(f"{state_dir}/{release.GUARD_LOCK}")
    return f"flock -w {release.FLOCK_WAIT_S} {lock} sh -c {shlex.quote(inner)}"
