"""The lab as a fleet: 32 hosts from inventories/lab.py (mixed devices, engines, runtimes, two
Dynamo groups, slow lossy links), one site registry per instance, inotify room."""

from __future__ import annotations

from collections import Counter

import pytest

from specdec.config.inventory import load_inventory
from specdec.errors import ConfigError
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec_lab import fleet as labfleet
from specdec_lab.spec import parse_lab_hosts


def _hosts(monkeypatch, n: str):
    monkeypatch.setenv("SPECDEC_LAB_HOSTS", n)
    monkeypatch.setenv("SPECDEC_LAB_INSTANCE", "fleet")
    return load_inventory("inventories/lab.py")


def test_a_32_host_fleet(monkeypatch):
    hosts = _hosts(monkeypatch, "28")
    assert len(hosts) == 32
    lab = parse_lab_hosts(hosts)  # addresses unique, in the instance's subnet
    assert len({h.address for h in lab}) == 32
    kinds = Counter((h.device, h.engine, h.runtime) for h in lab)
    assert len({d for d, _, _ in kinds}) == 7 and {e for _, e, _ in kinds} == \
        {"vllm", "trtllm", "dynamo"} and {r for _, _, r in kinds} == {"docker", "native"}
    groups = {g.name for g in groups_of(parse_hosts(hosts)).values()}
    assert groups == {"spark-pair", "spark-pair2"}
    slow = [h for h in lab if h.link is not None]
    assert len(slow) == 3 and all(h.link.delay_ms == 80 and h.link.loss_pct == 1 for h in slow)
    assert len(_hosts(monkeypatch, "32")) == 36


def test_small_labs_keep_one_group_and_their_addresses(monkeypatch):
    hosts = dict(_hosts(monkeypatch, "4"))
    assert list(hosts) == ["lab-agx", "lab-nano", "lab-spark", "lab-nx", "lab-dyn1", "lab-dyn2"]
    assert "lab-dyn3" not in dict(_hosts(monkeypatch, "8"))
    with pytest.raises(ConfigError, match="SPECDEC_LAB_HOSTS=.33.: must be an integer in 0..32"):
        _hosts(monkeypatch, "33")


def test_inotify_room_is_raised_never_lowered(tmp_path, monkeypatch):
    f = tmp_path / "max_user_instances"
    monkeypatch.setattr(labfleet, "INOTIFY", f)
    said: list[str] = []
    f.write_text("128\n")
    labfleet._inotify_room(32, said.append)
    assert f.read_text() == "1024\n" and "128 -> 1024" in said[0]
    f.write_text("8192\n")
    labfleet._inotify_room(32, said.append)
    assert f.read_text() == "8192\n" and len(said) == 1


def test_the_real_engine_host_is_opt_in(monkeypatch):
    """lab-cpu (the real vLLM on x86-cpu) joins only with SPECDEC_LAB_REAL=1, at one fixed
    address whatever the fleet's size, with no emulator knobs; the default lab is unchanged."""
    assert "lab-cpu" not in dict(_hosts(monkeypatch, "4"))
    monkeypatch.setenv("SPECDEC_LAB_REAL", "1")
    small, big = dict(_hosts(monkeypatch, "4")), dict(_hosts(monkeypatch, "28"))
    assert list(small)[-1] == "lab-cpu" and list(small)[:-1] == \
        ["lab-agx", "lab-nano", "lab-spark", "lab-nx", "lab-dyn1", "lab-dyn2"]
    cpu = small["lab-cpu"]
    assert cpu["ssh_hostname"] == big["lab-cpu"]["ssh_hostname"]
    assert cpu["specdec_device"] == "x86-cpu" and cpu["specdec_runtime"] == "native"
    assert not any(k.startswith("SPECDEC_EMU_") for k in cpu["specdec_env"])
    monkeypatch.setenv("SPECDEC_LAB_DYNAMO", "0")
    assert list(dict(_hosts(monkeypatch, "0"))) == ["lab-cpu"]
    monkeypatch.setenv("SPECDEC_LAB_FAULTS", "lab-cpu=crash_at_start")
    with pytest.raises(ConfigError, match="lab-cpu: lab_fault='crash_at_start'"):
        _hosts(monkeypatch, "0")
    monkeypatch.delenv("SPECDEC_LAB_FAULTS")
    monkeypatch.setenv("SPECDEC_LAB_REAL", "yes")
    with pytest.raises(ConfigError, match="SPECDEC_LAB_REAL='yes': must be 0 or 1"):
        _hosts(monkeypatch, "4")
