"""Pure parts of the lab: inventory validation, fleet data, identity files, image layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.catalog import load_catalog
from specdec.errors import ConfigError
from specdec.host.identify import parse_identity
from specdec_lab import fleet, images, paths
from specdec_lab.errors import LabError
from specdec_lab.fleetdata import LAB_MEMLOCK, parse_faults
from specdec_lab.fleetdata import fleet as fleet_data
from specdec_lab.identity import device_files, meminfo
from specdec_lab.instance import ENV, Instance
from specdec_lab.spec import LabHost, parse_lab_hosts
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
TABLE = [
    ("lab-a", {"lab_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}),
    ("lab-b", {"lab_device": "orin-nano-8gb", "specdec_runtime": "native",
               "specdec_model": "Qwen/Qwen3-0.6B"}),
    ("lab-c", {"lab_device": "dgx-spark", "specdec_engine": "trtllm",
               "specdec_model": "Qwen/Qwen3-8B"}),
]


@pytest.fixture(autouse=True)
def _default_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def _host(name: str = "h", **data: object) -> tuple[str, dict[str, object]]:
    return name, {"lab_device": "agx-orin-64gb", "ssh_hostname": "10.213.1.2", **data}


def test_parse_lab_hosts_derives_addresses_and_names() -> None:
    (h,) = parse_lab_hosts([_host("lab-x", ssh_hostname="10.213.7.2", specdec_port=8001)])
    assert (h.address, h.gateway, h.port, h.device) == ("10.213.7.2", "10.213.7.1", 8001,
                                                        "agx-orin-64gb")
    assert (h.instance, h.netns, h.veth) == ("demo", "specdec-lab-demo-lab-x", "sdldemo448")
    assert LabHost.from_dict(h.to_dict()) == h


def test_instances_have_their_own_names_subnets_and_files() -> None:
    demo, test = Instance("demo"), Instance.from_env({ENV: "test"})
    assert Instance.from_env({}) == demo
    assert (str(demo.subnet), str(test.subnet)) == ("10.213.0.0/16", "10.214.0.0/16")
    assert test.host_address(3) == "10.214.3.2"
    assert test.state_file == Path("/var/lib/specdec-lab/test/state.json")
    assert test.key_file.parent == test.dir != demo.dir
    # Interface names: at most 14 characters (the peer's temporary name adds one), and no
    # instance's name can be read as another's (letters, then the index).
    longest = Instance("abcdef")
    assert len(longest.veth(16383)) == 14 and longest.is_veth("sdlabcdef64")
    assert not demo.is_veth("sdldemox64") and not demo.is_veth("eth0")
    assert str(Instance("ci").subnet).startswith("10.") and Instance("ci").subnet not in (
        demo.subnet, test.subnet)
    (h,) = parse_lab_hosts([_host("lab-x", ssh_hostname="10.214.1.2")], test)
    assert (h.netns, h.veth) == ("specdec-lab-test-lab-x", "sdltest64")


@pytest.mark.parametrize("name", ["", "Demo", "demo1", "toolong", "de-mo", "../x"])
def test_bad_instance_names_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(ConfigError) as exc:
        Instance.from_env({ENV: name}) if name else Instance(name)
    assert str(exc.value) == (f"{ENV}={name!r}: a lab instance name is 1 to 6 lowercase "
                              "letters (e.g. demo, test)")


def test_an_address_outside_the_instance_subnet_is_refused() -> None:
    with pytest.raises(LabError, match=r"lab-x: ssh_hostname='10.213.1.2': must be the .2 of a "
                                       r"/30 in 10.214.0.0/16, the subnet of lab instance 'test'"):
        parse_lab_hosts([_host("lab-x")], Instance("test"))


@pytest.mark.parametrize(("data", "message"), [
    ({"lab_device": "jetson-tx2"}, "lab_device='jetson-tx2': unknown device"),
    ({"specdec_device": "orin-nx-8gb"}, "disagrees with lab_device"),
    ({"ssh_hostname": "192.0.2.5"}, "must be the .2 of a /30"),
    ({"ssh_hostname": "10.213.1.3"}, "must be the .2 of a /30"),
    ({"ssh_hostname": "lab-host"}, "needs an IPv4 address"),
    ({"lab_fault": ""}, "lab_fault"),
])
def test_parse_lab_hosts_rejects_bad_input_in_one_line(data: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises(LabError) as exc:
        parse_lab_hosts([_host("lab-x", **data)])
    text = str(exc.value)
    assert message in text and text.startswith("lab-x: ") and "\n" not in text


def test_parse_lab_hosts_rejects_address_collisions() -> None:
    with pytest.raises(LabError, match="address collision with host lab-a"):
        parse_lab_hosts([_host("lab-a"), _host("lab-b")])


def test_parse_faults() -> None:
    hosts = ["lab-a", "lab-b", "lab-c"]
    assert parse_faults("lab-a=crash_at_start,lab-c=oom", hosts) == {
        "lab-a": "crash_at_start", "lab-c": "oom"}
    assert parse_faults("lab-b=slow_start:5,hang_after:3", hosts) == {
        "lab-b": "slow_start:5,hang_after:3"}
    assert parse_faults("", hosts) == {}
    with pytest.raises(ValueError, match="unknown lab host 'lab-z'"):
        parse_faults("lab-z=oom", hosts)
    with pytest.raises(ValueError, match="names no host"):
        parse_faults("oom", hosts)


def test_fleet_data_carries_lab_settings() -> None:
    hosts = dict(fleet_data(TABLE, {"SPECDEC_LAB_TIME_SCALE": "0.05",
                                    "SPECDEC_LAB_FAULTS": "lab-b=crash_at_start"}))
    assert list(hosts) == ["lab-a", "lab-b", "lab-c"]
    a, b, c = hosts["lab-a"], hosts["lab-b"], hosts["lab-c"]
    assert a["ssh_hostname"] == "10.213.1.2" and c["ssh_hostname"] == "10.213.3.2"
    assert a["specdec_memlock"] == LAB_MEMLOCK == 8 * 1024 * 1024
    assert a["ssh_user"] == "root" and a["ssh_known_hosts_file"] == "/dev/null"
    assert a["specdec_env"] == {"SPECDEC_EMU_DEVICE": "agx-orin-64gb",
                                "SPECDEC_EMU_TIME_SCALE": "0.05"}
    assert b["specdec_env"]["SPECDEC_EMU_FAULT"] == "crash_at_start"
    assert b["lab_fault"] == "crash_at_start"
    assert "specdec_image" not in b  # native runtime
    # mirrors of the devices' default catalog images, in the lab registry
    assert a["specdec_image"].startswith(
        "localhost:5000/nvidia-ai-iot/vllm:0.19.0-r36.4.tegra-aarch64-cu126-22.04")
    assert c["specdec_image"].startswith("localhost:5000/nvidia/tensorrt-llm/release:1.2.1")
    assert a["specdec_hf_token_file"] == "/var/lib/specdec-lab/demo/hf_token"
    assert a["ssh_key"] == "/var/lib/specdec-lab/demo/id_ed25519"
    with_token = dict(fleet_data(TABLE, {"HF_TOKEN": "x"}))
    assert "specdec_hf_token_file" not in with_token["lab-a"]


def test_fleet_data_follows_the_instance() -> None:
    hosts = dict(fleet_data(TABLE, {ENV: "test"}))
    assert [h["ssh_hostname"] for h in hosts.values()] == ["10.214.1.2", "10.214.2.2",
                                                            "10.214.3.2"]
    assert hosts["lab-a"]["ssh_key"] == "/var/lib/specdec-lab/test/id_ed25519"
    assert hosts["lab-a"]["specdec_hf_token_file"] == "/var/lib/specdec-lab/test/hf_token"
    assert parse_lab_hosts(list(hosts.items()), Instance("test"))[2].veth == "sdltest192"
    with pytest.raises(ValueError, match=f"{ENV}='Test': a lab instance name"):
        fleet_data(TABLE, {ENV: "Test"})


def test_fleet_data_host_count() -> None:
    assert len(fleet_data(TABLE, {"SPECDEC_LAB_HOSTS": "2"})) == 2
    assert len(fleet_data(TABLE + TABLE[:0], {})) == 3  # default 4, capped by the table
    for bad in ("0", "4", "two"):
        with pytest.raises(ValueError, match="SPECDEC_LAB_HOSTS"):
            fleet_data(TABLE, {"SPECDEC_LAB_HOSTS": bad})


def test_an_optional_host_joins_only_when_named() -> None:
    thor = [("lab-thor", {"lab_device": "agx-thor-t5000", "specdec_engine": "vllm",
                          "specdec_model": "Qwen/Qwen3-8B"})]
    assert [n for n, _ in fleet_data(TABLE, {}, optional=thor)] == [n for n, _ in TABLE]
    hosts = dict(fleet_data(TABLE, {"SPECDEC_LAB_OPTIONAL": "lab-thor"}, optional=thor))
    # after every other row, at a fixed address; the upstream vLLM image's lab mirror
    assert hosts["lab-thor"]["ssh_hostname"].endswith(f".{len(TABLE) + 1}.2")
    assert "vllm/vllm-openai:v0.33.0" in hosts["lab-thor"]["specdec_image"]
    only = fleet_data(TABLE, {"SPECDEC_LAB_OPTIONAL": "lab-thor", "SPECDEC_LAB_HOSTS": "0"},
                      optional=thor)
    assert [n for n, _ in only] == ["lab-thor"]
    with pytest.raises(ValueError, match="unknown optional host 'lab-x'"):
        fleet_data(TABLE, {"SPECDEC_LAB_OPTIONAL": "lab-x"}, optional=thor)


@pytest.mark.parametrize("device_id", sorted(load_catalog().devices))
def test_identity_files_identify_as_the_device(device_id: str) -> None:
    device = load_catalog().device(device_id)
    made = device_files(device)
    files: dict[str, str | None] = {
        "proc/meminfo": meminfo(made.memtotal_kb),
        "uname-m.txt": ("x86_64" if device.is_cpu else "aarch64") + "\n"}
    assert made.bind_meminfo is not device.is_cpu  # a CPU host sees the machine's own
    for rel, data in made.files.items():
        key = rel.replace("firmware/devicetree/base/", "proc/device-tree/")
        files[key] = data.decode()
    if made.gpu_name:
        files["nvidia-smi.txt"] = f"{made.gpu_name}, [N/A], 580.95.05\n"
    if "etc/nvpmodel.conf" in made.links:  # /etc/nvpmodel.conf -> the module's NVIDIA conf
        files["etc/nvpmodel.conf"] = made.files[made.links["etc/nvpmodel.conf"][1:]].decode()
    ident = parse_identity(files)
    assert ident.device == device_id
    # a Jetson host boots in its conf's default mode (no status file yet): Nano 25W, NX 40W,
    # AGX MODE_30W, the Thor T5000 stand-in's 120W; the Spark has no nvpmodel, nor do the hosts
    # whose NVIDIA conf is in none of our sources (Industrial, IGX, T4000)
    expected = {"orin-nano": "25W", "orin-nx": "40W", "agx-orin": "MODE_30W",
                "agx-thor-t5000": "120W"}
    assert ident.power_mode == expected.get(device.family, expected.get(device_id))


def test_image_version_and_wrappers_are_stable() -> None:
    v = images.emulator_version()
    assert v.startswith("emu-") and v == images.emulator_version()
    paths = images.emulator_files()
    assert "specdec_lab/emulator/__init__.py" in paths and "specdec/catalog/devices.yaml" in paths
    assert not any("/lab/" in p for p in paths)
    wrappers = images.wrapper_scripts()
    # the Hub CLIs are the real huggingface_hub's (specdec_lab/hubclient.py), not wrappers
    assert set(wrappers) == {"vllm", "trtllm-serve"}
    assert all('"$@"' in w for w in wrappers.values())
    native = images.wrapper_scripts(versions={"vllm": "0.9.2"})
    assert "SPECDEC_EMU_ENGINE_VERSION=0.9.2 exec" in native["vllm"]


def test_lab_images_mirror_the_catalog() -> None:
    from specdec.catalog import load_catalog

    cat = load_catalog()
    labs = {i.catalog_ref: i for i in images.lab_images()}
    # every catalog image but Dynamo's: the lab runs Dynamo natively (specdec_lab/dynamo.py)
    assert set(labs) == {r for r, i in cat.images.items() if i.engine != "dynamo"}
    old = labs["dustynv/vllm:0.9.2-r36.4-cu128-24.04"]
    assert old.ref == "localhost:5000/dustynv/vllm:0.9.2-r36.4-cu128-24.04"
    assert (old.version, old.hub_cli, old.hub_version) == ("0.9.2", "huggingface-cli", "0.33.5")
    assert ("HUGGINGFACE_HUB_CACHE", "/data/models/huggingface") in old.env
    assert cat.image_for(old.ref) is cat.images[old.catalog_ref]  # the planner sees a mirror
    # vLLM's own image runs its command as ENTRYPOINT: the lab's stand-in does too
    assert labs["vllm/vllm-openai:v0.33.0"].entrypoint == ("vllm", "serve") and not old.entrypoint


def test_emulator_files_tar_is_deterministic(tmp_path: Path) -> None:
    import io

    files = {f"opt/specdec/{p}": (d, 0o644) for p, d in images.emulator_files().items()}
    one, two = io.BytesIO(), io.BytesIO()
    images._files_tar(files, one)
    images._files_tar(files, two)
    assert one.getvalue() == two.getvalue()


def test_lab_engine_rejects_unknown_device() -> None:
    proc = subprocess.run([sys.executable, "-m", "specdec", "lab", "engine", "--device", "tx2",
                           "--", "vllm", "serve", "Qwen/Qwen3-0.6B"], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 2  # bad input (ConfigError)
    assert proc.stderr.strip() == (
        "specdec: error: --device='tx2': unknown device; known: " +
        ", ".join(sorted(load_catalog().devices)))


def test_lab_up_rejects_bad_inventory_before_making_anything(tmp_path: Path) -> None:
    inv = tmp_path / "bad.py"
    inv.write_text('lab = [("lab-q", {"lab_device": "orin-nano-2gb", '
                   '"ssh_hostname": "10.213.9.2"})]\n')
    proc = subprocess.run([sys.executable, "-m", "specdec", "lab", "up", str(inv)], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "lab_device='orin-nano-2gb': unknown device" in lines[0]
    assert not Path("/run/netns/specdec-lab-lab-q").exists()


def test_preflight_names_a_missing_prerequisite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet.os, "geteuid", lambda: 0)
    monkeypatch.setattr(fleet.shutil, "which",
                        lambda tool: None if tool == "systemd-nspawn" else "/usr/bin/" + tool)
    with pytest.raises(LabError, match=r"systemd-nspawn is not installed \(apt-get install "
                                       r"systemd-container\)"):
        fleet._preflight(Instance("demo"), [])


def test_status_json_shape_when_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fleet, "load_state", lambda inst: None)
    monkeypatch.setattr(fleet, "lab_hosts", lambda inv, limit=None, inst=None: parse_lab_hosts(
        [_host("lab-x")], inst))
    assert fleet.status("inventories/lab.py") == [{
        "host": "lab-x", "device": "agx-orin-64gb", "address": "10.213.1.2",
        "reachable": False, "service_active": False, "serving": False}]
    json.dumps(fleet.status("x"))


# -- the boot loop (reboots) -------------------------------------------------------------------


def test_boot_loop_boots_again_after_a_reboot_and_stops_otherwise(tmp_path: Path) -> None:
    from specdec_lab.host import REBOOT_LOOP

    counter = tmp_path / "boots"
    fake = tmp_path / "nspawn"
    # Exits 133 ("reboot") twice, then 7 (power off with an error): three boots, exit 7.
    fake.write_text(f'#!/bin/sh\necho x >> {counter}\n'
                    f'[ "$(wc -l < {counter})" -ge 3 ] && exit 7\nexit 133\n')
    fake.chmod(0o755)
    proc = subprocess.run(["/bin/sh", "-c", REBOOT_LOOP, "loop", str(fake)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 7
    assert counter.read_text().count("x") == 3
    assert proc.stderr.count("rebooting") == 2


def test_boot_loop_passes_sigterm_to_nspawn_and_ends(tmp_path: Path) -> None:
    import signal

    from specdec_lab.host import REBOOT_LOOP

    marker, started = tmp_path / "terminated", tmp_path / "started"
    fake = tmp_path / "nspawn"
    # the loop sets its trap before it starts nspawn, nspawn says it runs once it has its own
    fake.write_text(f"#!/bin/sh\ntrap 'echo yes > {marker}; exit 0' TERM\ntouch {started}\n"
                    "while :; do sleep 0.1; done\n")
    fake.chmod(0o755)
    proc = subprocess.Popen(["/bin/sh", "-c", REBOOT_LOOP, "loop", str(fake)])
    wait_until(started.exists, "the boot loop to start nspawn")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert marker.read_text().strip() == "yes"


def test_net_and_reboot_refuse_without_a_lab(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setattr(paths, "LAB_ROOT", tmp_path)
    with pytest.raises(LabError, match="lab instance 'demo' is not up"):
        fleet.set_link("lab-agx", False)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "state.json").write_text(json.dumps({"hosts": {"lab-agx": {}}}))
    with pytest.raises(LabError, match="'lab-nano' is not in lab instance 'demo'; hosts: "
                                       "lab-agx"):
        fleet.reboot("lab-nano")
    with pytest.raises(LabError, match="lab instance 'test' is not up"):
        fleet.reboot("lab-agx", instance=Instance("test"))  # demo's host, not test's


def test_lab_commands_refuse_a_bad_instance_in_one_line() -> None:
    for argv in (["down", "--instance", "Demo1"], ["net", "lab-agx", "down", "--instance", "x-y"]):
        proc = subprocess.run([sys.executable, "-m", "specdec", "lab", *argv], cwd=ROOT,
                              capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 2  # bad input
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "a lab instance name is 1 to 6 lowercase letters" in lines[0]
