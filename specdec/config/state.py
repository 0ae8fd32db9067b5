"""Where the control node keeps an inventory's state: one stated directory per inventory, the
same whichever directory specdec or pyinfra runs from.

The state is what later runs read back: the fact cache and the last verified baselines
(``cache/<host>/``), the marks `specdec watch` leaves (``cache/<host>/reverify.json``) and the
tune cache (``tune-cache/``). Reports are not state: they go where the user asks (``--reports``,
default ``./reports``). The directory is, first found:

1. ``--state DIR`` (`specdec plan`, `rollout`, `watch`), which `specdec rollout` passes on to
   pyinfra as ``$SPECDEC_INVENTORY_STATE``;
2. ``$SPECDEC_INVENTORY_STATE``;
3. ``<root>/inventories/<name>-<12 hex of the inventory file's absolute path>``, the root
   ``$SPECDEC_STATE_DIR``, else ``$XDG_STATE_HOME/specdec``, else ``~/.local/state/specdec``
   (the XDG base directory spec's state home). With no inventory file: ``<root>/default``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["INVENTORY_STATE_ENV", "STATE_ENV", "for_inventory", "root", "use"]

STATE_ENV = "SPECDEC_STATE_DIR"  # the root of every inventory's state (and generated keys)
INVENTORY_STATE_ENV = "SPECDEC_INVENTORY_STATE"  # one inventory's state directory
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def root(env: Mapping[str, str] | None = None) -> Path:
    """``$SPECDEC_STATE_DIR``, else ``$XDG_STATE_HOME/specdec``, else ``~/.local/state/specdec``."""
    env = os.environ if env is None else env
    explicit = env.get(STATE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_STATE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "specdec"


def for_inventory(inventory: str | Path | None, explicit: str | Path | None = None,
                  env: Mapping[str, str] | None = None) -> Path:
    """The state directory of ``inventory`` by the rules of the module doc (absolute)."""
    env = os.environ if env is None else env
    given = explicit or env.get(INVENTORY_STATE_ENV, "").strip()
    if given:
        return Path(given).expanduser().resolve()
    if inventory is None:
        return root(env) / "default"
    path = Path(inventory).expanduser().resolve()
    tag = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return root(env) / "inventories" / f"{_UNSAFE.sub('_', path.stem)[:40]}-{tag}"


def use(inventory: str | Path, explicit: str | Path | None = None) -> Path:
    """The state directory of ``inventory`` for this process and what it starts (pyinfra):
    set as ``$SPECDEC_INVENTORY_STATE``."""
    path = for_inventory(inventory, explicit)
    os.environ[INVENTORY_STATE_ENV] = str(path)
    return path
