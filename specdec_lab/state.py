"""A lab instance's state file, its locks, and the checks every recorded entry must pass before
``lab down``, ``lab net`` or ``lab reboot`` acts on it.

``state.json`` is a plain file as far as the lab knows: someone may have edited it. So nothing
in it is trusted. A host entry is acted on only when its name is a lab host name, its netns,
veth and root are exactly the names and paths the instance gives that host (its root a real
directory under the instance's own directory, symlinks resolved), and each recorded process
has a recorded start time and, while it runs, the command line the lab started it with. Any
other entry is refused with one line naming it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_lab import paths
from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.spec import HOST_NAME, LabHost
from specdec_lab.system import Proc, cmdline, start_time

__all__ = [
    "BOOT_LOOP_NAME",
    "HostRecord",
    "check_host",
    "check_state",
    "instance_lock",
    "load_state",
    "own_dir",
    "save_state",
    "shared_lock",
]

STATE_VERSION = 2
BOOT_LOOP_NAME = "specdec-lab-boot"  # $0 of the boot loop (host.REBOOT_LOOP)


@contextlib.contextmanager
def _flock(path: Path, what: str, *, wait: bool) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LabError(f"another 'specdec lab' command holds {path} ({what})") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def instance_lock(inst: Instance) -> contextlib.AbstractContextManager[None]:
    """One ``specdec lab`` command at a time per instance (refused, not queued)."""
    return _flock(inst.lock_file, f"lab instance {inst.name}", wait=False)


def shared_lock(path: Path) -> contextlib.AbstractContextManager[None]:
    """What instances share (the nspawn tmpfs, the image cache): waited for."""
    return _flock(path, "shared by the lab instances", wait=True)


def load_state(inst: Instance) -> dict[str, Any] | None:
    try:
        doc = json.loads(inst.state_file.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"{inst.state_file}: unreadable lab state ({exc}); remove it by hand") \
            from None
    if not isinstance(doc, dict):
        raise LabError(f"{inst.state_file}: not a lab state (a JSON object); remove it by hand")
    return doc


def save_state(inst: Instance, state: dict[str, Any]) -> None:
    tmp = inst.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(inst.state_file)


# -- checks ---------------------------------------------------------------------------------


def own_dir(inst: Instance) -> Path:
    """The instance's directory, resolved; refused unless it is ``LAB_ROOT/<name>`` itself
    (not a symlink to somewhere else)."""
    want = paths.LAB_ROOT.resolve() / inst.name
    got = inst.dir.resolve()
    if got != want or inst.dir.is_symlink():
        raise LabError(f"{inst.dir} resolves to {got}, not the lab's own {want}; refusing "
                       "to act on it")
    return got


@dataclass(frozen=True)
class HostRecord:
    """A host entry of the state that passed every check: safe to act on."""

    spec: LabHost
    dir: Path  # <instance>/hosts/<name>, resolved
    netns: str | None
    veth: str | None
    root: Path | None
    nspawn: Proc | None
    registry: Proc | None
    link: Proc | None = None  # the NFQUEUE link emulator (specdec_lab.link)

    @property
    def name(self) -> str:
        return self.spec.name


def _refuse(name: str, key: str, value: Any, why: str) -> LabError:
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return LabError(f"refused hosts[{name!r}]{'.' + key if key else ''}={text}: {why}")


def _proc(name: str, key: str, value: Any, expect: list[str], exact: list[list[str]]) -> Proc:
    """A recorded process: an int PID > 1 that is not this one, an int start time, and while
    that PID runs with that start time, a command line the lab starts (all of ``expect`` in
    it, or one of ``exact``)."""
    if not isinstance(value, dict):
        raise _refuse(name, key, value, "not a {pid, start} record")
    pid, start = value.get("pid"), value.get("start")
    if type(pid) is not int or pid <= 1 or pid == os.getpid():
        raise _refuse(name, key, value, "not a PID the lab can have started")
    if type(start) is not int:
        raise _refuse(name, key, value, "no recorded start time")
    if start_time(pid) == start:
        argv = cmdline(pid)
        if argv not in exact and not (expect and all(e in argv for e in expect)):
            raise _refuse(name, key, value, f"PID {pid} runs {' '.join(argv)[:60]!r}, not "
                                            "what the lab started")
    return Proc(pid, start)


def _path(inst_dir: Path, name: str, key: str, value: Any, rel: str) -> Path:
    """``value`` must be the host's own ``hosts/<name>[/rel]``: no ``..``, and resolving
    symlinks must not lead anywhere else."""
    want = inst_dir / "hosts" / name / rel if rel else inst_dir / "hosts" / name
    if not isinstance(value, str) or Path(value) != Path(os.path.normpath(value)):
        raise _refuse(name, key, value, f"not the host's own path {want}")
    try:
        got = Path(value).resolve()
    except (OSError, RuntimeError):
        raise _refuse(name, key, value, "cannot be resolved") from None
    if got != want:
        raise _refuse(name, key, value, f"resolves to {got}, not the host's own path {want}")
    return got


def check_host(inst: Instance, name: Any, rec: Any) -> HostRecord:
    """Check one host entry of the state; raises a one-line `LabError` naming the entry."""
    if not isinstance(name, str) or not HOST_NAME.fullmatch(name):
        raise LabError(f"refused hosts[{name!r}]: not a lab host name")
    if not isinstance(rec, dict):
        raise _refuse(name, "", rec, "not a host record")
    try:
        spec = LabHost.from_dict(rec.get("spec") or {})
    except (KeyError, TypeError, LabError):
        raise _refuse(name, "spec", rec.get("spec"), "not a lab host spec") from None
    if spec.name != name or spec.instance != inst.name:
        raise _refuse(name, "spec", {"name": spec.name, "instance": spec.instance},
                      f"not host {name!r} of lab instance {inst.name!r}")
    net = inst.subnet
    index = spec.index
    if type(index) is not int or not 0 < index < net.num_addresses // 4 or \
            str(net.network_address + index * 4 + 2) != spec.address:
        raise _refuse(name, "spec.address", spec.address,
                      f"not the address of host index {index!r} in {net}")
    inst_dir = own_dir(inst)
    host_dir = _path(inst_dir, name, "dir", str(inst.host_dir(name)), "")
    netns, veth, root = rec.get("netns"), rec.get("veth"), rec.get("root")
    if netns is not None and netns != inst.netns(name):
        raise _refuse(name, "netns", netns, f"not its namespace {inst.netns(name)}")
    if veth is not None and (veth != spec.veth or not inst.is_veth(veth)):
        raise _refuse(name, "veth", veth, f"not its link {spec.veth}")
    root_path = _path(inst_dir, name, "root", root, "root") if root is not None else None
    nspawn = registry = None
    started_in = inst.host_dir(name)  # as the lab passed it to the processes it started
    if rec.get("nspawn") is not None:
        expect = [BOOT_LOOP_NAME, f"--directory={started_in / 'root'}",
                  f"--network-namespace-path=/run/netns/{inst.netns(name)}"]
        nspawn = _proc(name, "nspawn", rec["nspawn"], expect, [])
    if rec.get("registry") is not None:
        cfg = str(started_in / "registry.yml")
        serve = ["docker-registry", "serve", cfg]
        registry = _proc(name, "registry", rec["registry"], [],
                         [serve, ["ip", "netns", "exec", inst.netns(name), *serve]])
    link = None
    if rec.get("link") is not None:
        link = _proc(name, "link", rec["link"], ["-I", "--tag", inst.netns(name)], [])
    return HostRecord(spec, host_dir, netns, veth, root_path, nspawn, registry, link)


def check_state(inst: Instance, state: Any) -> tuple[list[HostRecord], list[str]]:
    """(hosts that passed, one line per refused entry). A state that is not this instance's
    as a whole is refused as a whole (`LabError`)."""
    if not isinstance(state, dict) or not isinstance(state.get("hosts"), dict):
        raise LabError(f"{inst.state_file}: no hosts recorded; refusing to act on it")
    if state.get("instance") != inst.name:
        raise LabError(f"{inst.state_file}: records instance {state.get('instance')!r}, not "
                       f"{inst.name!r}; refusing to act on it")
    own_dir(inst)
    good: list[HostRecord] = []
    refused: list[str] = []
    for name, rec in state["hosts"].items():
        try:
            good.append(check_host(inst, name, rec))
        except LabError as exc:
            refused.append(str(exc))
    return good, refused
