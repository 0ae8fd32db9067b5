"""``lab down`` against crafted state files: only what passes the checks is touched.

Nothing here runs a real ``ip``/``umount`` or signals a process the test did not start: the
lab root, /run/netns, /sys/class/net and /run/systemd/nspawn are temporary directories,
commands are recorded instead of run, and ``os.kill`` only reaches the test's own children.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec_lab import fleet, paths, teardown
from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.spec import parse_lab_hosts
from specdec_lab.state import BOOT_LOOP_NAME
from specdec_lab.system import Mount, Proc, cmdline, proc_alive, start_time

INST = Instance("unit")
_KILL = os.kill


class World:
    """The temporary machine a teardown runs against, and what it did there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[list[str]] = []
        self.kills: list[tuple[int, int]] = []
        self.mine: set[int] = set()  # PIDs the test started (the only ones really signalled)
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, argv: list[str], what: str, **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[:3] == ["ip", "netns", "del"]:
            (teardown.NETNS_DIR / argv[3]).unlink(missing_ok=True)
        if argv[:3] == ["ip", "link", "del"]:
            (teardown.LINKS_DIR / argv[3]).unlink(missing_ok=True)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def kill(self, pid: int, sig: int) -> None:
        self.kills.append((pid, sig))
        if pid in self.mine:
            _KILL(pid, sig)

    def spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, **kw)
        self.mine.add(p.pid)
        self.procs.append(p)
        deadline = time.monotonic() + 5
        while cmdline(p.pid) != argv and time.monotonic() < deadline:  # until exec'd
            time.sleep(0.01)
        return p

    def host(self, name: str = "lab-a", n: int = 1) -> dict[str, Any]:
        """A well-formed record of host ``name`` (n-th address), its dir made."""
        (h,) = parse_lab_hosts([(name, {"lab_device": "agx-orin-64gb",
                                        "ssh_hostname": INST.host_address(n)})], INST)
        INST.host_dir(name).mkdir(parents=True, exist_ok=True)
        return {"spec": h.to_dict(), "netns": h.netns, "veth": h.veth,
                "root": str(INST.host_dir(name) / "root")}

    def state(self, **hosts: dict[str, Any]) -> dict[str, Any]:
        doc = {"version": 2, "instance": INST.name, "subnet": str(INST.subnet),
               "hosts": hosts}
        INST.dir.mkdir(parents=True, exist_ok=True)
        INST.state_file.write_text(json.dumps(doc))
        return doc


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    w = World(tmp_path)
    monkeypatch.setattr(paths, "LAB_ROOT", tmp_path / "lab")
    monkeypatch.setattr(paths, "NSPAWN_LOCK", tmp_path / "lab" / "nspawn.lock")
    monkeypatch.setattr(paths, "NSPAWN_RUN", tmp_path / "nspawn")
    monkeypatch.setattr(teardown, "NETNS_DIR", tmp_path / "netns")
    monkeypatch.setattr(teardown, "LINKS_DIR", tmp_path / "links")
    for d in ("lab", "netns", "links"):
        (tmp_path / d).mkdir()
    monkeypatch.setattr(teardown, "run", w.run)
    monkeypatch.setattr(fleet, "run", w.run)
    monkeypatch.setattr(os, "kill", w.kill)
    yield w
    for p in w.procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _down(world: World) -> str:
    """``lab down`` of the test instance; returns its error line ("" when clean)."""
    try:
        fleet.down(instance=INST)
    except LabError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return ""


def _lab_loop(world: World, name: str) -> subprocess.Popen[bytes]:
    """A process whose command line is the boot loop's for host ``name`` (it only sleeps)."""
    root = INST.host_dir(name) / "root"
    return world.spawn([sys.executable, "-c", "import time; time.sleep(60)", BOOT_LOOP_NAME,
                        "systemd-nspawn", f"--directory={root}",
                        f"--network-namespace-path=/run/netns/{INST.netns(name)}"])


def _mentions(calls: list[list[str]], word: str) -> bool:
    return any(word in argv for argv in calls)


def test_a_valid_state_is_removed_exactly(world: World) -> None:
    rec = world.host("lab-a")
    loop = _lab_loop(world, "lab-a")
    rec["nspawn"] = {"pid": loop.pid, "start": start_time(loop.pid)}
    (teardown.NETNS_DIR / rec["netns"]).touch()
    (teardown.LINKS_DIR / rec["veth"]).touch()
    world.state(**{"lab-a": rec})
    assert _down(world) == ""
    assert not proc_alive(Proc(loop.pid, rec["nspawn"]["start"]))  # signalled, gone
    assert world.kills and {pid for pid, _ in world.kills} == {loop.pid}
    assert ["ip", "link", "del", "sdlunit64"] in world.calls
    assert ["ip", "netns", "del", "specdec-lab-unit-lab-a"] in world.calls
    assert not INST.host_dir("lab-a").exists() and not INST.state_file.exists()
    assert INST.key_file.parent.is_dir()  # the instance keeps its directory (key, token)


def test_rmtree_outside_the_instance_is_refused(world: World) -> None:
    outside = world.root / "precious"
    outside.mkdir()
    (outside / "canary").write_text("alive")
    bad = world.host("lab-b", 2)
    INST.host_dir("lab-b").rmdir()
    INST.host_dir("lab-b").symlink_to(outside)  # hosts/lab-b -> outside the lab
    slash = world.host("lab-c", 3)
    slash["root"] = "/"
    world.state(**{"lab-b": bad, "lab-c": slash, "../..": world.host("lab-d", 4)})
    err = _down(world)
    assert "refused hosts['lab-b'].dir=" in err and f"resolves to {outside}" in err
    assert "refused hosts['lab-c'].root='/'" in err
    assert "refused hosts['../..']: not a lab host name" in err
    assert (outside / "canary").read_text() == "alive"
    assert INST.host_dir("lab-c").is_dir() and INST.state_file.is_file()
    assert world.calls == [] and world.kills == []


def test_a_symlinked_instance_directory_is_refused_as_a_whole(world: World) -> None:
    outside = world.root / "elsewhere"
    (outside / "hosts" / "lab-a").mkdir(parents=True)
    rec = world.host("lab-a")
    doc = world.state(**{"lab-a": rec})
    real = world.root / "lab" / "unit"
    real.rename(world.root / "moved")
    real.symlink_to(outside)
    (outside / "state.json").write_text(json.dumps(doc))
    err = _down(world)
    assert "not the lab's own" in err
    assert (outside / "hosts" / "lab-a").is_dir() and world.calls == []


def test_unmounting_slash_or_a_foreign_mount_is_refused(world: World,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    slash = world.host("lab-a")
    slash["root"] = "/"
    dotted = world.host("lab-b", 2)
    dotted["root"] = str(INST.host_dir("lab-b") / "root" / ".." / ".." / ".." / ".." / "..")
    foreign = world.host("lab-c", 3)
    world.state(**{"lab-a": slash, "lab-b": dotted, "lab-c": foreign})
    c_root = str(INST.host_dir("lab-c") / "root")
    monkeypatch.setattr(teardown, "mount_at", lambda p: Mount(str(p), "ext4", "/dev/vda", "rw")
                        if str(p) == c_root else None)
    err = _down(world)
    assert "refused hosts['lab-a'].root='/'" in err and "refused hosts['lab-b'].root=" in err
    assert f"lab-c: {c_root} holds a ext4 mount of '/dev/vda', not the lab's" in err
    assert not any(argv[0] == "umount" for argv in world.calls), world.calls
    assert INST.host_dir("lab-c").is_dir()


@pytest.mark.parametrize(("key", "value"), [
    ("veth", "eth0"),
    ("veth", "sdlunit65"),  # another host's link
    ("veth", "sdldemo64"),  # the demo instance's link of the same host
    ("netns", "specdec-lab-demo-lab-a"),  # the demo instance's namespace
    ("netns", "../../proc/1/ns/net"),
])
def test_foreign_links_and_namespaces_are_refused(world: World, key: str, value: str) -> None:
    rec = world.host("lab-a")
    rec[key] = value
    (teardown.LINKS_DIR / "eth0").touch()
    (teardown.NETNS_DIR / "specdec-lab-demo-lab-a").touch()
    world.state(**{"lab-a": rec})
    err = _down(world)
    assert err.startswith("lab down: instance unit not fully removed")
    assert f"refused hosts['lab-a'].{key}={value!r}" in err
    assert world.calls == []
    assert (teardown.LINKS_DIR / "eth0").exists()
    assert (teardown.NETNS_DIR / "specdec-lab-demo-lab-a").exists()


def test_lab_net_refuses_a_crafted_link(world: World) -> None:
    rec = world.host("lab-a")
    rec["veth"] = "eth0"
    world.state(**{"lab-a": rec})
    with pytest.raises(LabError, match=r"refused hosts\['lab-a'\]\.veth='eth0'"):
        fleet.set_link("lab-a", False, instance=INST)
    assert world.calls == []


def test_pid_1_and_unrecorded_start_times_are_never_signalled(world: World) -> None:
    one = world.host("lab-a")
    one["nspawn"] = {"pid": 1, "start": start_time(1)}
    me = world.host("lab-b", 2)
    me["registry"] = {"pid": os.getpid(), "start": start_time(os.getpid())}
    loop = _lab_loop(world, "lab-c")
    no_start = world.host("lab-c", 3)
    no_start["nspawn"] = {"pid": loop.pid}
    world.state(**{"lab-a": one, "lab-b": me, "lab-c": no_start})
    err = _down(world)
    assert "refused hosts['lab-a'].nspawn=" in err and "not a PID the lab can have" in err
    assert "refused hosts['lab-b'].registry=" in err
    assert "refused hosts['lab-c'].nspawn=" in err and "no recorded start time" in err
    assert world.kills == [] and loop.poll() is None


def test_a_reused_pid_or_another_program_is_not_signalled(world: World) -> None:
    # PID reuse: the PID runs a lab-looking process, but not the one recorded (start differs).
    reused = world.host("lab-a")
    loop = _lab_loop(world, "lab-a")
    reused["nspawn"] = {"pid": loop.pid, "start": (start_time(loop.pid) or 0) + 1}
    # Same PID and start time, but not what the lab starts.
    other = world.host("lab-b", 2)
    sleeper = world.spawn(["sleep", "60"])
    other["registry"] = {"pid": sleeper.pid, "start": start_time(sleeper.pid)}
    # The right process, but recorded for another host (its --directory is lab-a's).
    swapped = world.host("lab-c", 3)
    swapped["nspawn"] = {"pid": loop.pid, "start": start_time(loop.pid)}
    world.state(**{"lab-a": reused, "lab-b": other, "lab-c": swapped})
    err = _down(world)
    assert "refused hosts['lab-b'].registry=" in err and "runs 'sleep 60'" in err
    assert "refused hosts['lab-c'].nspawn=" in err
    assert "lab-a" not in err  # its process is simply gone: the rest of it is removed
    assert world.kills == []
    assert loop.poll() is None and sleeper.poll() is None
    assert not INST.host_dir("lab-a").exists() and INST.host_dir("lab-b").is_dir()


def test_registry_is_signalled_only_with_its_own_command_line(world: World) -> None:
    rec = world.host("lab-a")
    cfg = INST.host_dir("lab-a") / "registry.yml"
    script = world.root / "serve"  # run as: docker-registry serve CFG (argv[0] is the name)
    script.write_text("import time\ntime.sleep(60)\n")
    reg = world.spawn(["docker-registry", "serve", str(cfg)], executable=sys.executable,
                      cwd=world.root)
    rec["registry"] = {"pid": reg.pid, "start": start_time(reg.pid)}
    world.state(**{"lab-a": rec})
    assert _down(world) == ""
    assert not proc_alive(Proc(reg.pid, rec["registry"]["start"]))
    assert {p for p, _ in world.kills} == {reg.pid}


def test_a_state_of_another_instance_is_refused(world: World) -> None:
    doc = world.state(**{"lab-a": world.host("lab-a")})
    doc["instance"] = "demo"
    INST.state_file.write_text(json.dumps(doc))
    err = _down(world)
    assert "records instance 'demo', not 'unit'" in err
    assert INST.host_dir("lab-a").is_dir() and world.calls == []


def test_down_without_state_is_a_no_op(world: World) -> None:
    assert _down(world) == ""
    assert not INST.dir.exists()
