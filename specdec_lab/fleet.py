"""``lab up``, ``lab down`` and ``lab status``: a lab instance's life cycle.

Everything ``up`` makes is recorded in the instance's state file as soon as it exists
(namespaces, veths, mounts, PIDs with their start times), so ``down`` (and ``up``'s own
rollback on failure) removes exactly that, after checking every entry
(`specdec_lab.state`), and only processes the lab started. Instances (`specdec_lab.instance`)
run side by side: each has its own state, names, subnet and teardown.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import ssl
import string
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.catalog import load_catalog
from specdec.config import apikey, pki
from specdec.config.inventory import load_inventory
from specdec.engines.registry import engine
from specdec.errors import SpecdecError
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec_lab import dynamo, hubsvc, images, link, realmodel, vllmcpu
from specdec_lab import host as hostmod
from specdec_lab import sites as labsite
from specdec_lab.errors import LabError
from specdec_lab.footprint import netns_pss_kib
from specdec_lab.instance import Instance
from specdec_lab.rootfs import (
    CPU_LAYER,
    HOST_RECIPE,
    IMAGE_RECIPE,
    cached_rootfs,
    ensure_layer,
    ensure_rootfs,
)
from specdec_lab.spec import LabHost, lab_hosts
from specdec_lab.state import (
    HostRecord,
    check_host,
    instance_lock,
    load_state,
    own_dir,
    save_state,
)
from specdec_lab.system import Proc, first_child, proc_alive, run
from specdec_lab.teardown import teardown

__all__ = [
    "BOOT_TIMEOUT",
    "down",
    "host_status",
    "reboot",
    "set_link",
    "ssh_argv",
    "status",
    "up",
]

BOOT_TIMEOUT = float(os.environ.get("SPECDEC_LAB_BOOT_TIMEOUT", "180"))
_REQUIRED = ("systemd-nspawn", "ip", "docker-registry", "skopeo", "ssh", "ssh-keygen", "curl")
Log = Callable[[str], None]


def _noop(_msg: str) -> None:
    pass


def ssh_argv(h: LabHost, *command: str, timeout: int = 5) -> list[str]:
    """``ssh`` to a lab host as root with its instance's key (no host key checks: lab hosts
    only)."""
    return [
        "ssh", "-i", str(Instance(h.instance).key_file), "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={timeout}", "-o", "LogLevel=ERROR", f"root@{h.address}", *command,
    ]


def _ensure_key(inst: Instance) -> None:
    key, pub = inst.key_file, Path(str(inst.key_file) + ".pub")
    if key.is_file() and pub.is_file():
        return
    for p in (key, pub):
        p.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"specdec-lab-{inst.name}", "-f",
         str(key)], "generating the lab SSH key")


def _ensure_api_key(inst: Instance) -> None:
    """The instance's own API key (the inventory gives it as specdec_api_key_file)."""
    apikey.ensure_key(inst.api_key_file, create=True)


def _ensure_hf_token(inst: Instance) -> None:
    if inst.hf_token_file.is_file():
        return
    alphabet = string.ascii_letters + string.digits
    token = "hf_speclab" + "".join(secrets.choice(alphabet) for _ in range(26))
    fd = os.open(inst.hf_token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")


def _preflight(inst: Instance, hosts: list[LabHost]) -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, systemd-nspawn)")
    for tool in _REQUIRED:
        if shutil.which(tool) is None:
            pkg = {"systemd-nspawn": "systemd-container", "ip": "iproute2",
                   "ssh": "openssh-client", "ssh-keygen": "openssh-client"}.get(tool, tool)
            raise LabError(f"{tool} is not installed (apt-get install {pkg})")
    uncached = cached_rootfs(HOST_RECIPE) is None or cached_rootfs(IMAGE_RECIPE) is None
    if uncached and shutil.which("debootstrap") is None:
        raise LabError("debootstrap is not installed (apt-get install debootstrap)")
    for other in inst.others_up():
        try:
            subnet = (load_state(other) or {}).get("subnet")
        except LabError:
            continue
        if subnet == str(inst.subnet):
            raise LabError(f"lab instance {other.name!r} is up on {subnet}, the subnet of "
                           f"instance {inst.name!r}; choose another instance name")
    addrs = run(["ip", "-o", "-4", "addr", "show"], "ip addr show").stdout
    used = {w.split("/")[0] for line in addrs.splitlines() for w in line.split()[3:4]}
    for h in hosts:
        if Path(f"/run/netns/{h.netns}").exists():
            raise LabError(f"network namespace {h.netns} already exists (not made by this lab "
                           "run; remove it with 'ip netns del')", host=h.name)
        if Path(f"/sys/class/net/{h.veth}").exists():
            raise LabError(f"interface {h.veth} already exists", host=h.name)
        for a in (h.address, h.gateway):
            if a in used:
                raise LabError(f"address {a} is already in use on this machine", host=h.name)
        if h.port in (22, hostmod.REGISTRY_PORT):
            raise LabError(f"specdec_port={h.port}: port collision with the lab host's "
                           f"{'sshd' if h.port == 22 else 'registry'}", host=h.name)


def _record(inst: Instance, state: dict[str, Any], name: str, key: str, value: Any) -> None:
    if isinstance(value, Proc):  # a process gone before its start time was read: nothing
        value = value.to_dict() if value.start is not None else None
    state["hosts"][name][key] = value
    save_state(inst, state)


def _wait_tcp(address: str, port: int, deadline: float, banner: bytes | None = None) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=2) as s:
                if banner is None:
                    return True
                s.settimeout(3)
                if s.recv(64).startswith(banner):
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def _wait_registry(h: LabHost, deadline: float) -> None:
    while time.monotonic() < deadline:
        proc = subprocess.run(
            ["ip", "netns", "exec", h.netns, "curl", "-sf", "-o", "/dev/null",
             f"http://127.0.0.1:{hostmod.REGISTRY_PORT}/v2/"],
            capture_output=True, check=False,
        )
        if proc.returncode == 0:
            return
        time.sleep(0.2)
    raise LabError(f"the lab registry did not start (see {hostmod.host_dir(h)}/registry.log)",
                   host=h.name)


def _wait_booted(h: LabHost, nspawn: Proc, deadline: float) -> str:
    """Wait for sshd, then for systemd to finish starting (Docker included)."""
    while time.monotonic() < deadline:
        if not proc_alive(nspawn):
            log = hostmod.host_dir(h) / "console.log"
            tail = " ".join(log.read_text(errors="replace").split()[-30:]) if log.exists() else ""
            raise LabError(f"systemd-nspawn exited during boot: {tail[-200:]}", host=h.name)
        if _wait_tcp(h.address, 22, min(deadline, time.monotonic() + 2), banner=b"SSH-"):
            break
    else:
        raise LabError(f"sshd on {h.address} did not come up within {BOOT_TIMEOUT:g}s",
                       host=h.name)
    left = max(5, int(deadline - time.monotonic()))
    proc = subprocess.run(
        ssh_argv(h, f"timeout {left} systemctl is-system-running --wait; "
                 "systemctl is-active docker.service"),
        capture_output=True, text=True, check=False, timeout=left + 15,
    )
    lines = proc.stdout.split()
    system = lines[0] if lines else "unknown"
    docker = lines[1] if len(lines) > 1 else "unknown"
    if system not in ("running", "degraded") or docker != "active":
        raise LabError(f"did not finish booting: system {system}, docker {docker} "
                       f"{proc.stderr.strip()[:120]}", host=h.name)
    return system


def _drop_foreign_group_cas(inst: Instance, inventory: str, log: Log) -> None:
    """The instance's group CAs claimed by another inventory path (a checkout that moved, or a
    CI clone elsewhere): they are the lab's own state from hosts that are gone, so a fresh lab
    drops them instead of failing the deploy on `specdec.config.pki.group_ca_dir`'s refusal."""
    owner = pki.inventory_owner(str(Path(inventory).resolve()))
    for mark in sorted(inst.pki_dir.glob(f"*/{pki.OWNER_FILE}")):
        have = mark.read_text().strip()
        if have != owner:
            log(f"pki: {mark.parent.name}: held for {have}, removed")
            shutil.rmtree(mark.parent)


def up(inventory: str, *, limit: str | None = None, log: Log = _noop,
       instance: Instance | None = None) -> dict[str, Any]:
    """Boot the inventory's hosts as lab ``instance`` (default: from the environment). On any
    failure, remove everything made and raise."""
    inst = instance or Instance.from_env()
    hosts = lab_hosts(inventory, limit, inst)
    labsite.check_mirrors(hosts, inventory, limit)
    inst.dir.mkdir(parents=True, exist_ok=True)
    own_dir(inst)
    with instance_lock(inst):
        existing = load_state(inst)
        if existing is not None:
            names = ", ".join(existing.get("hosts", {})) or "no hosts"
            raise LabError(f"lab instance {inst.name!r} is already up ({names}, from "
                           f"{existing.get('inventory')}); run 'specdec lab down --instance "
                           f"{inst.name}' first")
        _preflight(inst, hosts)
        _drop_foreign_group_cas(inst, inventory, log)
        t0 = time.monotonic()
        cached = cached_rootfs(HOST_RECIPE) is not None and cached_rootfs(IMAGE_RECIPE) is not None
        log("rootfs: cached" if cached else "rootfs: building with debootstrap (once)")
        host_root = ensure_rootfs(HOST_RECIPE)
        image_root = ensure_rootfs(IMAGE_RECIPE)
        built = images.build_images(image_root, IMAGE_RECIPE.digest())
        log(f"images: {len(built.images)} mirrors of the catalog images in the lab registry")
        if any(h.engine == "dynamo" for h in hosts):
            dynamo.ensure_venv(log=log)
        roots = {"host": host_root}
        if any(load_catalog().device(h.device).is_cpu for h in hosts):
            roots["cpu"] = ensure_layer(CPU_LAYER)  # the real engine's OS packages
            vllmcpu.ensure_venv(log=log)  # the real engine, and real weights for its Hub
            realmodel.ensure_models(log=log)
        _ensure_key(inst)
        _ensure_hf_token(inst)
        _ensure_api_key(inst)
        tokens = [os.environ.get("HF_TOKEN", "").strip(),
                  inst.hf_token_file.read_text().strip()]

        state: dict[str, Any] = {
            "version": 2,
            "instance": inst.name,
            "subnet": str(inst.subnet),
            "inventory": str(Path(inventory).resolve()),
            "started": time.time(),
            "ready": False,
            "hosts": {h.name: {"spec": h.to_dict()} for h in hosts},
        }
        inst.hosts_dir.mkdir(parents=True, exist_ok=True)
        save_state(inst, state)
        log(f"instance {inst.name}: {inst.subnet}, state in {inst.dir}")
        try:
            _bring_up(inst, state, hosts, roots, built, log)
            # The lab's Hub on the control side, and the site's routes to its mirror host.
            state["hub"] = hubsvc.start(inst, hosts, tokens)
            save_state(inst, state)
            labsite.routes(hosts, inventory, limit)
            log(f"hub: {len(hosts)} gateway(s), ports {hubsvc.HUB_PORT}/{hubsvc.CDN_PORT}, "
                f"weights at scale {state['hub']['scale']:g}")
        except BaseException as exc:
            log("rolling back")
            left = teardown(inst, state, _noop)
            if left:
                log("rollback left: " + "; ".join(left))
            if isinstance(exc, LabError | KeyboardInterrupt):
                raise
            raise LabError(f"lab up failed: {type(exc).__name__}: {exc}") from None
        state["ready"] = True
        state["up_seconds"] = round(time.monotonic() - t0, 1)
        state["rootfs_cached"] = cached
        save_state(inst, state)
        return state


INOTIFY = Path("/proc/sys/fs/inotify/max_user_instances")


def _inotify_room(n: int, log: Log) -> None:
    """Each booted host's systemd, journald, dbus and Docker hold inotify instances of root
    (no user namespace), counted against one per-user limit, 128 by default: about 20 hosts
    boot, the next one's nspawn exits. Raise it (never lower it) to room for ``n`` more hosts
    beside what runs."""
    try:
        now = int(INOTIFY.read_text())
    except (OSError, ValueError):
        return
    want = max(1024, 128 + 16 * n)
    if now < want:
        INOTIFY.write_text(f"{want}\n")
        log(f"fs.inotify.max_user_instances: {now} -> {want} (systemd in {n} hosts)")


def _bring_up(inst: Instance, state: dict[str, Any], hosts: list[LabHost], roots: dict[str, Path],
              built: images.BuiltImages, log: Log) -> None:
    hostmod.ensure_nspawn_run()
    _inotify_room(len(hosts), log)
    deadline = time.monotonic() + 30
    for h in hosts:
        hostmod.host_dir(h).mkdir(parents=True, exist_ok=True)
        _record(inst, state, h.name, "netns", h.netns)
        _record(inst, state, h.name, "veth", h.veth)
        hostmod.create_netns(h)
        if h.link is not None:
            _record(inst, state, h.name, "link", link.apply(
                h.netns, h.veth, h.link, hostmod.host_dir(h) / "link.log"))
            log(f"{h.name}: link {h.link}")
    # One registry per instance, on its first host (a site's registry host): every other host
    # pulls through it (`host.pull_through`), as a fleet's devices pull from their site's.
    site = hosts[0]
    deadline = time.monotonic() + 30 + len(hosts)
    _record(inst, state, site.name, "registry", hostmod.start_registry(site))
    state["registry_host"] = site.name
    hostmod.lan_routes(hosts, str(inst.subnet))
    _wait_registry(site, deadline)
    for h in hosts[1:]:
        hostmod.pull_through(h, site)
        _wait_registry(h, deadline)
    images.push(built, site.netns)
    # The inventory pins these while the lab is up (see images.pinned_ref).
    state["images"] = built.pinned()
    save_state(inst, state)
    errors: list[LabError] = []
    boot_s: dict[str, float] = {}
    slack = 2.0 * len(hosts)  # hosts boot side by side: the later ones slow the earlier

    def wait(h: LabHost, rec: dict[str, Any] | None, t0: float) -> None:
        try:
            if rec is None:
                raise LabError("systemd-nspawn exited at once", host=h.name)
            system = _wait_booted(h, Proc(rec["pid"], rec["start"]), t0 + BOOT_TIMEOUT + slack)
            boot_s[h.name] = round(time.monotonic() - t0, 1)
            log(f"{h.name}: up ({system}) in {boot_s[h.name]:.1f}s")
        except LabError as exc:
            errors.append(exc)
        except Exception as exc:  # noqa: BLE001 - reported as one line below
            errors.append(LabError(f"{type(exc).__name__}: {exc}", host=h.name))

    threads = []
    for h in hosts:  # each host's boot is timed from its own start (Proc records it)
        root = hostmod.host_dir(h) / "root"
        _record(inst, state, h.name, "root", str(root))
        hostmod.mount_root(h, roots["cpu" if load_catalog().device(h.device).is_cpu
                                    else "host"])
        hostmod.prepare_root(h, root)
        _record(inst, state, h.name, "nspawn", hostmod.boot(h, root))
        log(f"{h.name}: booting {h.device} at {h.address}")
        threads.append(threading.Thread(target=wait, args=(
            h, state["hosts"][h.name]["nspawn"], time.monotonic())))
        threads[-1].start()
    for t in threads:
        t.join()
    for name, took in boot_s.items():
        state["hosts"][name]["boot_s"] = took
    save_state(inst, state)
    if errors:
        raise errors[0]


def down(inventory: str | None = None, *, log: Log = _noop,
         instance: Instance | None = None) -> None:
    """Tear down lab ``instance`` as its state file records it (``inventory`` is
    informational). Entries that fail the checks are refused and left alone: then this
    raises, naming each, and the state file stays."""
    inst = instance or Instance.from_env()
    if not inst.state_file.is_file() and not inst.state_file.is_symlink():
        log(f"lab instance {inst.name} is not up")
        return
    own_dir(inst)
    with instance_lock(inst):
        state = load_state(inst)
        if state is None:
            log(f"lab instance {inst.name} is not up")
            return
        problems = teardown(inst, state, log)
    if problems:
        raise LabError(f"lab down: instance {inst.name} not fully removed, {inst.state_file} "
                       f"kept: {'; '.join(problems)}")


def _http_ok(url: str, key: str | None, ca: Path | None = None, timeout: float = 3.0) -> bool:
    """GET ``url`` from here with the instance's API key (every lab host's API needs it),
    trusting ``ca`` (the instance's API CA)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        ctx = ssl.create_default_context(cafile=str(ca)) if ca and ca.is_file() else None
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return 200 <= resp.status < 300
    except OSError:
        return False
    except ValueError:
        return False


def _instance_key(inst: Instance) -> str | None:
    try:
        return apikey.read_key(inst.api_key_file)
    except SpecdecError:
        return None


def host_status(h: LabHost, up_: bool, probe: str | None = None,
                key: str | None = None) -> dict[str, Any]:
    """``probe``: a URL the host itself asks (a Dynamo worker-only member: its worker's system
    ``/health``, open to the group's members only); otherwise its OpenAI ``/v1/models`` from
    here, with the instance's API key."""
    rec: dict[str, Any] = {"host": h.name, "device": h.device, "address": h.address,
                           "reachable": False, "service_active": False, "serving": False}
    if not up_:
        return rec
    ask = (f"; curl -s -o /dev/null -m 3 -w ' %{{http_code}}' {shlex.quote(probe)}"
           if probe else "")
    proc = subprocess.run(
        ssh_argv(h, f"systemctl is-active specdec-engine.service || true{ask}", timeout=4),
        capture_output=True, text=True, check=False, timeout=20,
    )
    words = proc.stdout.split()
    rec["reachable"] = proc.returncode == 0
    rec["service_active"] = rec["reachable"] and bool(words) and words[0] == "active"
    rec["serving"] = (rec["reachable"] and words[-1:] == ["200"]) if probe else \
        _http_ok(f"https://{h.address}:{h.port}/v1/models", key,
                 Instance(h.instance).api_ca_file)
    return rec


def _probes(inventory: str, limit: str | None) -> dict[str, str]:
    """Dynamo worker-only members serve no OpenAI API: their worker's system /health, asked by
    the member itself."""
    settings = parse_hosts(load_inventory(inventory, limit))
    groups = groups_of(settings)
    out = {}
    for s in settings:
        g = groups.get(s.host)
        if g is not None and g.frontend != s.host:
            port = engine(s.engine).options(s).system_port
            out[s.host] = f"http://{g.address(s.host)}:{port}/health"
    return out


def status(inventory: str, limit: str | None = None,
           instance: Instance | None = None) -> list[dict[str, Any]]:
    """Per inventory host: host, device, address, reachable, service_active, serving."""
    inst = instance or Instance.from_env()
    hosts = lab_hosts(inventory, limit, inst)
    state = load_state(inst) or {}
    recorded = state.get("hosts", {})
    results: dict[str, dict[str, Any]] = {}
    probes = _probes(inventory, limit) if recorded else {}

    key = _instance_key(inst)

    def one(h: LabHost) -> None:
        results[h.name] = host_status(h, h.name in recorded, probes.get(h.name), key)

    threads = [threading.Thread(target=one, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    links = {h.netns: [int(rec["pid"])] for h in hosts
             if isinstance(rec := recorded.get(h.name, {}).get("link"), dict)
             and isinstance(rec.get("pid"), int)}
    pss = netns_pss_kib([h.netns for h in hosts if h.name in recorded], links)
    for h in hosts:
        if h.netns in pss:
            results[h.name]["memory_mib"] = round(pss[h.netns] / 1024, 1)
            results[h.name]["boot_s"] = recorded[h.name].get("boot_s")
            results[h.name]["registry"] = recorded[h.name].get("registry") is not None
    return [results[h.name] for h in hosts]


def _recorded(inst: Instance, name: str) -> HostRecord:
    """The host's entry in the instance's state, checked as ``lab down`` checks it."""
    state = load_state(inst)
    if state is None:
        raise LabError(f"lab instance {inst.name!r} is not up (specdec lab up INVENTORY)")
    hosts = state.get("hosts")
    hosts = hosts if isinstance(hosts, dict) else {}
    if name not in hosts:
        raise LabError(f"host {name!r} is not in lab instance {inst.name!r}; hosts: "
                       f"{', '.join(sorted(map(str, hosts)))}")
    return check_host(inst, name, hosts[name])


def set_link(name: str, up_: bool, instance: Instance | None = None) -> None:
    """Cut (``up_=False``) or restore the host's network link: a partition, as when a device
    drops off the network. Its engine and systemd keep running."""
    veth = _recorded(instance or Instance.from_env(), name).veth or ""
    if not veth or not Path(f"/sys/class/net/{veth}").exists():
        raise LabError(f"{name}: its link {veth!r} does not exist")
    run(["ip", "link", "set", veth, "up" if up_ else "down"], f"ip link set {veth}")


def reboot(name: str, *, wait: bool = True, log: Log = _noop,
           instance: Instance | None = None) -> float:
    """Reboot the host (``systemctl reboot`` inside; the boot loop starts it again) and, with
    ``wait``, return when it has booted. Returns the seconds it took."""
    r = _recorded(instance or Instance.from_env(), name)
    h, loop = r.spec, r.nspawn
    if loop is None or not proc_alive(loop):
        raise LabError(f"{name}: its systemd-nspawn is not running")
    before = first_child(loop.pid)
    t0 = time.monotonic()
    subprocess.run(ssh_argv(h, "systemctl reboot"), capture_output=True, check=False,
                   timeout=30)
    log(f"{name}: rebooting")
    if not wait:
        return 0.0
    deadline = t0 + BOOT_TIMEOUT
    while time.monotonic() < deadline and first_child(loop.pid) in (before, None):
        if not proc_alive(loop):
            raise LabError(f"{name}: the boot loop ended instead of rebooting")
        time.sleep(0.2)
    _wait_booted(h, loop, deadline)
    took = time.monotonic() - t0
    log(f"{name}: up again after {took:.1f}s")
    return took
