"""The fleet simulation's measured inputs: one JSON the measuring benchmarks write and
``fleet_sim.py`` reads, so its per-device figures are derived, not pasted.

Sections (each with the command and commit that wrote it):

* ``tune``: per device (catalog id), the median engine restarts, tune and gate benchmark device
  seconds of a host that tunes — ``benchmarks/oracle_gap.py --write-inputs FILE`` (the chain
  world without per-prompt spread, over every tuned lab host of the device, trial and seed);
* ``control_node``: control-node CPU seconds per host of a rollout at the largest size —
  ``benchmarks/fleet_scale.py --write-inputs FILE`` (the lab, many hosts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT", "WRITERS", "commit", "load", "update"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "benchmarks" / "fleet_inputs.json"
WRITERS = {"tune": "python3 benchmarks/oracle_gap.py --write-inputs benchmarks/fleet_inputs.json",
           "control_node": "flock /run/specdec-heavy.lock python3 benchmarks/fleet_scale.py "
                           "--write-inputs benchmarks/fleet_inputs.json"}


def commit() -> str:
    """This checkout's commit, ``-dirty`` when it has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def load(path: Path) -> dict[str, Any]:
    """The inputs file ({} when it does not exist); ValueError naming the file if malformed."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON inputs file ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def update(path: Path, section: str, data: dict[str, Any], at: str) -> None:
    """Write one section (with the command and ``at``, the commit the run started on:
    `commit`), keeping the others."""
    cur = load(path)
    cur[section] = {"command": " ".join(["python3", *sys.argv]), "commit": at, **data}
    path.write_text(json.dumps(cur, indent=1, sort_keys=True) + "\n")
