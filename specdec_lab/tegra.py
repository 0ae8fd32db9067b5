"""Stand-ins for the Jetson tools a lab host carries: ``nvpmodel``, ``jetson_clocks``,
``tegrastats``. They keep state where the real tools do and print what they print.

* ``nvpmodel`` reads ``/etc/nvpmodel.conf`` (the module's NVIDIA file, a symlink into
  /etc/nvpmodel/ as nvpower.sh makes it) and keeps the mode in ``/var/lib/nvpmodel/status``
  (``pmode:0002 fmode:quiet``). ``-q`` prints ``NV Power Mode: NAME`` and the id; ``-m ID``
  switches live when the mode keeps the GPU's power-gating masks, else (the GPU's "golden
  context" exists since boot) asks to reboot: ``YES``/``yes`` reboots into the new mode, any
  other answer cancels (``NVPM ERROR: optMask is 1, no request for power mode``), no answer
  (stdin at EOF) is ``NVPM ERROR: bad input!``; ``--force`` reboots without asking. ``-f CONF``
  is what nvpmodel.service runs at boot. Outputs as captured on devices (research notes in
  specdec_lab/nvpmodel/README and jetson_stats' parsers, rbonghi/jetson_stats @ f41d5cad).
  The rule "a different TPC_PG_MASK needs a reboot" is the one jetson_stats applies
  (jtop/core/nvpmodel.py); NVIDIA's own rule is closed source.
* ``jetson_clocks`` pins clocks to the mode's maxima until the next mode change or boot (its
  state lives under /run); ``--show`` prints them in the real format.
* ``tegrastats [--interval MS]`` prints one line per interval (RAM from /proc/meminfo,
  per-CPU load@MHz, EMC_FREQ, GR3D_FREQ, temperatures, rails), the format of r36 as root.

Run as ``python3 -m specdec_lab.tegra TOOL ARGS…`` (the lab installs wrappers on PATH); the
device comes from ``/usr/lib/specdec-lab/tegra.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specdec.host.power import (
    CONF_PATH,
    STATUS_PATH,
    PowerMode,
    parse_conf,
    parse_status,
    status_line,
)

__all__ = ["HARDWARE", "Tegra", "main"]

DEVICE_FILE = "usr/lib/specdec-lab/tegra.json"
CLOCKS_STATE = "run/specdec-lab/jetson_clocks"  # /run: lost at boot, as pinned clocks are
EMC_MAX_HZ = 3199000000  # BPMP maximum of the super DTBs and of AGX Orin


@dataclass(frozen=True)
class Hardware:
    cpus: int
    cpu_max_khz: int  # the module's top CPU clock
    gpu_max_hz: int
    gpcs: int  # GR3D_FREQ shows one entry per GPC on r36
    soc: str = "tegra234"
    emc_max_hz: int = EMC_MAX_HZ


# Top clocks per device for the modes whose conf leaves them uncapped (-1). Orin Nano: the
# jetson_clocks --show capture of an Orin Nano Super in MAXN_SUPER (1728000 kHz, 1020 MHz);
# Orin NX: the caps of its 40W mode in nvpmodel_p3767_0001_super.conf (1984000 kHz, 1173 MHz);
# AGX Orin: NVIDIA's module figures (2.2 GHz CPU; GPU 1.3 GHz 64GB, 930 MHz 32GB).
HARDWARE = {
    "orin-nano-4gb": Hardware(6, 1728000, 1020000000, 1),
    "orin-nano-8gb": Hardware(6, 1728000, 1020000000, 1),
    "orin-nx-8gb": Hardware(6, 1984000, 1173000000, 1),
    "orin-nx-16gb": Hardware(8, 1984000, 1173000000, 1),
    "agx-orin-32gb": Hardware(8, 2188800, 930750000, 2),
    "agx-orin-64gb": Hardware(12, 2201600, 1300500000, 2),
    # AGX Thor T5000, lab-only figures (NVIDIA's data sheet is not in our sources): 14 Neoverse
    # V3AE cores at 2.6 GHz, GPU 1.575 GHz, as NVIDIA's product page gives them; LPDDR5X 4266 MHz
    "agx-thor-t5000": Hardware(14, 2601000, 1575000000, 3, "tegra264", 4266000000),
}


class Tegra:
    """One lab host's Jetson state under ``root`` (``/`` on the host, a directory in tests)."""

    def __init__(self, root: Path | str = "/", reboot: Callable[[], None] | None = None) -> None:
        self.root = Path(root)
        info = json.loads((self.root / DEVICE_FILE).read_text())
        self.device: str = info["device"]
        self.machine: str = info["model"]
        self.hw = HARDWARE[self.device]
        self.conf = parse_conf((self.root / CONF_PATH.lstrip("/")).read_text())
        self._reboot = reboot or (lambda: os.execvp("systemctl", ["systemctl", "reboot"]))

    # -- state ------------------------------------------------------------------------------
    @property
    def status_path(self) -> Path:
        return self.root / STATUS_PATH.lstrip("/")

    def current(self) -> PowerMode:
        try:
            pid = parse_status(self.status_path.read_text())
        except OSError:
            pid = None
        if pid not in self.conf.modes:
            pid = self.conf.default if self.conf.default in self.conf.modes else min(
                self.conf.modes)
        return self.conf.modes[pid]

    def _store(self, mode: PowerMode) -> None:
        self.status_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.status_path.with_name(".status.tmp")
        tmp.write_text(status_line(mode.id))
        tmp.replace(self.status_path)  # a new inode: readers see old or new, never half
        (self.root / CLOCKS_STATE).unlink(missing_ok=True)  # a mode change resets the clocks

    def _masks(self, mode: PowerMode) -> tuple[str | None, str | None]:
        return (mode.params.get("TPC_POWER_GATING TPC_PG_MASK"),
                mode.params.get("FBP_POWER_GATING FBP_PG_MASK"))

    # -- nvpmodel ---------------------------------------------------------------------------
    def nvpmodel(self, argv: list[str], stdin: TextIO, out: TextIO) -> int:
        args = list(argv)
        force = "--force" in args
        args = [a for a in args if a not in ("--force", "--verbose")]
        if args[:1] == ["-q"]:
            mode = self.current()
            out.write(f"NV Power Mode: {mode.name}\n{mode.id}\n")
            return 0
        if args[:1] == ["-f"]:  # nvpmodel.service at boot: apply the kept (or default) mode
            if not self.status_path.exists():
                self._store(self.current())
            return 0
        if args[:1] == ["-p"]:
            out.write(f"NVPM VERB: Config file: {CONF_PATH}\n"
                      f"NVPM VERB: parsing done for {CONF_PATH}\n")
            if self.conf.default is not None and self.conf.default in self.conf.modes:
                d = self.conf.modes[self.conf.default]
                out.write(f"NVPM VERB: PM_CONFIG: DEFAULT={d.name}({d.id})\n")
            for m in sorted(self.conf.modes.values(), key=lambda m: m.id):
                out.write(f"NVPM VERB: POWER_MODEL: ID={m.id} NAME={m.name}\n")
                for key, val in m.params.items():
                    out.write(f"NVPM VERB: {key} {val}\n")
            return 0
        if args[:1] == ["-m"] and len(args) == 2 and args[1].isdigit():
            return self._set(int(args[1]), force, stdin, out)
        sys.stderr.write("NVPM ERROR: bad arguments; usage: nvpmodel [-m id [--force]] [-q] "
                         "[-p --verbose] [-f conf]\n")
        return 1

    def _set(self, mode_id: int, force: bool, stdin: TextIO, out: TextIO) -> int:
        target = self.conf.modes.get(mode_id)
        if target is None:
            out.write(f"NVPM ERROR: Invalid power mode id: {mode_id}\n")
            return 1
        current = self.current()
        if self._masks(target) == self._masks(current):
            self._store(target)  # a live switch
            return 0
        out.write("NVPM WARN: Golden image context is already created\n"
                  f"NVPM WARN: Reboot required for changing to this power mode: {mode_id}\n")
        if not force:
            out.write("NVPM WARN: DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm:\n")
            out.flush()
            answer = stdin.readline()
            if not answer:
                out.write("NVPM ERROR: bad input!\n")
                return 234
            if answer.strip() not in ("YES", "yes"):
                out.write("NVPM ERROR: optMask is 1, no request for power mode\n")
                return 1
        out.write("NVPM WARN: rebooting\n")
        out.flush()
        self._store(target)  # nvpmodel.service applies it at the next boot
        self._reboot()
        return 0

    # -- jetson_clocks ----------------------------------------------------------------------
    def _maxima(self, mode: PowerMode) -> tuple[list[int], int, int, int]:
        """(online CPU ids, CPU max kHz, GPU max Hz, EMC max Hz) in ``mode``."""
        online = [i for i in range(self.hw.cpus)
                  if mode.params.get(f"CPU_ONLINE CORE_{i}", "1") != "0"]
        cpu = mode.cap("CPU_A78_0 MAX_FREQ") or self.hw.cpu_max_khz
        gpu = mode.cap("GPU MAX_FREQ") or self.hw.gpu_max_hz
        emc = mode.cap("EMC MAX_FREQ") or self.hw.emc_max_hz
        return online, min(cpu, self.hw.cpu_max_khz), min(gpu, self.hw.gpu_max_hz), emc

    def pinned(self) -> bool:
        return (self.root / CLOCKS_STATE).exists()

    def jetson_clocks(self, argv: list[str], out: TextIO) -> int:
        if argv[:1] == ["--show"]:
            self._show(out)
            return 0
        if argv:
            sys.stderr.write(f"jetson_clocks: unknown option {argv[0]} (--show, or none)\n")
            return 1
        state = self.root / CLOCKS_STATE
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(f"{self.current().id}\n")
        return 0

    def _show(self, out: TextIO) -> None:
        mode = self.current()
        online, cpu, gpu, emc = self._maxima(mode)
        pinned = self.pinned()
        # Unpinned, DVFS idles low (the capture: GPU 306 MHz, EMC 2133 MHz in MAXN_SUPER).
        cpu_low, gpu_low, emc_cur = (cpu, gpu, emc) if pinned else (729600, 306000000,
                                                                    min(emc, 2133000000))
        out.write(f"SOC family:{self.hw.soc}  Machine:{self.machine}\n\n"
                  f"Online CPUs: {_ranges(online)}\n")
        for i in online:
            out.write(f"cpu{i}:  Online=1 Governor=schedutil MinFreq={cpu_low} "
                      f"MaxFreq={cpu} CurrentFreq={cpu_low} IdleStates: WFI=1 c7=1\n")
        out.write(f"GPU MinFreq={gpu_low} MaxFreq={gpu} CurrentFreq={gpu_low}\n"
                  f"EMC MinFreq=204000000 MaxFreq={emc} CurrentFreq={emc_cur} "
                  f"FreqOverride={1 if pinned else 0}\n"
                  f"FAN Dynamic Speed Control=kernel hwmon0_pwm1={255 if pinned else 88}\n"
                  f"NV Power Mode: {mode.name}\n")

    # -- tegrastats -------------------------------------------------------------------------
    def tegrastats_line(self) -> str:
        mode = self.current()
        online, cpu, gpu, emc = self._maxima(mode)
        total, avail = _meminfo(self.root / "proc/meminfo")
        used = max(0, total - avail)
        cpu_mhz = cpu // 1000 if self.pinned() else 729
        cpus = ",".join(f"0%@{cpu_mhz}" if i in online else "off" for i in range(self.hw.cpus))
        emc_mhz = emc // 1000000 if self.pinned() else 2133
        gpcs = ",".join(["0"] * self.hw.gpcs)
        stamp = time.strftime("%m-%d-%Y %H:%M:%S")
        return (f"{stamp} RAM {used // 1024}/{total // 1024}MB (lfb 4x4MB) SWAP 0/0MB "
                f"(cached 0MB) CPU [{cpus}] EMC_FREQ 0%@{emc_mhz} GR3D_FREQ 0%@[{gpcs}] "
                f"cpu@45.5C soc2@44.9C soc0@45.1C gpu@45.2C tj@45.5C soc1@44.8C "
                f"VDD_IN 4523mW/4523mW VDD_CPU_GPU_CV 524mW/524mW VDD_SOC 1373mW/1373mW\n")

    def tegrastats(self, argv: list[str], out: TextIO) -> int:
        interval = 1.0
        if "--interval" in argv:
            i = argv.index("--interval")
            try:
                interval = int(argv[i + 1]) / 1000
            except (IndexError, ValueError):
                sys.stderr.write("tegrastats: --interval takes milliseconds\n")
                return 1
        if "--stop" in argv:
            return 0
        while True:
            out.write(self.tegrastats_line())
            out.flush()
            time.sleep(interval)


def _ranges(ids: list[int]) -> str:
    """[0,1,2,3,5] -> '0-3,5' (as /sys/devices/system/cpu/online)."""
    parts: list[str] = []
    for i in ids:
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)


def _meminfo(path: Path) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in kB."""
    vals: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                vals[key] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    total = vals.get("MemTotal", 0)
    return total, vals.get("MemAvailable", total)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("nvpmodel", "jetson_clocks", "tegrastats"):
        sys.stderr.write("usage: python3 -m specdec_lab.tegra {nvpmodel,jetson_clocks,"
                         "tegrastats} ...\n")
        return 2
    if os.geteuid() != 0 and args[0] != "tegrastats" and args[1:2] != ["-q"]:
        sys.stderr.write(f"{args[0]}: must be run as root\n")
        return 1
    tegra = Tegra("/")
    try:
        if args[0] == "nvpmodel":
            return tegra.nvpmodel(args[1:], sys.stdin, sys.stdout)
        if args[0] == "jetson_clocks":
            return tegra.jetson_clocks(args[1:], sys.stdout)
        return tegra.tegrastats(args[1:], sys.stdout)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
