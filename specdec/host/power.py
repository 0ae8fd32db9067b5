"""Jetson power modes (pure parsing): ``/etc/nvpmodel.conf``, ``nvpmodel -q``, the nvpmodel
status file, ``jetson_clocks --show``, and what they mean for a catalog device.

Mode ids differ per module and L4T release (an Orin Nano on a super flash has 15W at id 0 and
MAXN_SUPER at id 2; an AGX Orin has MAXN at 0), so a mode is chosen by NAME from the host's own
conf and set by the id that conf gives it. Formats (NVIDIA tools, as parsed by jetson_stats,
rbonghi/jetson_stats @ f41d5cad: jtop/core/nvpmodel.py, jetson_clocks.py):

* conf: ``< POWER_MODEL ID=2 NAME=MAXN_SUPER >`` blocks of ``PARAM ARG VALUE`` lines,
  ``< PM_CONFIG DEFAULT=1 >``; ``-1`` (and ``0`` for EMC in older files) means no cap;
* ``nvpmodel -q``: ``NV Power Mode: MAXN_SUPER`` then the id on the next line (warnings such as
  ``NVPM WARN: fan mode is not set!`` may come first);
* ``/var/lib/nvpmodel/status``: ``pmode:0002 fmode:quiet`` (rewritten on every change);
* ``jetson_clocks --show``: ``GPU MinFreq=… MaxFreq=… CurrentFreq=…``, ``EMC … MaxFreq=…``,
  ``cpuN: Online=1 … MaxFreq=…`` and ``NV Power Mode: …``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: the lab's nvpmodel stand-in imports this module on every call
    from specdec.catalog import Device, Module

__all__ = [
    "CONF_PATH",
    "PREFERRED",
    "STATUS_PATH",
    "NvpConf",
    "PowerMode",
    "PowerState",
    "choose_target",
    "mode_bandwidth",
    "parse_clocks",
    "parse_conf",
    "parse_query",
    "parse_state_dump",
    "parse_status",
    "state_command",
    "state_from_files",
    "status_line",
]

CONF_PATH = "/etc/nvpmodel.conf"
STATUS_PATH = "/var/lib/nvpmodel/status"
PREFERRED = ("MAXN_SUPER", "MAXN")  # best first

_MODEL = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=(\S+?)\s*>")
_DEFAULT = re.compile(r"<\s*PM_CONFIG\s+DEFAULT=(\d+)\s*>")
_QUERY = re.compile(r"NV Power Mode:\s*(\w+)")
_PMODE = re.compile(r"pmode:\s*(\d+)")
_CLOCK = re.compile(r"^(\S+?):?\s.*?MaxFreq=(\d+)(?:\s+CurrentFreq=(\d+))?")


@dataclass(frozen=True)
class PowerMode:
    id: int
    name: str
    params: dict[str, str] = field(default_factory=dict)  # "EMC MAX_FREQ" -> "2133000000"

    def cap(self, key: str) -> int | None:
        """A clock cap of the mode in its conf unit (None: no cap, -1 / 0 / absent)."""
        try:
            v = int(self.params.get(key, "-1"))
        except ValueError:
            return None
        return v if v > 0 else None

    @property
    def emc_mhz(self) -> float | None:
        hz = self.cap("EMC MAX_FREQ")
        return hz / 1e6 if hz else None

    @property
    def tpc_mask(self) -> str | None:
        return self.params.get("TPC_POWER_GATING TPC_PG_MASK")


@dataclass(frozen=True)
class NvpConf:
    modes: dict[int, PowerMode]
    default: int | None

    def by_name(self, name: str) -> PowerMode | None:
        return next((m for m in self.modes.values() if m.name == name), None)

    def names(self) -> list[str]:
        return [m.name for m in sorted(self.modes.values(), key=lambda m: m.id)]


def parse_conf(text: str) -> NvpConf:
    """An nvpmodel conf (comments and PARAM definitions ignored)."""
    modes: dict[int, PowerMode] = {}
    default: int | None = None
    current: tuple[int, str, dict[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("<"):
            if current is not None:
                modes[current[0]] = PowerMode(*current)
            current = None
            if m := _MODEL.match(line):
                current = (int(m.group(1)), m.group(2), {})
            elif m := _DEFAULT.match(line):
                default = int(m.group(1))
            continue
        words = line.split()
        if current is not None and len(words) == 3:
            current[2][f"{words[0]} {words[1]}"] = words[2]
    if current is not None:
        modes[current[0]] = PowerMode(*current)
    return NvpConf(modes, default)


def parse_query(text: str | None) -> tuple[str, int] | None:
    """``nvpmodel -q`` output -> (name, id), or None."""
    lines = [ln.strip() for ln in (text or "").splitlines()]
    for i, line in enumerate(lines):
        m = _QUERY.search(line)
        mode = lines[i + 1] if i + 1 < len(lines) else ""
        # ASCII digits (not '²'), without specdec.config.rawinput: the emulator ships this file
        if m and mode.isascii() and mode.isdigit() and len(mode) <= 9:
            return m.group(1), int(mode)
    return None


def parse_status(text: str | None) -> int | None:
    """``/var/lib/nvpmodel/status`` -> the mode id, or None."""
    m = _PMODE.search(text or "")
    return int(m.group(1)) if m else None


def status_line(mode_id: int, fan: str = "quiet") -> str:
    return f"pmode:{mode_id:04d} fmode:{fan}\n"


def parse_clocks(text: str | None) -> dict[str, Any]:
    """``jetson_clocks --show`` -> max (and current) clocks in MHz, online CPUs, mode name."""
    out: dict[str, Any] = {}
    cpu_max: list[float] = []
    for line in (text or "").splitlines():
        line = line.strip()
        if m := _QUERY.search(line):
            out["mode"] = m.group(1)
            continue
        if line.startswith("Online CPUs:"):
            out["online_cpus"] = line.split(":", 1)[1].strip()
            continue
        m = _CLOCK.match(line)
        if not m:
            continue
        name, mx, cur = m.group(1), int(m.group(2)), m.group(3)
        if name.startswith("cpu"):
            cpu_max.append(mx / 1000)  # kHz
        elif name in ("GPU", "EMC"):
            out[f"{name.lower()}_max_mhz"] = round(mx / 1e6, 1)
            if cur is not None:
                out[f"{name.lower()}_cur_mhz"] = round(int(cur) / 1e6, 1)
    if cpu_max:
        out["cpu_max_mhz"] = round(max(cpu_max), 1)
    return out


def choose_target(conf: NvpConf) -> PowerMode | None:
    """The fastest mode by name: MAXN_SUPER, else MAXN (None: the conf has neither, as a
    pre-super Orin Nano whose top mode is 15W)."""
    for name in PREFERRED:
        mode = conf.by_name(name)
        if mode is not None:
            return mode
    return None


def mode_bandwidth(device: Device, mode: PowerMode | None, module: Module | None = None,
                   l4t: str | None = None) -> tuple[float, str]:
    """Peak DRAM bandwidth (GB/s) of ``device`` in ``mode`` on L4T ``l4t`` and where the figure
    comes from. A ``module`` whose own nvpmodel conf the catalog has no table for (``mode_table``
    false) never gets the device's table: its conf's EMC cap, else the device's peak. The peak
    is the host's L4T's (`Device.peak_gbs`: a Nano before super DTBs tops out at 2133 MHz)."""
    peak = device.peak_gbs(l4t)
    where = "" if peak == device.bandwidth_gbs else f" on L4T {l4t} (before super DTBs)"
    if mode is None:
        return peak, f"device peak{where} (no power mode known)"
    bw = device.mode_bandwidth_gbs(mode.name) if module is None or module.mode_table else None
    if bw is not None:  # the mode's name says which DTB the host runs (MAXN_SUPER: a super one)
        return bw, f"catalog power_modes.{mode.name}"
    if module is not None and not module.mode_table and mode.emc_mhz is None:
        conf = module.conf_for(l4t) or module.nvpmodel_conf
        return peak, (
            f"device peak{where}: {mode.name} of {conf} states no EMC cap, and that conf's "
            f"mode table is not in the catalog (not guessed from another module's)")
    emc = mode.emc_mhz
    if emc is not None:
        return device.emc_bandwidth_gbs(emc), f"EMC cap {emc:g} MHz x {device.memory_bus_bits}-bit"
    return peak, f"device peak{where} ({mode.name}: no EMC cap)"


@dataclass(frozen=True)
class PowerState:
    """What a host reports about its power mode (all optional: not every host is a Jetson)."""

    conf: NvpConf | None
    current: tuple[str, int] | None  # (name, id) from `nvpmodel -q` or the status file
    clocks: dict[str, Any]

    @property
    def mode(self) -> PowerMode | None:
        if self.conf is None or self.current is None:
            return None
        return self.conf.modes.get(self.current[1]) or self.conf.by_name(self.current[0])

    def record(self, device: Device | None, module: Module | None = None,
               l4t: str | None = None) -> dict[str, Any]:
        """The report's view: mode, clocks and the catalog's bandwidth in that mode."""
        out: dict[str, Any] = {"power_mode": self.current[0] if self.current else None,
                               "power_mode_id": self.current[1] if self.current else None,
                               "clocks": dict(self.clocks)}
        if device is not None:
            bw, src = mode_bandwidth(device, self.mode, module, l4t)
            out.update(bandwidth_gbs=bw, bandwidth_source=src)
        return out


_MARK = "@@specdec-power "


def state_command() -> str:
    """One read-only command printing the conf, ``nvpmodel -q`` and ``jetson_clocks --show``."""
    parts = [
        f"echo '{_MARK}conf'; cat {CONF_PATH} 2>/dev/null",
        f"echo '{_MARK}status'; cat {STATUS_PATH} 2>/dev/null",
        f"echo '{_MARK}query'; command -v nvpmodel >/dev/null 2>&1 && nvpmodel -q 2>/dev/null",
        f"echo '{_MARK}clocks'; command -v jetson_clocks >/dev/null 2>&1 && "
        "jetson_clocks --show 2>/dev/null",
    ]
    return "; ".join(f"{{ {p}; }}" for p in parts) + "; true"


def split_dump(lines: list[str] | str) -> dict[str, str]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    out: dict[str, list[str]] = {}
    key = None
    for line in lines:
        if line.startswith(_MARK):
            key = line[len(_MARK):].strip()
            out[key] = []
        elif key is not None:
            out[key].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def parse_state_dump(lines: list[str] | str) -> PowerState | None:
    """The output of `state_command` -> `PowerState` (None: no nvpmodel conf on the host)."""
    parts = split_dump(lines)
    return state_from_files(parts)


def state_from_files(parts: Mapping[str, str | None]) -> PowerState | None:
    conf_text = parts.get("conf") or ""
    if "POWER_MODEL" not in conf_text:
        return None
    conf = parse_conf(conf_text)
    current = parse_query(parts.get("query"))
    if current is None:
        pid = parse_status(parts.get("status"))
        if pid is None:
            pid = conf.default
        mode = conf.modes.get(pid) if pid is not None else None
        current = (mode.name, mode.id) if mode is not None else None
    return PowerState(conf, current, parse_clocks(parts.get("clocks")))

