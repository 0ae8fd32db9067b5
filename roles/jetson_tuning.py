"""Jetson performance: the fastest nvpmodel mode, chosen BY NAME, then ``jetson_clocks``.

Mode ids differ per module and L4T release (JetPack 6.2 on an Orin Nano: 15W is id 0 and
MAXN_SUPER id 2; on an AGX Orin MAXN is 0), so the mode is looked up in the host's own
``/etc/nvpmodel.conf`` (MAXN_SUPER, else MAXN), set by the id found there and read back with
``nvpmodel -q``. nvpmodel makes some switches only at boot (a different GPU power-gating mask:
"Reboot required for changing to this power mode"); then the role runs ``nvpmodel -m ID
--force`` detached, waits for the host as pyinfra's ``server.reboot`` does (reconnect until the
boot id changed) and checks the mode again. ``jetson_clocks`` runs once per boot (a marker in
/run) and after a mode change (a new mode resets the clocks). Every change is recorded in
/var/lib/specdec/tuning.json (mode, id, previous mode, reboot, catalog bandwidth); the verify
step reports the live mode and clocks. A host already in its fastest mode gets no command.
"""

from __future__ import annotations

import json
import shlex
import time
from datetime import UTC, datetime
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.facts.files import File
from pyinfra.facts.server import Which

from specdec.catalog import load_catalog
from specdec.host import layout
from specdec.host.power import PowerMode, choose_target, mode_bandwidth, parse_query
from specdec.roles.common import HostPlan
from specdec.roles.facts import BootId, JetsonPower
from specdec.roles.lock import connector_args, fail_command, host_run

__all__ = ["CLOCKS_MARKER", "TUNING_JSON", "clocks", "jetson_tuning", "power_mode"]

TUNING_JSON = f"{layout.STATE_DIR}/tuning.json"
# /run is a tmpfs: the marker disappears on reboot, exactly when jetson_clocks must run again.
CLOCKS_MARKER = "/run/specdec/jetson_clocks.done"
REBOOT_DELAY_S = 5.0
REBOOT_TIMEOUT_S = 600.0


def _label(mode: tuple[str, int] | None) -> str:
    return f"{mode[0]} (id {mode[1]})" if mode else "unknown"


def _wait_for_reboot(state: Any, host: Any, before: str | None, delay: float,  # noqa: ARG001
                     timeout: float) -> bool:
    """pyinfra's server.reboot wait, with the boot id as the proof of a new boot. (pyinfra
    passes ``state`` and ``host`` to a callback whose parameters have these names.)"""
    time.sleep(delay)
    host.disconnect()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        host.connect(show_errors=False)
        if host.connected:
            now = host.get_fact(BootId)
            if now and now != before:
                return True
        time.sleep(1.0)
    host.log_styled(f"did not come back from the reboot within {timeout:g} s", fg="red")
    return False


@operation(is_idempotent=False)
def power_mode(device: str = "", reboot_delay: float = REBOOT_DELAY_S,
               reboot_timeout: float = REBOOT_TIMEOUT_S):
    """Switch to MAXN_SUPER, else MAXN, by the id the host's /etc/nvpmodel.conf gives it.

    + device: the catalog device (for the bandwidth recorded with the mode)
    + reboot_delay, reboot_timeout: seconds before reconnecting, and at most, after a reboot
    """
    state = host.get_fact(JetsonPower)
    if state is None or state.conf is None:
        host.noop("no /etc/nvpmodel.conf (nvpmodel not installed); power mode left as is")
        return
    target = choose_target(state.conf)
    if target is None:
        host.noop(f"/etc/nvpmodel.conf has no MAXN_SUPER or MAXN mode (modes: "
                  f"{', '.join(state.conf.names())}); left at {_label(state.current)}")
        return
    want = (target.name, target.id)
    if state.current == want:
        host.noop(f"power mode is already {_label(want)}")
        return
    if not host.state.is_executing:
        host.noop(f"nvpmodel: {_label(state.current)} -> {_label(want)}")
        return
    yield from _switch(target, state.current, device, reboot_delay, reboot_timeout)


def _switch(target: PowerMode, before: tuple[str, int] | None, device_id: str, delay: float,
            timeout: float) -> Any:
    conn = connector_args()
    want = (target.name, target.id)
    # Declines a reboot prompt: a switch that needs a boot is made below, under our control.
    _, out = host_run(f"echo no | nvpmodel -m {target.id}", conn, 120)
    _, q = host_run("nvpmodel -q", conn, 60)
    rebooted = False
    if parse_query("\n".join(q)) != want:
        if not any("Reboot required" in line for line in out):
            last = next((ln for ln in reversed(out) if ln.strip()), "no output")
            yield fail_command(f"{host.name}: nvpmodel -m {target.id} ({target.name}) left the "
                               f"mode at {_label(parse_query(chr(10).join(q)))}: {last}")
            return
        boot = host.get_fact(BootId)
        host.noop(f"nvpmodel: {target.name} needs a reboot; rebooting {host.name}")
        yield (f"nohup setsid sh -c 'sleep 1; nvpmodel -m {target.id} --force' "
               "</dev/null >/dev/null 2>&1 &")
        yield FunctionCommand(_wait_for_reboot, (boot, delay, timeout), {})
        rebooted = True
        _, q = host_run("nvpmodel -q", conn, 60)
        if parse_query("\n".join(q)) != want:
            yield fail_command(f"{host.name}: after the reboot nvpmodel reports "
                               f"{_label(parse_query(chr(10).join(q)))}, not {_label(want)}")
            return
    device = load_catalog().devices.get(device_id)
    bw = mode_bandwidth(device, target)[0] if device is not None else None
    record = {"power_mode": target.name, "power_mode_id": target.id,
              "previous": list(before) if before else None, "rebooted": rebooted,
              "bandwidth_gbs": bw, "time": datetime.now(UTC).isoformat(timespec="seconds")}
    text = shlex.quote(json.dumps(record, sort_keys=True))
    yield f"install -d -m 0755 {layout.STATE_DIR} && printf '%s\\n' {text} > {TUNING_JSON}"


@operation()
def clocks(after_mode_change: bool = False):
    """Run jetson_clocks once per boot, and after a mode change (absent binary: skip)."""
    if not host.get_fact(Which, command="jetson_clocks"):
        host.noop("jetson_clocks is not installed; clocks left as is")
        return
    if host.get_fact(File, path=CLOCKS_MARKER) and not after_mode_change:
        host.noop("jetson_clocks already applied this boot")
        return
    yield f"jetson_clocks && mkdir -p /run/specdec && touch {CLOCKS_MARKER}"


@deploy("Jetson tuning")
def jetson_tuning(hp: HostPlan) -> None:
    """The fastest power mode + max clocks on Jetsons (``specdec_jetson_tuning: false``: off)."""
    if not hp.plan.jetson_tuning:
        return
    state = host.get_fact(JetsonPower)
    target = choose_target(state.conf) if state is not None and state.conf else None
    changing = target is not None and state is not None and \
        state.current != (target.name, target.id)
    power_mode(name="Set the fastest nvpmodel mode (MAXN_SUPER, else MAXN) by name",
               device=hp.plan.device, reboot_delay=REBOOT_DELAY_S,
               reboot_timeout=REBOOT_TIMEOUT_S)
    clocks(name="Run jetson_clocks", after_mode_change=changing)
