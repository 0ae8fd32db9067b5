"""Which catalog device a machine is, from a handful of identity files (pure parsing).

A Jetson by its device tree and L4T release, a DGX Spark by its GPU (nvidia-smi) or DGX OS, a
GPU-less x86-64 host (x86-cpu) by ``uname -m`` with none of those: no device tree model, no
NVIDIA GPU answering nvidia-smi, no /etc/dgx-release (an x86 machine with an NVIDIA GPU is
none of the catalog's devices and is refused).

Used by the pyinfra fact (which fetches exactly `IDENTITY_FILES` over SSH) and by
``specdec identify`` (which reads them from a local root with `read_identity_root`).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.catalog import Catalog, Device, Module, load_catalog
from specdec.errors import IdentifyError
from specdec.host.power import mode_bandwidth, state_from_files

__all__ = [
    "IDENTITY_FILES",
    "Identity",
    "identity_paths",
    "identity_command",
    "parse_identity",
    "read_identity_root",
    "split_identity_output",
]

IDENTITY_FILES: tuple[str, ...] = (
    "proc/device-tree/model",
    "proc/device-tree/compatible",
    "etc/nv_tegra_release",
    "proc/meminfo",
    "etc/dgx-release",
    "nvidia-smi.txt",  # output of NVIDIA_SMI_CMD
    "uname-m.txt",  # uname -m
    "etc/nvpmodel.conf",  # Jetson power modes (ids differ per module and release)
    "var/lib/nvpmodel/status",  # the current mode id, as nvpmodel keeps it
)

# /proc/device-tree is a symlink to /sys/firmware/devicetree/base on every Jetson; when the
# former is missing (a kernel without it, or the lab: x86 procfs cannot have that entry) the
# latter is read instead.
_ALIASES = {"proc/device-tree/": "sys/firmware/devicetree/base/"}


def identity_paths(key: str) -> tuple[str, ...]:
    """Paths (relative to the root) to try, in order, for the identity file ``key``."""
    return (key, *(alt + key[len(pre):] for pre, alt in _ALIASES.items() if key.startswith(pre)))


NVIDIA_SMI_CMD = (
    "nvidia-smi",
    "--query-gpu=name,memory.total,driver_version",
    "--format=csv,noheader",
)

_MODULE_ID = re.compile(r"p\d{4}-\d{4}")
_SOC = re.compile(r"nvidia,(tegra\d+)")
_L4T = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([0-9][0-9.]*)")
_MEMTOTAL = re.compile(r"^MemTotal:\s*(\d+)\s*kB", re.MULTILINE)
_GIB_KB = 1024 * 1024
# MemTotal is below the module's nominal size (carve-outs, firmware): Nano 4GB reads ~3.3-3.6 GiB,
# 8GB ~7.4, AGX 64GB ~61-62, Spark ~119-121. Anything outside [LOW, HIGH] x nominal contradicts.
MEM_LOW = 0.80
MEM_HIGH = 1.02
# L4T -> JetPack (jetson_stats NVIDIA_JETPACK, rbonghi/jetson_stats @ f41d5cad,
# jtop/core/jetson_variables.py:46-76).
JETPACK = {
    "39.2.0": "7.2", "39.0.0": "7.2 EA", "38.4.0": "7.1", "38.2.2": "7.0", "38.2.1": "7.0",
    "38.2.0": "7.0",
    "36.5.0": "6.2.2", "36.4.7": "6.2.1", "36.4.4": "6.2.1", "36.4.3": "6.2",
    "36.4.2": "6.1 (rev1)", "36.4.0": "6.1", "36.3.0": "6.0", "36.2.0": "6.0 DP",
    "36.0.0": "6.0 EA",
    "35.6.4": "5.1.6", "35.6.3": "5.1.5", "35.6.2": "5.1.5", "35.6.1": "5.1.5",
    "35.6.0": "5.1.4", "35.5.0": "5.1.3", "35.4.1": "5.1.2", "35.3.1": "5.1.1",
    "35.2.1": "5.1", "35.1.0": "5.0.2",
}
SUPPORTED = "not a Jetson Orin or Thor, a DGX Spark or a GPU-less x86-64 host"


@dataclass(frozen=True)
class Identity:
    device: str  # catalog device id
    model_string: str
    module_id: str | None
    l4t: str | None  # e.g. "36.4.3"
    memory_gib: float
    arch: str
    gpu_name: str | None
    module_name: str | None = None  # NVIDIA's name of the module part number
    jetpack: str | None = None
    power_mode: str | None = None  # nvpmodel mode name (Jetsons with nvpmodel)
    power_mode_id: int | None = None
    bandwidth_gbs: float | None = None  # peak in that mode (catalog), else the device's
    carrier: str | None = None  # the carrier board's part number (Jetson device tree)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line for people: device, module, release, power mode, bandwidth."""
        parts = [self.device, self.model_string]
        if self.module_id:
            parts.append(f"module {self.module_id}"
                         + (f" ({self.module_name})" if self.module_name else ""))
        if self.l4t:
            parts.append(f"L4T {self.l4t}" + (f" / JetPack {self.jetpack}" if self.jetpack
                                              else ""))
        if self.power_mode:
            parts.append(f"power mode {self.power_mode} (id {self.power_mode_id})")
        if self.bandwidth_gbs:
            parts.append(f"{self.bandwidth_gbs:g} GB/s peak")
        parts.append(f"{self.memory_gib:g} GiB")
        return ", ".join(parts)


def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.replace("\0", "\n").strip()
    return text or None


def _l4t(text: str | None) -> str | None:
    if not text:
        return None
    m = _L4T.search(text)
    if not m:
        return None
    return f"{m.group(1)}.{m.group(2).strip('.')}"


def _memory_gib(text: str | None) -> float | None:
    if not text:
        return None
    m = _MEMTOTAL.search(text)
    return round(int(m.group(1)) / _GIB_KB, 1) if m else None


def _gpu_name(text: str | None) -> str | None:
    if not text:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    name = first.split(",")[0].strip()
    return name or None


def _check_memory(device: Device, memory_gib: float, why: str) -> None:
    lo, hi = device.memory_gib * MEM_LOW, device.memory_gib * MEM_HIGH
    if not lo <= memory_gib <= hi:
        raise IdentifyError(
            f"{why} says {device.id} ({device.memory_gib:g} GiB) but MemTotal is "
            f"{memory_gib:g} GiB (expected {lo:.1f}-{hi:.1f})"
        )


def parse_identity(files: Mapping[str, str | None], catalog: Catalog | None = None) -> Identity:
    """Identify the device from identity file contents (keys: `IDENTITY_FILES`; missing = None)."""
    cat = catalog or load_catalog()
    model = _clean(files.get("proc/device-tree/model"))
    compatible = files.get("proc/device-tree/compatible") or ""
    tegra_release = files.get("etc/nv_tegra_release")
    dgx_release = files.get("etc/dgx-release")
    gpu_name = _gpu_name(files.get("nvidia-smi.txt"))
    arch = (files.get("uname-m.txt") or "").strip()
    memory = _memory_gib(files.get("proc/meminfo"))
    l4t = _l4t(tegra_release)
    compat_items = [c.strip() for c in compatible.replace("\n", "\0").split("\0") if c.strip()]

    is_tegra = bool(tegra_release) or _SOC.search(compatible) is not None
    if not arch:
        arch = "aarch64" if is_tegra else "unknown"
    if memory is None:
        raise IdentifyError("cannot identify: proc/meminfo has no MemTotal")

    if is_tegra:
        ident = _jetson(cat, model, compat_items, l4t, memory, arch, gpu_name)
        return _with_power(ident, files, cat)

    dgx = _dgx_values(dgx_release)
    _refuse_dgx(cat, gpu_name, dgx)
    spark = next((d for d in cat.devices.values() if d.gpu_name and not d.is_jetson), None)
    is_spark_gpu = bool(gpu_name) and any(
        d.gpu_name == gpu_name for d in cat.devices.values() if d.gpu_name
    )
    if spark is not None and (is_spark_gpu or (dgx_release and arch == "aarch64")):
        device = next((d for d in cat.devices.values() if gpu_name and d.gpu_name == gpu_name),
                      spark)
        if arch != device.arch:
            raise IdentifyError(f"GPU {gpu_name} on a {arch} host is not a {device.model_string}")
        named = dgx.get("DGX_PRETTY_NAME") or dgx.get("DGX_NAME")
        if not is_spark_gpu and named and named not in (device.model_string,
                                                         device.model_string.split(" ", 1)[-1]):
            raise IdentifyError(f"unsupported hardware: etc/dgx-release names {named!r} "
                                f"(DGX_PLATFORM {dgx.get('DGX_PLATFORM', '?')!r}), {SUPPORTED}")
        _check_memory(device, memory, f"GPU {gpu_name}" if is_spark_gpu else "etc/dgx-release")
        return Identity(
            device=device.id,
            model_string=named or device.model_string,
            module_id=None,
            l4t=None,
            memory_gib=memory,
            arch=arch,
            gpu_name=gpu_name or device.gpu_name,
            bandwidth_gbs=device.bandwidth_gbs,
        )

    if not (model or gpu_name or dgx_release):
        cpu = _cpu_host(cat, arch, memory)
        if cpu is not None:
            return cpu
    raise _unsupported(model, gpu_name, dgx_release, arch)


def _unsupported(model: str | None, gpu_name: str | None, dgx_release: str | None,
                 arch: str) -> IdentifyError:
    what = ", ".join(x for x in (model and f"model {model!r}", gpu_name and f"GPU {gpu_name}",
                                 dgx_release and "DGX OS", arch) if x)
    return IdentifyError(f"unsupported hardware ({what}): {SUPPORTED}")



def _cpu_host(cat: Catalog, arch: str, memory: float) -> Identity | None:
    """A host with no device tree, no NVIDIA GPU (nvidia-smi absent or silent) and no DGX OS,
    of a CPU device's architecture (``uname -m``: x86_64): that device, with its own MemTotal
    (a generic host: the catalog's memory is the least it plans for)."""
    device = next((d for d in cat.devices.values() if d.is_cpu and d.arch == arch), None)
    if device is None:
        return None
    if memory < device.memory_gib * MEM_LOW:
        raise IdentifyError(f"{arch} host with {memory:g} GiB MemTotal: {device.id} needs at "
                            f"least {device.memory_gib * MEM_LOW:.1f} GiB")
    return Identity(device=device.id, model_string=device.model_string, module_id=None,
                    l4t=None, memory_gib=memory, arch=arch, gpu_name=None)


def _dgx_values(text: str | None) -> dict[str, str]:
    """``/etc/dgx-release``'s KEY="value" lines."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"').strip()
    return values


def _refuse_dgx(cat: Catalog, gpu_name: str | None, dgx: Mapping[str, str]) -> None:
    """Hardware the catalog refuses by its GPU or its /etc/dgx-release (DGX Station GB300)."""
    for r in cat.refused.values():
        why = ((gpu_name in r.gpu_names and f"GPU {gpu_name}")
               or (dgx.get("DGX_PLATFORM") in r.dgx_platforms
                   and f"DGX_PLATFORM {dgx['DGX_PLATFORM']!r}")
               or (dgx.get("DGX_NAME") in r.dgx_names and f"DGX_NAME {dgx['DGX_NAME']!r}"))
        if why:
            raise IdentifyError(f"unsupported hardware: {r.name} ({why}): {r.reason}")


def _with_power(ident: Identity, files: Mapping[str, str | None], cat: Catalog) -> Identity:
    """The power mode from /etc/nvpmodel.conf and nvpmodel's status file, and the catalog's
    bandwidth in that mode (no mode known: the device's peak on the host's L4T)."""
    state = state_from_files({"conf": files.get("etc/nvpmodel.conf"),
                              "status": files.get("var/lib/nvpmodel/status")})
    device = cat.devices[ident.device]
    if state is None or state.current is None:
        return dataclasses.replace(ident, bandwidth_gbs=device.peak_gbs(ident.l4t))
    bw, _ = mode_bandwidth(device, state.mode, cat.module(ident.module_id, ident.carrier),
                           ident.l4t)
    return dataclasses.replace(ident, power_mode=state.current[0],
                               power_mode_id=state.current[1], bandwidth_gbs=bw)


def _board(compat: list[str]) -> tuple[str | None, list[str]]:
    """The carrier part number (the first entry's part before "+") and the module ids, in order
    (``nvidia,p3740-0002+p3701-0008``, ``nvidia,p3701-0008``, ``nvidia,tegra234``)."""
    first = compat[0] if compat else ""
    carrier = (_MODULE_ID.findall(first.split("+", 1)[0]) or [None])[0] if "+" in first else None
    found = [mid for item in compat for mid in _MODULE_ID.findall(item)]
    return carrier, [m for m in dict.fromkeys(found) if m != carrier]


def _refuse_board(cat: Catalog, model: str | None, carrier: str | None,
                  modules: list[str]) -> None:
    for r in cat.refused.values():
        for board in r.boards:
            prefix, _, module = board.partition("+")
            if carrier and carrier.startswith(prefix) and module in modules:
                raise IdentifyError(f"unsupported Jetson: {r.name} ({model or 'unknown model'}, "
                                    f"board {carrier}+{module}): {r.reason}")


def _jetson(
    cat: Catalog,
    model: str | None,
    compat: list[str],
    l4t: str | None,
    memory: float,
    arch: str,
    gpu_name: str | None,
) -> Identity:
    carrier, found = _board(compat)
    _refuse_board(cat, model, carrier, found)
    known = [mid for mid in found if mid in cat.modules]
    devices = {cat.modules[mid].on(carrier).device for mid in known}
    if len(devices) > 1:
        raise IdentifyError(f"contradictory module ids in device-tree compatible: {known}")
    module: Module | None = None
    if known:
        module = cat.modules[known[0]].on(carrier)
        device = cat.devices[module.device]
        _check_memory(device, memory, f"module {module.id}")
    else:
        device = _by_model(cat, model, compat, found, memory)
    return Identity(
        device=device.id,
        model_string=model or device.model_string,
        module_id=module.id if module else None,
        l4t=l4t,
        memory_gib=memory,
        arch=arch,
        gpu_name=gpu_name,
        module_name=module.name if module else None,
        jetpack=JETPACK.get(l4t or ""),
        carrier=carrier,
    )


def _by_model(cat: Catalog, model: str | None, compat: list[str], found: list[str],
              memory: float) -> Device:
    """A Jetson without a known module id: by the model string and memory size (Orin only)."""
    families = {mid.split("-")[0] for mid in cat.modules}
    unknown = [mid for mid in found if mid.split("-")[0] in families]
    if unknown:  # a module of a known family we have no data for
        raise IdentifyError(
            f"unsupported Jetson module {unknown[0]} ({model or 'unknown model'}); "
            f"known: {', '.join(sorted(cat.modules))}"
        )
    soc_match = _SOC.search("\0".join(compat))
    soc = soc_match.group(1) if soc_match else ""
    candidates = [
        d for d in cat.devices.values()
        if d.is_jetson and model and model.startswith(d.model_string)
        and d.memory_gib * MEM_LOW <= memory <= d.memory_gib * MEM_HIGH
        and (not soc or soc == "tegra234")
    ]
    if len(candidates) != 1:
        mods = ",".join(found) or "none"
        raise IdentifyError(
            f"unsupported Jetson: model {model!r}, modules {mods}, "
            f"{soc or 'unknown SoC'}, {memory:g} GiB"
        )
    return candidates[0]


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def _run(argv: tuple[str, ...]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def read_identity_root(root: Path | str) -> dict[str, str | None]:
    """Read `IDENTITY_FILES` under ``root`` (missing file -> None).

    For the local machine (``root`` is ``/``), ``nvidia-smi.txt`` and ``uname-m.txt`` come from
    running ``nvidia-smi`` and ``uname -m`` when no such files exist under root.
    """
    base = Path(root)
    files: dict[str, str | None] = {}
    for key in IDENTITY_FILES:
        files[key] = next((t for p in identity_paths(key) if (t := _read(base / p)) is not None),
                          None)
    if base.resolve() == Path("/"):
        if files["nvidia-smi.txt"] is None:
            files["nvidia-smi.txt"] = _run(NVIDIA_SMI_CMD)
        if files["uname-m.txt"] is None:
            files["uname-m.txt"] = _run(("uname", "-m"))
    return files


_MARK = "@@specdec-file"
# Outputs of commands, not files under /.
_COMMANDS = {
    "nvidia-smi.txt": " ".join(NVIDIA_SMI_CMD),
    "uname-m.txt": "uname -m",
}


def identity_command(root: str = "/") -> str:
    """One read-only ``sh`` command printing every identity file after a marker line (for a
    fact: one SSH round trip); under ``/``, ``nvidia-smi.txt`` and ``uname-m.txt`` are the
    outputs of `NVIDIA_SMI_CMD` and ``uname -m`` (another ``root``: its files).

    ``@@specdec-file <name>`` precedes a present file (NULs of device-tree strings become
    newlines), ``@@specdec-file <name> missing`` stands for an absent one. Always exits 0.
    """
    base = root.rstrip("/")
    parts = []
    for name in IDENTITY_FILES:
        q = shlex.quote(name)
        if name in _COMMANDS and not base:
            cmd = _COMMANDS[name]
            binary = cmd.split()[0]
            parts.append(
                f"if command -v {binary} >/dev/null 2>&1; then echo {_MARK} {q}; "
                f"{cmd} 2>/dev/null || true; else echo {_MARK} {q} missing; fi"
            )
        else:
            branches = "; el".join(
                f"if [ -r {path} ]; then echo {_MARK} {q}; tr '\\000' '\\n' < {path}; echo"
                for path in (shlex.quote(f"{base}/{p}") for p in identity_paths(name))
            )
            parts.append(f"{branches}; else echo {_MARK} {q} missing; fi")
    parts.append("true")
    return "; ".join(parts)


def split_identity_output(lines: Iterable[str] | str) -> dict[str, str | None]:
    """`identity_command`'s output (text or lines) -> ``{relative path: content or None}`` for
    every identity file."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    files: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
    current: str | None = None
    buf: list[str] = []

    def flush() -> None:
        if current is not None:
            files[current] = "\n".join(buf).strip("\n") + "\n"

    for line in lines:
        if line.startswith(_MARK + " "):
            flush()
            words = line.split()
            name = words[1] if len(words) > 1 else ""
            buf = []
            current = None if len(words) > 2 and words[2] == "missing" else name
        elif current is not None:
            buf.append(line)
    flush()
    return files
