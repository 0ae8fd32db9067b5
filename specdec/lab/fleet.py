"""``lab up``, ``lab down`` and ``lab status``: the emulated fleet's life cycle.

Everything ``up`` makes is recorded in `STATE_FILE` as soon as it exists (namespaces, veths,
mounts, PIDs with their start times), so ``down`` (and ``up``'s own rollback on failure)
removes exactly that, and only processes the lab started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import socket
import string
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specdec.errors import LabError
from specdec.lab import host as hostmod
from specdec.lab import images
from specdec.lab.paths import HOSTS_DIR, KEY_FILE, LOCK_FILE, STATE_DIR, STATE_FILE
from specdec.lab.rootfs import HOST_RECIPE, IMAGE_RECIPE, cached_rootfs, ensure_rootfs
from specdec.lab.spec import LabHost, lab_hosts
from specdec.lab.system import Proc, is_mounted, proc_alive, run, stop_process

__all__ = [
    "HF_TOKEN_FILE",
    "NSPAWN_RUN",
    "down",
    "host_status",
    "load_state",
    "ssh_argv",
    "status",
    "up",
]

NSPAWN_RUN = Path("/run/systemd/nspawn")
# A stand-in Hugging Face token for the emulated Hub (gated repos need *a* token); the lab
# inventory uses it when $HF_TOKEN is not set.
HF_TOKEN_FILE = STATE_DIR / "hf_token"
BOOT_TIMEOUT = float(os.environ.get("SPECDEC_LAB_BOOT_TIMEOUT", "180"))
_REQUIRED = ("systemd-nspawn", "ip", "docker-registry", "skopeo", "ssh", "ssh-keygen", "curl")
Log = Callable[[str], None]


def _noop(_msg: str) -> None:
    pass


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabError(f"another 'specdec lab' command holds {LOCK_FILE}") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_state() -> dict[str, Any] | None:
    try:
        doc = json.loads(STATE_FILE.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"{STATE_FILE}: unreadable lab state ({exc}); remove it by hand") from None
    return doc if isinstance(doc, dict) else None


def _save_state(state: dict[str, Any]) -> None:
    tmp = STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    tmp.replace(STATE_FILE)


def ssh_argv(address: str, *command: str, timeout: int = 5) -> list[str]:
    """``ssh`` to a lab host as root with the lab key (no host key checks: lab hosts only)."""
    return [
        "ssh", "-i", str(KEY_FILE), "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={timeout}", "-o", "LogLevel=ERROR", f"root@{address}", *command,
    ]


def _ensure_key() -> None:
    if KEY_FILE.is_file() and Path(str(KEY_FILE) + ".pub").is_file():
        return
    KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
    for p in (KEY_FILE, Path(str(KEY_FILE) + ".pub")):
        p.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specdec-lab", "-f",
         str(KEY_FILE)], "generating the lab SSH key")


def _ensure_hf_token() -> None:
    if HF_TOKEN_FILE.is_file():
        return
    alphabet = string.ascii_letters + string.digits
    token = "hf_speclab" + "".join(secrets.choice(alphabet) for _ in range(26))
    fd = os.open(HF_TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")


def _preflight(hosts: list[LabHost]) -> None:
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


def _record(state: dict[str, Any], name: str, key: str, value: Any) -> None:
    state["hosts"][name][key] = value
    _save_state(state)


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
        ssh_argv(h.address, f"timeout {left} systemctl is-system-running --wait; "
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


def up(inventory: str, *, limit: str | None = None, log: Log = _noop) -> dict[str, Any]:
    """Boot the inventory's lab hosts. On any failure, remove everything made and raise."""
    hosts = lab_hosts(inventory, limit)
    with _lock():
        existing = load_state()
        if existing is not None:
            names = ", ".join(existing.get("hosts", {})) or "no hosts"
            raise LabError(f"the lab is already up ({names}, from "
                           f"{existing.get('inventory')}); run 'specdec lab down' first")
        _preflight(hosts)
        t0 = time.monotonic()
        cached = cached_rootfs(HOST_RECIPE) is not None and cached_rootfs(IMAGE_RECIPE) is not None
        log("rootfs: cached" if cached else "rootfs: building with debootstrap (once)")
        host_root = ensure_rootfs(HOST_RECIPE)
        image_root = ensure_rootfs(IMAGE_RECIPE)
        built = images.build_images(image_root, IMAGE_RECIPE.digest())
        log(f"images: {', '.join(built.refs.values())}")
        _ensure_key()
        _ensure_hf_token()

        state: dict[str, Any] = {
            "version": 1,
            "inventory": str(Path(inventory).resolve()),
            "started": time.time(),
            "ready": False,
            "mounted_nspawn_tmpfs": False,
            "hosts": {h.name: {"spec": h.to_dict()} for h in hosts},
        }
        HOSTS_DIR.mkdir(parents=True, exist_ok=True)
        _save_state(state)
        try:
            _bring_up(state, hosts, host_root, built, log)
        except BaseException as exc:
            log("rolling back")
            _teardown(state, _noop)
            if isinstance(exc, LabError):
                raise
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise LabError(f"lab up failed: {type(exc).__name__}: {exc}") from None
        state["ready"] = True
        state["up_seconds"] = round(time.monotonic() - t0, 1)
        state["rootfs_cached"] = cached
        _save_state(state)
        return state


def _bring_up(state: dict[str, Any], hosts: list[LabHost], host_root: Path,
              built: images.BuiltImages, log: Log) -> None:
    if not is_mounted(NSPAWN_RUN):
        # nspawn keeps mount propagation dirs here; on a tmpfs it can clean them up.
        NSPAWN_RUN.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", "mode=0755", "specdec-lab-nspawn", str(NSPAWN_RUN)],
            f"mounting a tmpfs on {NSPAWN_RUN}")
        state["mounted_nspawn_tmpfs"] = True
        _save_state(state)
    deadline = time.monotonic() + 30
    for h in hosts:
        hostmod.host_dir(h).mkdir(parents=True, exist_ok=True)
        _record(state, h.name, "netns", h.netns)
        _record(state, h.name, "veth", h.veth)
        hostmod.create_netns(h)
        _record(state, h.name, "registry", hostmod.start_registry(h).to_dict())
    for h in hosts:
        _wait_registry(h, deadline)
    images.push(built, hosts[0].netns)
    # The inventory pins these while the lab is up (see images.pinned_ref).
    state["images"] = {e: f"{built.refs[e]}@{built.digests[e]}" for e in built.refs}
    _save_state(state)
    for h in hosts:
        root = hostmod.host_dir(h) / "root"
        _record(state, h.name, "root", str(root))
        hostmod.mount_root(h, host_root)
        hostmod.prepare_root(h, root)
        _record(state, h.name, "nspawn", hostmod.boot(h, root).to_dict())
        log(f"{h.name}: booting {h.device} at {h.address}")
    deadline = time.monotonic() + BOOT_TIMEOUT
    errors: list[LabError] = []

    def wait(h: LabHost) -> None:
        try:
            nspawn = Proc.from_dict(state["hosts"][h.name]["nspawn"])
            assert nspawn is not None
            system = _wait_booted(h, nspawn, deadline)
            log(f"{h.name}: up ({system})")
        except LabError as exc:
            errors.append(exc)
        except Exception as exc:  # noqa: BLE001 - reported as one line below
            errors.append(LabError(f"{type(exc).__name__}: {exc}", host=h.name))

    threads = [threading.Thread(target=wait, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _first_child(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _teardown(state: dict[str, Any], log: Log) -> list[str]:
    """Remove everything ``state`` records; returns problems that remain (empty = clean)."""
    problems: list[str] = []
    recs = state.get("hosts", {})

    def stop_host(name: str, rec: dict[str, Any]) -> None:
        loop = Proc.from_dict(rec.get("nspawn"))
        if proc_alive(loop):
            assert loop is not None
            # boot loop → nspawn → the container's PID 1 (killing it ends its PID namespace)
            child = _first_child(loop.pid)
            nspawn = Proc(child) if child else None
            pid1 = _first_child(child) if child else None
            leader = Proc(pid1) if pid1 else None
            # SIGTERM makes nspawn power the container off cleanly (units, Docker stop).
            stop_process(loop, grace=30)
            for p in (nspawn, leader):
                if p is not None and proc_alive(p):
                    stop_process(p, grace=5)
        stop_process(Proc.from_dict(rec.get("registry")), grace=5)

    threads = [threading.Thread(target=stop_host, args=(n, r)) for n, r in recs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, rec in recs.items():
        for key in ("nspawn", "registry"):
            p = Proc.from_dict(rec.get(key))
            if proc_alive(p):
                problems.append(f"{name}: {key} process {p.pid if p else '?'} still running")
        root = rec.get("root")
        if root:
            hostmod.unmount_root(Path(root))
            if is_mounted(Path(root)):
                problems.append(f"{name}: {root} is still mounted")
        if rec.get("netns"):
            hostmod.delete_netns(rec["netns"], rec.get("veth", ""))
            if Path(f"/run/netns/{rec['netns']}").exists():
                problems.append(f"{name}: network namespace {rec['netns']} remains")
        d = HOSTS_DIR / name
        if d.is_dir() and not (root and is_mounted(Path(root))):
            shutil.rmtree(d, ignore_errors=True)
        log(f"{name}: removed")
    if state.get("mounted_nspawn_tmpfs") and is_mounted(NSPAWN_RUN):
        run(["umount", str(NSPAWN_RUN)], f"umount {NSPAWN_RUN}", check=False)
    if not problems:
        STATE_FILE.unlink(missing_ok=True)
    return problems


def down(inventory: str | None = None, *, log: Log = _noop) -> list[str]:
    """Tear down the lab recorded in the state file (``inventory`` is informational)."""
    with _lock():
        state = load_state()
        if state is None:
            log("the lab is not up")
            return []
        problems = _teardown(state, log)
    if problems:
        raise LabError("lab down left: " + "; ".join(problems))
    return []


def _http_ok(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - lab address
            return 200 <= resp.status < 300
    except OSError:
        return False
    except ValueError:
        return False


def host_status(h: LabHost, up_: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {"host": h.name, "device": h.device, "address": h.address,
                           "reachable": False, "service_active": False, "serving": False}
    if not up_:
        return rec
    proc = subprocess.run(
        ssh_argv(h.address, "systemctl is-active specdec-engine.service || true", timeout=4),
        capture_output=True, text=True, check=False, timeout=20,
    )
    rec["reachable"] = proc.returncode == 0
    rec["service_active"] = rec["reachable"] and proc.stdout.strip() == "active"
    rec["serving"] = _http_ok(f"http://{h.address}:{h.port}/v1/models")
    return rec


def status(inventory: str, limit: str | None = None) -> list[dict[str, Any]]:
    """Per inventory host: host, device, address, reachable, service_active, serving."""
    hosts = lab_hosts(inventory, limit)
    state = load_state() or {}
    recorded = state.get("hosts", {})
    results: dict[str, dict[str, Any]] = {}

    def one(h: LabHost) -> None:
        results[h.name] = host_status(h, h.name in recorded)

    threads = [threading.Thread(target=one, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[h.name] for h in hosts]


def _recorded(name: str) -> dict[str, Any]:
    state = load_state()
    if state is None:
        raise LabError("no lab is up (specdec lab up INVENTORY)")
    rec = state.get("hosts", {}).get(name)
    if rec is None:
        raise LabError(f"host {name!r} is not in the lab that is up; hosts: "
                       f"{', '.join(sorted(state.get('hosts', {})))}")
    return dict(rec)


def set_link(name: str, up_: bool) -> None:
    """Cut (``up_=False``) or restore the host's network link: a partition, as when a device
    drops off the network. Its engine and systemd keep running."""
    veth = _recorded(name).get("veth") or ""
    if not Path(f"/sys/class/net/{veth}").exists():
        raise LabError(f"{name}: its link {veth!r} does not exist")
    run(["ip", "link", "set", veth, "up" if up_ else "down"], f"ip link set {veth}")


def reboot(name: str, *, wait: bool = True, log: Log = _noop) -> float:
    """Reboot the host (``systemctl reboot`` inside; the boot loop starts it again) and, with
    ``wait``, return when it has booted. Returns the seconds it took."""
    rec = _recorded(name)
    h = LabHost.from_dict(rec["spec"])
    loop = Proc.from_dict(rec.get("nspawn"))
    if loop is None or not proc_alive(loop):
        raise LabError(f"{name}: its systemd-nspawn is not running")
    before = _first_child(loop.pid)
    t0 = time.monotonic()
    subprocess.run(ssh_argv(h.address, "systemctl reboot"), capture_output=True, check=False,
                   timeout=30)
    log(f"{name}: rebooting")
    if not wait:
        return 0.0
    deadline = t0 + BOOT_TIMEOUT
    while time.monotonic() < deadline and _first_child(loop.pid) in (before, None):
        if not proc_alive(loop):
            raise LabError(f"{name}: the boot loop ended instead of rebooting")
        time.sleep(0.2)
    _wait_booted(h, loop, deadline)
    took = time.monotonic() - t0
    log(f"{name}: up again after {took:.1f}s")
    return took
