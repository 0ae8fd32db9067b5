"""systemd sandboxing for every unit specdec writes, as unit directive lines (pure).

One policy per kind of process, each scoring at most 4.0 with ``systemd-analyze security
--offline=yes`` (`tests/unit/test_unit_security.py`) and using only directives of systemd 249
(Ubuntu 22.04, L4T r36 / JetPack 6; DGX OS has 255, Debian 12 252):

* ``gpu``: an engine on the GPU (the native vLLM / trtllm-serve / Dynamo worker). The GPU's
  device nodes are the only devices (``DevicePolicy=closed``): on a Jetson the nodes NVIDIA's
  L4T creates for CUDA (``/dev/nvmap``, the nvgpu nodes under their legacy ``nvhost-*-gpu``
  names and ``/dev/nvgpu/igpu0/*``: nvgpu os/linux/ioctl.c ``dev_node_list``, nvgpu-ctrl.h;
  NVIDIA's container list ``/etc/nvidia-container-runtime/host-files-for-container.d/l4t.csv``),
  owned by group ``video`` (L4T's udev rules: ``KERNEL=="nvhost-*", GROUP="video",
  MODE="0660"``), hence ``SupplementaryGroups=video``; on a DGX Spark the driver's character
  devices by their /proc/devices names: ``nvidia`` (major 195: /dev/nvidia0.., and nvidiactl
  and nvidia-modeset on the same major), ``nvidia-uvm``, ``nvidia-caps`` (NVIDIA/open-gpu-kernel-
  modules 580.95.05 kernel-open/nvidia/nv.c:955-963, nvidia-uvm/uvm.c:43, nvidia/nv-caps.c:823;
  the driver named the GPU region ``nvidia-frontend`` up to 535.x and ``nvidia`` from 545.23.06:
  NVIDIA/nvidia-container-toolkit v1.20.0 internal/info/proc/devices/devices.go:35-36 knows both,
  and Spark's driver is 580). No ``ProcSubset=pid`` (CUDA reads
  /proc/driver/nvidia, vLLM /proc/meminfo) and no ``MemoryDenyWriteExecute`` (Triton and
  torch JIT); writes only to its cache directory.
* ``docker``: the docker CLI that runs a container (the container's own limits are
  ``docker run`` flags, `specdec.render.files`): only the Docker socket (AF_UNIX), no network of its
  own.
* ``service``: a network service without the GPU (Dynamo's frontend, etcd, the API proxy).
* ``admin``: root tools that change the host (the firewall, the guard): only the capability
  they need.

``IPAddressAllow=``/``IPAddressDeny=`` (systemd.resource-control(5), cgroup BPF) confine each
unit's sockets, the ephemeral ones a process opens on its own included, to the peers it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["JETSON_GPU_NODES", "SPARK_GPU_GROUPS", "admin", "docker_cli", "gpu", "service"]

# Common to all: the kernel, clock, hostname, cgroups, other users' processes, personality,
# namespaces, realtime, set-uid, keyring, IPC objects, syscalls of other architectures.
_BASE = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "KeyringMode=private",
    "SystemCallArchitectures=native",
    "SystemCallErrorNumber=EPERM",
    "UMask=0077",
)
_NO_CAPS = ("CapabilityBoundingSet=", "AmbientCapabilities=")
_INET = "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"

# Jetson Orin, L4T r36: CUDA's nodes (see the module doc); systemd skips a path that is absent.
JETSON_GPU_NODES = (
    "/dev/nvmap", "/dev/nvhost-ctrl", "/dev/nvhost-ctrl-gpu", "/dev/nvhost-gpu",
    "/dev/nvhost-as-gpu", "/dev/nvhost-tsg-gpu", "/dev/nvhost-power-gpu",
    "/dev/nvhost-prof-gpu", "/dev/nvhost-dbg-gpu", "/dev/nvhost-sched-gpu",
    "/dev/nvhost-nvsched-gpu", "/dev/nvgpu/igpu0/ctrl", "/dev/nvgpu/igpu0/as",
    "/dev/nvgpu/igpu0/channel", "/dev/nvgpu/igpu0/tsg", "/dev/nvgpu/igpu0/power",
    "/dev/nvgpu/igpu0/prof", "/dev/nvgpu/igpu0/nvsched",
)
# DGX Spark (GB10, driver 580): /proc/devices group names ("char-nvidia" is major 195 whole).
SPARK_GPU_GROUPS = ("char-nvidia", "char-nvidia-uvm", "char-nvidia-caps")


def _ip_allow(peers: Sequence[str] | None) -> list[str]:
    """``None``: any peer; otherwise loopback and ``peers`` (CIDRs) only."""
    if peers is None:
        return []
    return ["IPAddressDeny=any", "IPAddressAllow=localhost" +
            "".join(f" {p}" for p in peers)]


def gpu(jetson: bool, rw_paths: Sequence[str], peers: Sequence[str] | None = ()) -> list[str]:
    """An engine on the GPU. ``peers``: networks it talks to besides loopback (a serving group's
    members), None for any."""
    devices = ([f"DeviceAllow={p} rw" for p in JETSON_GPU_NODES] if jetson
               else [f"DeviceAllow={g} rw" for g in SPARK_GPU_GROUPS])
    return [
        *_BASE, *_NO_CAPS, "RemoveIPC=yes", _INET + " AF_NETLINK",
        "SystemCallFilter=@system-service", "DevicePolicy=closed", *devices,
        *(["SupplementaryGroups=video"] if jetson else []),
        *[f"ReadWritePaths={p}" for p in rw_paths], *_ip_allow(peers),
    ]


def docker_cli() -> list[str]:
    """The docker CLI of a containerised engine or frontend: the Docker socket only (a path
    AF_UNIX socket works from a private network namespace: security.md Q6, tested)."""
    return [*_BASE, *_NO_CAPS, "PrivateNetwork=yes", "PrivateDevices=yes",
            "RestrictAddressFamilies=AF_UNIX", "IPAddressDeny=any", "MemoryDenyWriteExecute=yes",
            "SystemCallFilter=@system-service", "ProcSubset=pid", "RemoveIPC=yes"]


def service(rw_paths: Sequence[str] = (), peers: Sequence[str] | None = (),
            jit: bool = False) -> list[str]:
    """A network service without devices. ``jit``: it generates code at run time (Python
    with native extensions: no MemoryDenyWriteExecute)."""
    return [*_BASE, *_NO_CAPS, "RemoveIPC=yes", "PrivateDevices=yes", "PrivateUsers=yes", _INET,
            "SystemCallFilter=@system-service", *([] if jit else ["MemoryDenyWriteExecute=yes"]),
            *[f"ReadWritePaths={p}" for p in rw_paths], *_ip_allow(peers)]


def admin(capabilities: Sequence[str], families: str, rw_paths: Sequence[str] = ()
          ) -> list[str]:
    """A root tool: only ``capabilities``, only the address ``families`` it uses."""
    return [*_BASE, f"CapabilityBoundingSet={' '.join(capabilities)}", "PrivateDevices=yes",
            "MemoryDenyWriteExecute=yes", f"RestrictAddressFamilies={families}",
            "SystemCallFilter=@system-service", "IPAddressDeny=any",
            *[f"ReadWritePaths={p}" for p in rw_paths]]
