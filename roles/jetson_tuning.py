"""Jetson performance mode: ``nvpmodel -m 0`` (MAXN) and ``jetson_clocks``; opt-out by data."""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.facts.server import Which

from roles.common import HostPlan
from roles.facts import NvpmodelMode
from specdec import layout

__all__ = ["CLOCKS_MARKER", "TUNING_JSON", "clocks", "jetson_tuning", "power_mode"]

TUNING_JSON = f"{layout.STATE_DIR}/tuning.json"
# /run is a tmpfs: the marker disappears on reboot, exactly when jetson_clocks must run again.
CLOCKS_MARKER = "/run/specdec/jetson_clocks.done"


@operation()
def power_mode():
    """Switch to nvpmodel mode 0 (MAXN) unless already there; record the previous mode once."""
    mode = host.get_fact(NvpmodelMode)
    if mode is None:
        host.noop("nvpmodel is not installed; power mode left as is")
        return
    first = mode.splitlines()[0]
    if "MAXN" in first.upper():
        host.noop(f"power mode is already MAXN ({first.strip()})")
        return
    if not host.get_fact(File, path=TUNING_JSON):
        record = json.dumps({"previous_nvpmodel": first.strip()}, sort_keys=True)
        yield f"printf '%s\\n' {shlex.quote(record)} > {TUNING_JSON}"
    # stdin from /dev/null: nvpmodel may ask whether to reboot now; the answer is no.
    yield "nvpmodel -m 0 </dev/null"


@operation()
def clocks():
    """Run jetson_clocks once per boot (absent binary: skip)."""
    if not host.get_fact(Which, command="jetson_clocks"):
        host.noop("jetson_clocks is not installed; clocks left as is")
        return
    if host.get_fact(File, path=CLOCKS_MARKER):
        host.noop("jetson_clocks already applied this boot")
        return
    yield f"jetson_clocks && mkdir -p /run/specdec && touch {CLOCKS_MARKER}"


@deploy("Jetson tuning")
def jetson_tuning(hp: HostPlan) -> None:
    """MAXN + max clocks on Jetsons (``specdec_jetson_tuning: false`` turns it off)."""
    if not hp.plan.jetson_tuning:
        return
    power_mode(name="Set nvpmodel mode 0 (MAXN)")
    clocks(name="Run jetson_clocks")
