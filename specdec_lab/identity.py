"""The identity a lab host carries: what a real device of the catalog shows where the facts look.

Jetsons: device-tree ``model`` and ``compatible`` (under a fake /sys/firmware/devicetree/base,
which /proc/device-tree points at on a real Jetson), ``/etc/nv_tegra_release``, ``MemTotal``,
and the power-mode tools: the module's NVIDIA ``nvpmodel.conf`` (/etc/nvpmodel.conf links to it
in /etc/nvpmodel/, as nvpower.sh makes it), ``nvpmodel``, ``jetson_clocks`` and ``tegrastats``
stand-ins (`specdec_lab.tegra`) and the ``nvpmodel.service`` that applies the kept mode at boot.
An Orin Nano / NX host is a JetPack 6.2 (L4T 36.4.3) super flash: its device tree says "Super".
DGX Spark: ``nvidia-smi`` answering NVIDIA GB10, ``/etc/dgx-release``, ``MemTotal``. Both are
aarch64 (``uname -m``) although the lab runs on x86_64: a ``uname`` shim says so.
An x86-cpu host is this machine as it is (a GPU-less x86-64 host, the real engine runs on it):
no identity file, no shim, its own /proc/meminfo (`DeviceFiles.bind_meminfo` false).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specdec.catalog import Device

__all__ = ["NVPMODEL_CONF", "DeviceFiles", "device_files", "meminfo"]

L4T_RELEASE = (
    "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
    "DATE: Wed Jan  8 01:49:37 UTC 2025\n"
    "# KERNEL_VARIANT: oot\n"
    "TARGET_USERSPACE_LIB_DIR=nvidia\n"
    "TARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n"
)
DGX_RELEASE = (
    'DGX_NAME="DGX Spark"\n'
    'DGX_PRETTY_NAME="NVIDIA DGX Spark"\n'
    'DGX_SWBUILD_DATE="2025-10-01"\n'
    'DGX_SWBUILD_VERSION="7.2.3"\n'
    'DGX_COMMIT_ID="lab"\n'
    'DGX_PLATFORM="DGX Server for KVM"\n'
    'DGX_SERIAL_NUMBER="LAB-EMULATED"\n'
)
DRIVER_VERSION = "580.95.05"
# The board a lab host of each Jetson family shows: carrier, model string and which module
# (None: the device's first; the first compatible entry is carrier+module). Orin Nano / NX: a
# JetPack 6.2 super flash of the developer kit. AGX Orin Industrial in the devkit carrier:
# upstream Linux tegra234-p3737-0000+p3701-0008.dts (the same model string as the commercial
# devkit); IGX Orin devkit: tegra234-p3740-0002+p3701-0008.dts; AGX Thor devkit:
# tegra264-p4071-0000+p3834-0008.dts (Thierry Reding, NVIDIA; "NVIDIA Jetson AGX Thor Developer
# Kit"); a T4000 in the same carrier (OE4T meta-tegra jetson-agx-thor-t4000.conf "P3834-0000
# module in P4071-0000 carrier"; its model string is not confirmed: the devkit's is used).
_BOARDS = {
    "agx-orin": ("p3737-0000", "{model} Developer Kit", None),
    "agx-orin-industrial": ("p3737-0000", "NVIDIA Jetson AGX Orin Developer Kit", None),
    "igx-orin": ("p3740-0002", "NVIDIA IGX Orin Development Kit", "p3701-0008"),
    "orin-nx": ("p3768-0000", "{model} Engineering Reference Developer Kit Super", None),
    "orin-nano": ("p3768-0000", "{model} Engineering Reference Developer Kit Super", None),
    "agx-thor": ("p4071-0000", "NVIDIA Jetson AGX Thor Developer Kit", None),
}
_SOC = {"agx-thor": "tegra264"}
# /etc/nv_tegra_release of the flash a lab host of the family carries: Thor's as NVIDIA
# captured it on an AGX Thor devkit at R38.4 (NVIDIA/skills @ 7149a886
# skills/jetson-diagnostic/references/tegrastats-fields.md:62-68); the others L4T 36.4.3.
L4T_RELEASE_THOR = (
    "# R38 (release), REVISION: 4.0, GCID: 43443517, BOARD: generic, EABI: aarch64, "
    "DATE: Wed Dec 31 00:15:19 UTC 2025\n"
    "# KERNEL_VARIANT: oot\n"
)
# The conf each module gets on an r36.4.3 super flash (NVIDIA nvpower.sh
# create_nvpmodel_symlink(), quoted in OE4T/meta-tegra scarthgap tegra-nvpower patch
# 0001-Drop-bc-usage-and-remove-symlink-creation-functions.patch): p3767 modules use their
# "_super" file, p3701-0005 falls through to p3701_0000. Copies in specdec_lab/nvpmodel/. The
# AGX Thor T5000 gets the lab's stand-in (lab_p3834_0008.conf says what it is) under the name
# nvpower.sh links. Modules whose NVIDIA conf is in none of our sources (AGX Orin Industrial,
# IGX Orin, Thor T4000) get none: the host has no nvpmodel, and specdec leaves its power as is.
NVPMODEL_CONF = {
    "p3767-0000": "nvpmodel_p3767_0000_super.conf",
    "p3767-0002": "nvpmodel_p3767_0000_super.conf",
    "p3767-0001": "nvpmodel_p3767_0001_super.conf",
    "p3767-0003": "nvpmodel_p3767_0003_super.conf",
    "p3767-0005": "nvpmodel_p3767_0003_super.conf",
    "p3767-0004": "nvpmodel_p3767_0004_super.conf",
    "p3701-0000": "nvpmodel_p3701_0000.conf",
    "p3701-0005": "nvpmodel_p3701_0000.conf",
    "p3701-0004": "nvpmodel_p3701_0004.conf",
    "p3834-0008": "lab_p3834_0008.conf",
}
_INSTALLED_AS = {"lab_p3834_0008.conf": "nvpmodel_p3834_0008.conf"}
_CONF_DIR = Path(__file__).resolve().parent / "nvpmodel"
# nvpmodel.service as NVIDIA's BSP installs it (meta-tegra tegra-nvpmodel:
# "ExecStart=/usr/sbin/nvpmodel -f /etc/nvpmodel.conf"), before anything uses the GPU.
NVPMODEL_SERVICE = """[Unit]
Description=nvpmodel service
Before=docker.service specdec-engine.service

[Service]
Type=oneshot
ExecStart=/usr/sbin/nvpmodel -f /etc/nvpmodel.conf
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""
_TOOLS = {"usr/sbin/nvpmodel": "nvpmodel", "usr/bin/jetson_clocks": "jetson_clocks",
          "usr/bin/tegrastats": "tegrastats"}


@dataclass(frozen=True)
class DeviceFiles:
    """Files to place in the host (path relative to its root -> content) and its MemTotal."""

    files: dict[str, bytes]
    memtotal_kb: int
    gpu_name: str | None
    links: dict[str, str] = field(default_factory=dict)  # path -> symlink target
    bind_meminfo: bool = True  # the lab binds meminfo(memtotal_kb) over /proc/meminfo


def meminfo(total_kb: int) -> str:
    """A plausible /proc/meminfo for an idle machine with ``total_kb``."""
    free = int(total_kb * 0.85)
    avail = int(total_kb * 0.90)
    rows = [
        ("MemTotal", total_kb), ("MemFree", free), ("MemAvailable", avail),
        ("Buffers", total_kb // 200), ("Cached", total_kb // 20), ("SwapCached", 0),
        ("Active", total_kb // 25), ("Inactive", total_kb // 30), ("SwapTotal", 0),
        ("SwapFree", 0), ("Dirty", 0), ("Writeback", 0), ("AnonPages", total_kb // 50),
        ("Mapped", total_kb // 100), ("Shmem", total_kb // 500), ("Slab", total_kb // 100),
        ("SReclaimable", total_kb // 200), ("SUnreclaim", total_kb // 200),
        ("KernelStack", 8192), ("PageTables", 4096), ("CommitLimit", total_kb // 2),
        ("Committed_AS", total_kb // 10), ("VmallocTotal", 133143592960),
        ("VmallocUsed", 0), ("VmallocChunk", 0), ("HugePages_Total", None),
        ("HugePages_Free", None), ("Hugepagesize", 2048),
    ]
    lines = []
    for key, val in rows:
        if val is None:
            lines.append(f"{key + ':':<16}{0:>8}")
        else:
            lines.append(f"{key + ':':<16}{val:>8} kB")
    return "\n".join(lines) + "\n"


def _nvidia_smi(gpu: str) -> str:
    # Answers the identity query (name,memory.total,driver_version csv) and a bare call.
    return f"""#!/bin/sh
# specdec lab: emulated nvidia-smi of a {gpu} (unified memory: memory.total is [N/A]).
for a in "$@"; do
  case "$a" in
    --query-gpu=*)
      out=""
      for f in $(echo "${{a#--query-gpu=}}" | tr ',' ' '); do
        case "$f" in
          name) v="{gpu}" ;;
          memory.total|memory.used|memory.free) v="[N/A]" ;;
          driver_version) v="{DRIVER_VERSION}" ;;
          uuid) v="GPU-00000000-0000-0000-0000-00000000lab0" ;;
          count) v="1" ;;
          *) v="[N/A]" ;;
        esac
        out="${{out:+$out, }}$v"
      done
      echo "$out"; exit 0 ;;
    -L|--list-gpus) echo "GPU 0: {gpu} (UUID: GPU-00000000-0000-0000-0000-00000000lab0)"; exit 0 ;;
  esac
done
cat <<'EOT'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {DRIVER_VERSION}    Driver Version: {DRIVER_VERSION}    CUDA Version: 13.0   |
|   0  {gpu:<20}  On  | specdec lab (emulated)                                     |
+-----------------------------------------------------------------------------------------+
EOT
"""


UNAME_SHIM = """#!/bin/sh
# specdec lab: the emulated devices are aarch64 (the lab itself runs on x86_64).
out=$(/usr/bin/uname "$@") || exit $?
printf '%s\\n' "$out" | sed 's/x86_64/aarch64/g'
"""


def _tool(name: str, install_dir: str) -> str:
    # -S: stdlib only, no site-packages scan (the real tools are native binaries: start cheaply)
    return (f"#!/bin/sh\n# specdec lab: stand-in for NVIDIA's {name} (see specdec_lab/tegra.py)\n"
            f'PYTHONPATH=/{install_dir} exec python3 -S -m specdec_lab.tegra {name} "$@"\n')


def _jetson_files(device: Device, files: dict[str, bytes], links: dict[str, str],
                  install_dir: str) -> None:
    carrier, model, module = _BOARDS[device.family]
    module = module or device.module_ids[0]
    model = model.format(model=device.model_string)
    suffix = "-super" if model.endswith(" Super") else ""
    compatible = [f"nvidia,{carrier}+{module}{suffix}", f"nvidia,{module}",
                  f"nvidia,{_SOC.get(device.family, 'tegra234')}"]
    files["firmware/devicetree/base/model"] = (model + "\0").encode()
    files["firmware/devicetree/base/compatible"] = "".join(c + "\0" for c in compatible).encode()
    files["etc/nv_tegra_release"] = (L4T_RELEASE_THOR if device.family == "agx-thor"
                                     else L4T_RELEASE).encode()
    conf = NVPMODEL_CONF.get(module)
    if conf is None:
        return
    name = _INSTALLED_AS.get(conf, conf)
    files[f"etc/nvpmodel/{name}"] = (_CONF_DIR / conf).read_bytes()
    links["etc/nvpmodel.conf"] = f"/etc/nvpmodel/{name}"
    files["usr/lib/specdec-lab/tegra.json"] = json.dumps(
        {"device": device.id, "model": model, "module": module}).encode()
    for path, tool in _TOOLS.items():
        files[path] = _tool(tool, install_dir).encode()
    files["etc/systemd/system/nvpmodel.service"] = NVPMODEL_SERVICE.encode()
    links["etc/systemd/system/multi-user.target.wants/nvpmodel.service"] = (
        "/etc/systemd/system/nvpmodel.service")


def device_files(device: Device, install_dir: str = "opt/specdec") -> DeviceFiles:
    """Identity files for ``device`` (paths relative to the host root, or to ``firmware/`` for
    the device tree that the lab mounts at /sys/firmware)."""
    total_kb = int(device.memtotal_gib * 1024 * 1024)  # the catalog's MemTotal
    if device.is_cpu:  # the machine itself
        return DeviceFiles(files={}, memtotal_kb=total_kb, gpu_name=None, bind_meminfo=False)
    files: dict[str, bytes] = {"usr/local/bin/uname": UNAME_SHIM.encode()}
    links: dict[str, str] = {}
    gpu = None
    if device.is_jetson:
        _jetson_files(device, files, links, install_dir)
    else:
        gpu = device.gpu_name or "NVIDIA GB10"
        files["etc/dgx-release"] = DGX_RELEASE.encode()
        files["usr/local/bin/nvidia-smi"] = _nvidia_smi(gpu).encode()
    return DeviceFiles(files=files, memtotal_kb=total_kb, gpu_name=gpu, links=links)
