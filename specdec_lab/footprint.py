"""What each lab host costs this machine: the proportional set size (PSS, so shared pages are
split among their users, from ``/proc/PID/smaps_rollup``) of every process in the host's
network namespace (its systemd, sshd, Docker, engine, the site registry on the registry host)
plus its link emulator, summed per host."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["netns_pss_kib", "pss_kib"]


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def netns_pss_kib(netns: Iterable[str], extra: Mapping[str, Iterable[int]] | None = None,
                  ) -> dict[str, int]:
    """PSS in KiB per named network namespace (``/run/netns/NAME``), plus ``extra`` PIDs per
    name (processes of the host that live in the control node's namespace)."""
    by_inode: dict[int, str] = {}
    for name in netns:
        try:
            by_inode[os.stat(f"/run/netns/{name}").st_ino] = name
        except OSError:
            continue
    out = dict.fromkeys(by_inode.values(), 0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ino = os.stat(f"/proc/{entry.name}/ns/net").st_ino
        except OSError:
            continue
        owner = by_inode.get(ino)
        if owner is not None:
            out[owner] += pss_kib(int(entry.name))
    for name, pids in (extra or {}).items():
        if name in out:
            out[name] += sum(pss_kib(p) for p in pids)
    return out
