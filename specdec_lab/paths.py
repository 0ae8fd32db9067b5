"""Where the lab keeps things on the control node (never under /tmp: nspawn mounts its own).

Each lab instance has its own directory under `LAB_ROOT` (see `specdec_lab.instance`); the
caches below are shared by every instance and written only under a lock.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CACHE_DIR", "LAB_ROOT", "NSPAWN_LOCK", "NSPAWN_RUN", "REGISTRY_DIR"]

LAB_ROOT = Path("/var/lib/specdec-lab")  # <instance>/ below it
CACHE_DIR = Path("/var/cache/specdec-lab")  # rootfs builds, OCI layout, .debs
REGISTRY_DIR = CACHE_DIR / "registry"  # storage shared by every host's registry process
# nspawn keeps mount propagation dirs here; the lab mounts a tmpfs on it (shared by instances).
NSPAWN_RUN = Path("/run/systemd/nspawn")
NSPAWN_LOCK = LAB_ROOT / "nspawn.lock"  # held while that tmpfs is mounted or unmounted
