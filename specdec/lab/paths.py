"""Where the lab keeps things on the control node (never under /tmp: nspawn mounts its own)."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CACHE_DIR",
    "HOSTS_DIR",
    "KEY_FILE",
    "LOCK_FILE",
    "REGISTRY_DIR",
    "STATE_DIR",
    "STATE_FILE",
]

STATE_DIR = Path("/var/lib/specdec-lab")
STATE_FILE = STATE_DIR / "state.json"
LOCK_FILE = STATE_DIR / "lock"
HOSTS_DIR = STATE_DIR / "hosts"
KEY_FILE = STATE_DIR / "id_ed25519"  # the lab's SSH key (public half: KEY_FILE + ".pub")
CACHE_DIR = Path("/var/cache/specdec-lab")
REGISTRY_DIR = CACHE_DIR / "registry"  # storage shared by every host's registry process
