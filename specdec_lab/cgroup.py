"""Each lab host in a control group of its own, as each device has its own machine.

Without systemd on the control node, systemd-nspawn ``--keep-unit`` runs a container in the
cgroup it was started from, and the container's cgroup namespace is rooted there: hosts started
from one cgroup see one tree, so their units of one name (``specdec-engine.service``) are one
cgroup. systemd's per-unit IP firewall is a BPF program on that cgroup
(systemd.resource-control(5), ``IPAddressDeny=``), and a packet passes only if every program
attached allows it: a docker host's engine unit (``IPAddressDeny=any``) would then cut a native
host's engine off its own loopback. `boot` starts each host in ``specdec-lab/<netns>`` under the
machine's cgroup2 mount; `remove` deletes that subtree once the host is down.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["ENV", "ENTER", "host_cgroup", "prepare", "remove"]

ROOT_NAME = "specdec-lab"
ENV = "SPECDEC_LAB_CGROUP"
# The boot loop's first words: into the host's cgroup (its children, nspawn, follow).
ENTER = f'[ -z "${ENV}" ] || echo $$ > "${ENV}/cgroup.procs" || exit 1; '


def _cgroup2_mount() -> Path | None:
    """Where the unified (v2) hierarchy is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified
    on a hybrid machine."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    points = [ln.split()[1] for ln in lines if len(ln.split()) > 2 and ln.split()[2] == "cgroup2"]
    return Path(sorted(points, key=len)[0]) if points else None


def host_cgroup(netns: str) -> Path | None:
    """The host's cgroup (None without a cgroup2 mount: the host shares its parent's)."""
    mnt = _cgroup2_mount()
    return mnt / ROOT_NAME / netns if mnt is not None else None


def prepare(path: Path | None) -> dict[str, str]:
    """Create ``path``; the environment that makes the boot loop (`ENTER`) move into it."""
    if path is None:
        return {}
    path.mkdir(parents=True, exist_ok=True)
    return {ENV: str(path)}


def remove(path: Path | None) -> str | None:
    """Remove the host's cgroup subtree, deepest first; a line when some of it remains (a
    process still in it)."""
    if path is None or not path.is_dir():
        return None
    dirs = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for d in [*dirs, path]:
        with contextlib.suppress(OSError):
            d.rmdir()
    if path.exists():
        return f"cgroup {path} remains (a process is still in it)"
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the lab's root, when this was the last host
    return None
