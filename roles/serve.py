"""The engine release: files in releases/<id>/, the unit symlink, the atomic `current` switch,
daemon-reload/restart only on change, and pruning to the last `layout.KEEP_RELEASES`.

The desired release honours the host's recorded verification decision: when
``releases/<candidate>/decision.json`` says ``{"outcome": "disabled", "active": "<id>"}``, the
desired release is that (baseline) one, so a re-run does not undo a rollback; ``"tuned"`` names
the release the tune phase kept for a ``k: auto`` plan, so a re-run planned without the control
node's tune cache still runs the verified release. A ``verify`` role
slots in after `serve` and reads `ServeResult`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from io import StringIO

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from specdec.host import guard, layout, release
from specdec.render import firewall
from specdec.render.files import Rendered
from specdec.roles.common import HostPlan
from specdec.roles.facts import FirewallLive, SpecdecReleases
from specdec.roles.secrets import SecretOps

__all__ = ["ServeResult", "activate", "firewall_restored", "prune_releases", "serve"]

UNIT_FILE = f"{layout.SERVICE_NAME}.service"
UNIT_TARGET = f"{layout.CURRENT}/{UNIT_FILE}"


@dataclass(frozen=True)
class ServeResult:
    candidate: str  # the plan's release id
    desired: str  # what `current` should point at (candidate, or the recorded baseline)
    changed: tuple[OperationMeta, ...]  # ops whose change restarted the engine


@operation()
def activate(release_id: str, guard_seconds: int):
    """Point /var/lib/specdec/current at releases/<release_id> atomically, if it does not yet;
    arm the host's guard when that is not the last-good release (verify confirms or restores).

    + release_id: the release to run
    + guard_seconds: the guard reverts to last-good unless confirmed within this many seconds
    """
    state = host.get_fact(SpecdecReleases)
    if state.current == release_id:
        host.noop(f"{layout.CURRENT} already points at {release_id}")
        return
    if state.last_good is not None and state.last_good != release_id:
        yield guard.arm_command(release_id, guard_seconds)
    yield release.activate(release_id)


@operation()
def firewall_restored():
    """The running release's table, live: reloaded when something flushed, deleted or changed
    it since it was loaded (``nft flush ruleset``, another tool's ruleset), checked on every
    run (`specdec.render.firewall.live_check`)."""
    state = host.get_fact(FirewallLive)
    if state != "gone":
        host.noop("table inet specdec is the one the release loaded" if state == "ok"
                  else "no release firewall on this host yet")
        return
    yield f"systemctl reload-or-restart {layout.FIREWALL_SERVICE}.service"


@operation(is_idempotent=False)
def restart_aux(old: str, new: str):
    """Restart the auxiliary units (etcd, Dynamo frontend) whose files differ between two
    release directories (`specdec.host.release.aux_restart`).

    + old: the release directory that ran before
    + new: the release directory that runs now
    """
    yield release.aux_restart(shlex.quote(old), shlex.quote(new))


@deploy("Install the release guard")
def install_guard():
    """The guard script and its boot unit (see specdec/guard.py), enabled."""
    files.directory(name="Ensure /usr/local/libexec", path="/usr/local/libexec", present=True)
    files.put(name=f"Upload {guard.SCRIPT_PATH}", src=StringIO(guard.script()),
              dest=guard.SCRIPT_PATH, user="root", group="root", mode="0755")
    unit = files.put(name=f"Upload {guard.BOOT_UNIT_PATH}", src=StringIO(guard.boot_unit()),
                     dest=guard.BOOT_UNIT_PATH, user="root", group="root", mode="0644")
    # Enabled as `systemctl enable` does it (pyinfra's SystemdEnabled fact cannot see a unit
    # that is not loaded, which this one is not while nothing is pending).
    wants = files.link(name=f"Enable {guard.BOOT_UNIT}", path=guard.BOOT_UNIT_WANTS,
                       target=guard.BOOT_UNIT_PATH, force=True)
    systemd.daemon_reload(name="Reload systemd (guard unit changed)",
                          _if=any_changed(unit, wants))


@operation()
def prune_releases(keep: int, protect: Sequence[str]):
    """Delete all but the ``keep`` newest releases; never current, last-good or ``protect``.

    + keep: how many unprotected releases to keep
    + protect: release ids that are never deleted
    """
    state = host.get_fact(SpecdecReleases)
    doomed = release.prune_doomed(state, keep, protect)
    if not doomed:
        host.noop(f"{len(state.releases)} release(s) kept")
        return
    yield release.remove(doomed)


def _upload_release(r: Rendered) -> OperationMeta | None:
    """Upload a release's files; returns the unit's upload op."""
    files.directory(
        name=f"Ensure {r.release_dir}", path=r.release_dir, user="root", group="root",
        mode="0755",
    )
    unit_op = None
    for f in host.loop(r.release_files):
        op = files.put(
            name=f"Upload {f.path}",
            src=StringIO(f.content),
            dest=f.path,
            user=f.owner,
            group=f.group,
            mode=f.mode,
        )
        if f.path.endswith("/" + UNIT_FILE):
            unit_op = op
    return unit_op


@deploy("Serve")
def serve(hp: HostPlan, restart_on: Sequence[OperationMeta | None] = (),
          recorded: release.ReleaseState | None = None,
          secrets_changed: SecretOps | None = None) -> ServeResult:
    """Install and run the desired release.

    + hp: the host's plan and renderings
    + restart_on: earlier ops (e.g. the image digest) whose change also restarts the engine
    + recorded: the release state to plan from (`deploy_lock`'s, re-checked under the lock);
      read here when not given
    + secrets_changed: the secret files' ops (`SecretOps`): a change restarts the units that
      load them (they are read at start): the group's certificates the engine's, the API's
      keys and certificate the proxy
    """
    candidate = hp.rendered.release_id
    if recorded is None:
        recorded = host.get_fact(SpecdecReleases)
    desired, to_upload = _desired(hp, recorded)
    files.directory(
        name=f"Ensure {layout.RELEASES_DIR}", path=layout.RELEASES_DIR, user="root",
        group="root", mode="0755",
    )
    unit_op = _upload_release(to_upload) if to_upload is not None else None
    link, aux_links = _link_units(hp)
    dropin = _nftables_dropin()
    install_guard()
    switch = activate(name=f"Activate release {desired} ({layout.CURRENT})", release_id=desired,
                      guard_seconds=guard.deadline_for(hp.plan.health_timeout_s))

    unit_changes = [op for op in (unit_op, link, switch, *aux_links) if op is not None]
    systemd.daemon_reload(
        name="Reload systemd (unit changed)", _if=any_changed(*unit_changes, dropin),
    )
    secrets = secrets_changed or SecretOps((), ())
    if hp.rendered.other_units:
        _run_aux(hp, recorded, desired, [switch, *aux_links], secrets)
    firewall_restored(name=f"Assert the live firewall (table inet {firewall.TABLE})")
    restart_ops = unit_changes + [op for op in (*restart_on, *secrets.engine) if op is not None]
    _run_engine(restart_ops)
    prune_releases(
        name=f"Prune {layout.RELEASES_DIR} to {layout.KEEP_RELEASES} releases",
        keep=layout.KEEP_RELEASES,
        protect=sorted({candidate, desired}),
    )
    return ServeResult(candidate, desired, tuple(restart_ops))


def _desired(hp: HostPlan, recorded: release.ReleaseState) -> tuple[str, Rendered | None]:
    """The release to run and the rendering to upload for it (None: it is on the host as an
    older planner made it)."""
    candidate = hp.rendered.release_id
    desired = release.desired_release(candidate, recorded)
    if desired == candidate:
        return desired, hp.rendered
    # Verified before: speculation did not pay (the baseline runs instead), or the tune
    # phase kept another release of this plan (its tuned k).
    if hp.baseline is not None and hp.baseline.release_id == desired:
        return desired, hp.baseline
    if desired in recorded.releases:
        return desired, None  # recorded by an older planner: run it as it is
    return candidate, hp.rendered  # the recorded release is gone: start over with the candidate


def _link_units(hp: HostPlan) -> tuple[OperationMeta, list[OperationMeta]]:
    """The engine unit's link to the current release, and the release's other units' (a
    serving group's frontend member: etcd and the frontend), linked the same way."""
    link = files.link(
        name=f"Link {layout.UNIT_PATH} to {UNIT_TARGET}",
        path=layout.UNIT_PATH,
        target=UNIT_TARGET,
        force=True,
    )
    aux_links = [files.link(name=f"Link /etc/systemd/system/{u} to {layout.CURRENT}/{u}",
                            path=f"/etc/systemd/system/{u}", target=f"{layout.CURRENT}/{u}",
                            force=True) for u in host.loop(list(hp.rendered.other_units))]
    return link, aux_links


def _nftables_dropin() -> OperationMeta:
    """nftables.service's drop-in: its start, restart and reload reload our table after it."""
    files.directory(name="Ensure /etc/systemd/system/nftables.service.d",
                    path="/etc/systemd/system/nftables.service.d", present=True)
    return files.put(name=f"Upload {firewall.NFTABLES_DROPIN}", src=StringIO(firewall.dropin()),
                     dest=firewall.NFTABLES_DROPIN, user="root", group="root", mode="0644")


def _run_aux(hp: HostPlan, recorded: release.ReleaseState, desired: str,
             changed: Sequence[OperationMeta], secrets: SecretOps) -> None:
    """The other units: restarted where the release changed them (``changed``: the switch and
    their links) or a secret they load changed, and running."""
    aux = list(hp.rendered.other_units)
    before = layout.release_dir(recorded.current) if recorded.current else "/nonexistent"
    restart_aux(name=f"Restart {', '.join(aux)} where the release changed them",
                old=before, new=layout.release_dir(desired),
                _if=any_changed(*changed))
    for u in host.loop(aux):
        secret_ops = list(secrets.proxy if u == f"{layout.PROXY_SERVICE}.service" else
                          () if u == f"{layout.FIREWALL_SERVICE}.service" else secrets.engine)
        if secret_ops:
            systemd.service(name=f"Restart {u} (a secret it loads changed)", service=u,
                            running=True, restarted=True, _if=any_changed(*secret_ops))
        systemd.service(name=f"Ensure {u} is running and enabled", service=u, running=True,
                        enabled=True)


def _run_engine(restart_ops: Sequence[OperationMeta]) -> None:
    """The engine unit: restarted when ``restart_ops`` changed anything, running and enabled."""
    systemd.service(
        name=f"Restart {layout.SERVICE_NAME} (release, unit or image changed)",
        service=f"{layout.SERVICE_NAME}.service",
        running=True,
        restarted=True,
        _if=any_changed(*restart_ops),
    )
    systemd.service(
        name=f"Ensure {layout.SERVICE_NAME} is running and enabled",
        service=f"{layout.SERVICE_NAME}.service",
        running=True,
        enabled=True,
    )
