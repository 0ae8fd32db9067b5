"""The GPU's device nodes a native engine's unit may open (``DevicePolicy=closed`` and these
``DeviceAllow=`` entries), from NVIDIA's own sources at the releases specdec runs (pure data).

**Jetson Orin, L4T R36** (JetPack 6; the catalog's Jetson images are r36.4): the ``dev`` entries
of NVIDIA's container mount spec ``/etc/nvidia-container-runtime/host-files-for-container.d/
devices.csv``, what the NVIDIA container toolkit gives a CUDA container on that release
(NVIDIA/nvidia-container-toolkit internal/platform-support/tegra/csv/csv.go, DefaultFileList;
since R36.3 NVIDIA ships l4t.csv split into devices.csv and drivers.csv). `L4T_R36_DEVICES_CSV`
is that file verbatim as OE4T/meta-tegra's scarthgap branch carries it
(recipes-bsp/tegra-binaries/tegra-configs/devices.csv, commit dc3a9d5b "update the container CSV
files for R36.3.0"; the R36.4.0, 36.4.3, 36.4.4 and 36.5.0 updates changed drivers.csv only),
the same as the toolkit's own fixture testdata/lookup/rootfs-orin/etc/nvidia-container-runtime/
host-files-for-container.d/devices.csv (f9765b94). A path entry names one node (``DeviceAllow=``
takes no glob in a path, systemd.resource-control(5)); the two globs, ``/dev/dri/card*`` and
``/dev/dri/renderD*``, are DRM's nodes, allowed by the group name DRM registers in
/proc/devices, ``drm`` (linux drivers/gpu/drm/drm_drv.c drm_core_init:
``register_chrdev(DRM_MAJOR, "drm", ...)``, major 226); ``dir`` entries are directories of
links, no device. ``/dev/nvhost-ctrl`` is not in it (older lists had it).

**DGX Spark** (GB10; driver 580, NVIDIA's open kernel modules): the driver's character device
regions by their /proc/devices names (NVIDIA/open-gpu-kernel-modules 580.95.05):
``nvidia`` (major 195, /dev/nvidia0..; kernel-open/nvidia/nv.c:955-956), ``nvidiactl``
(195:255; nv.c:962-963), ``nvidia-modeset`` (195:254; kernel-open/nvidia-modeset/
nvidia-modeset-linux.c:2026), ``nvidia-uvm`` (a dynamic major: /dev/nvidia-uvm minor 0,
/dev/nvidia-uvm-tools minor 1; kernel-open/nvidia-uvm/uvm.c:43,1138, uvm_common.h:46-47) and
``nvidia-caps`` (dynamic: /dev/nvidia-caps/nvidia-cap*; kernel-open/nvidia/nv-caps.c:823-826).
``nvidia-frontend``, which older lists name, is gone since 545.23.06: it was
kernel-open/nvidia/nv-frontend.c's ``register_chrdev(..., "nvidia-frontend", ...)`` up to
535.288.01; from 545.23.06 to 595.45.04 (the first and last tag of every major line checked)
nv.c registers ``nvidia`` instead, so ``char-nvidia-frontend`` matches nothing on a Spark.
"""

from __future__ import annotations

__all__ = ["L4T_R36_DEVICES_CSV", "SPARK_GROUPS", "jetson_entries"]

L4T_R36_DEVICES_CSV = """\
dev, /dev/dri/card*
dev, /dev/dri/renderD*
dir, /dev/dri/by-path
dev, /dev/fb0
dev, /dev/fb1
dev, /dev/host1x-fence
dev, /dev/nvhost-as-gpu
dev, /dev/nvhost-ctrl-gpu
dev, /dev/nvhost-ctrl-nvdla0
dev, /dev/nvhost-ctrl-nvdla1
dev, /dev/nvhost-ctrl-pva0
dev, /dev/nvhost-ctxsw-gpu
dev, /dev/nvhost-dbg-gpu
dev, /dev/nvhost-gpu
dev, /dev/nvhost-nvsched-gpu
dev, /dev/nvhost-power-gpu
dev, /dev/nvhost-prof-ctx-gpu
dev, /dev/nvhost-prof-dev-gpu
dev, /dev/nvhost-prof-gpu
dev, /dev/nvhost-sched-gpu
dev, /dev/nvhost-tsg-gpu
dev, /dev/nvgpu/igpu0/as
dev, /dev/nvgpu/igpu0/channel
dev, /dev/nvgpu/igpu0/ctrl
dev, /dev/nvgpu/igpu0/ctxsw
dev, /dev/nvgpu/igpu0/dbg
dev, /dev/nvgpu/igpu0/nvsched
dev, /dev/nvgpu/igpu0/power
dev, /dev/nvgpu/igpu0/prof
dev, /dev/nvgpu/igpu0/prof-ctx
dev, /dev/nvgpu/igpu0/prof-dev
dev, /dev/nvgpu/igpu0/sched
dev, /dev/nvgpu/igpu0/tsg
dev, /dev/nvidia-modeset
dev, /dev/nvidia0
dev, /dev/nvidiactl
dev, /dev/nvmap
dev, /dev/nvsciipc
dev, /dev/v4l2-nvdec
dev, /dev/v4l2-nvenc
"""
# A glob of the CSV -> the /proc/devices group of the driver that makes those nodes.
_GLOB_GROUPS = {"/dev/dri/card*": "char-drm", "/dev/dri/renderD*": "char-drm"}
SPARK_GROUPS = ("char-nvidia", "char-nvidiactl", "char-nvidia-modeset", "char-nvidia-uvm",
                "char-nvidia-caps")


def jetson_entries(csv: str = L4T_R36_DEVICES_CSV) -> tuple[str, ...]:
    """The ``DeviceAllow=`` specifiers of a mount spec's device entries, in its order, once."""
    out: list[str] = []
    for line in csv.splitlines():
        kind, _, path = (p.strip() for p in line.partition(","))
        if kind != "dev":
            continue
        entry = _GLOB_GROUPS.get(path, path)
        if "*" in entry or "?" in entry:
            raise ValueError(f"{path}: a glob with no device group")
        if entry not in out:
            out.append(entry)
    return tuple(out)
