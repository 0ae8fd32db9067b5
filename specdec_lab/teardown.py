"""Tear a lab instance down: exactly what its state records, and only entries that pass
`specdec_lab.state.check_state`.

A refused host entry is left alone as a whole (its processes are not signalled, its mounts,
namespace, link and files not touched): the rest of the instance is removed, and the state
file stays so that nothing is forgotten. The nspawn tmpfs is shared by the instances: it is
unmounted only when no other lab (and no systemd-nspawn at all) is left using it.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec_lab import cgroup, hubsvc, paths
from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.state import HostRecord, check_state, shared_lock
from specdec_lab.system import (
    Proc,
    cmdline,
    first_child,
    mount_at,
    mounts,
    proc_alive,
    run,
    stop_process,
)

__all__ = ["NSPAWN_TMPFS", "nspawn_running", "release_nspawn_run", "teardown"]

NSPAWN_TMPFS = "specdec-lab-nspawn"  # the source name of the lab's tmpfs on NSPAWN_RUN
NETNS_DIR = Path("/run/netns")
LINKS_DIR = Path("/sys/class/net")
Log = Callable[[str], None]


def _stop_host(r: HostRecord) -> None:
    loop = r.nspawn
    if proc_alive(loop):
        assert loop is not None
        # boot loop → nspawn → the container's PID 1 (killing it ends its PID namespace);
        # the child counts only if it is this host's nspawn.
        nspawn = leader = None
        child = first_child(loop.pid)
        argv = cmdline(child) if child else []
        if child and argv and argv[0].endswith("systemd-nspawn") and \
                f"--directory={Instance(r.spec.instance).host_dir(r.name) / 'root'}" in argv:
            nspawn = Proc(child)
            pid1 = first_child(child)
            leader = Proc(pid1) if pid1 else None
        # SIGTERM makes nspawn power the container off cleanly (units, Docker stop).
        stop_process(loop, grace=30)
        for p in (nspawn, leader):
            if p is not None and proc_alive(p):
                stop_process(p, grace=5)
    stop_process(r.registry, grace=5)
    stop_process(r.link, grace=5)


def _unmount_root(r: HostRecord) -> str | None:
    if r.root is None:
        return None
    m = mount_at(r.root)
    if m is None:
        return None
    if m.fstype != "overlay" or m.source != r.spec.netns:
        return f"{r.name}: {r.root} holds a {m.fstype} mount of {m.source!r}, not the lab's"
    if run(["umount", str(r.root)], f"umount {r.root}", check=False).returncode != 0:
        run(["umount", "-l", str(r.root)], f"umount -l {r.root}", check=False)
    return f"{r.name}: {r.root} is still mounted" if mount_at(r.root) else None


def _delete_net(r: HostRecord) -> str | None:
    if r.veth and (LINKS_DIR / r.veth).exists():
        run(["ip", "link", "del", r.veth], f"ip link del {r.veth}", check=False)
    if r.netns and (NETNS_DIR / r.netns).exists():
        run(["ip", "netns", "del", r.netns], f"ip netns del {r.netns}", check=False)
        if (NETNS_DIR / r.netns).exists():
            return f"{r.name}: network namespace {r.netns} remains"
    return None


def _remove_dir(r: HostRecord) -> str | None:
    d = str(r.dir)
    busy = [m.point for m in mounts() if m.point == d or m.point.startswith(d + "/")]
    if busy:
        return f"{r.name}: {busy[0]} is still mounted, {d} kept"
    if r.dir.is_dir() and not r.dir.is_symlink():
        shutil.rmtree(r.dir, ignore_errors=True)
    return None


def nspawn_running() -> bool:
    """Whether any systemd-nspawn runs on this machine (any lab's, or anyone's)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            argv = cmdline(int(proc.name))
            if argv and Path(argv[0]).name == "systemd-nspawn":
                return True
    return False


def release_nspawn_run(inst: Instance) -> None:
    """Unmount the lab's tmpfs on /run/systemd/nspawn when nothing else can be using it."""
    with shared_lock(paths.NSPAWN_LOCK):
        m = mount_at(paths.NSPAWN_RUN)
        if m is None or m.fstype != "tmpfs" or m.source != NSPAWN_TMPFS:
            return
        if inst.others_up() or inst.legacy_state() or nspawn_running():
            return
        run(["umount", str(paths.NSPAWN_RUN)], f"umount {paths.NSPAWN_RUN}", check=False)


def teardown(inst: Instance, state: dict[str, Any], log: Log) -> list[str]:
    """Remove what ``state`` records and passes the checks; returns what remains, one line
    each (refused entries first; empty = clean, and then the state file is gone)."""
    try:
        records, problems = check_state(inst, state)
    except LabError as exc:
        return [str(exc)]
    for line in problems:
        log(line)
    hub = hubsvc.stop(inst, state)  # the lab's Hub (control side)
    if hub:
        problems.append(hub)
    threads = [threading.Thread(target=_stop_host, args=(r,)) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in records:
        running = [f"{r.name}: {key} process {p.pid} still running"
                   for key, p in (("nspawn", r.nspawn), ("registry", r.registry),
                                  ("link", r.link))
                   if p is not None and proc_alive(p)]
        if running:  # its root and namespace are still in use: leave them
            problems += running
            continue
        left = [p for p in (_unmount_root(r), _delete_net(r),
                            cgroup.remove(cgroup.host_cgroup(r.netns)) if r.netns else None)
                if p]
        left = left or [p for p in (_remove_dir(r),) if p]
        problems += left
        log(f"{r.name}: {'left: ' + '; '.join(left) if left else 'removed'}")
    if not problems:
        inst.state_file.unlink(missing_ok=True)
    release_nspawn_run(inst)
    return problems
