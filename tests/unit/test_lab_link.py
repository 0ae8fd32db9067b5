"""Link conditions per lab host (``lab_link``): parsing, the state record, netem's model in the
NFQUEUE emulator (this kernel has no sch_netem)."""

from __future__ import annotations

import statistics

import pytest

from specdec.errors import LabError
from specdec.lab import link
from specdec.lab.instance import Instance
from specdec.lab.linkemu import Shaper
from specdec.lab.spec import LabHost, parse_lab_hosts
from specdec.lab.state import check_host


def _host(**data: object) -> tuple[str, dict[str, object]]:
    return "lab-x", {"lab_device": "agx-orin-64gb", "ssh_hostname": "10.213.1.2", **data}


def test_lab_link_is_parsed_per_host_and_survives_the_state() -> None:
    (h,) = parse_lab_hosts([_host(lab_link={"delay_ms": 80, "jitter_ms": 30})])
    assert h.link == link.Link(80.0, 30.0, 0.0) and str(h.link) == "80 ms ± 30 ms"
    assert LabHost.from_dict(h.to_dict()) == h
    (plain,) = parse_lab_hosts([_host()])
    assert plain.link is None and LabHost.from_dict(plain.to_dict()) == plain


@pytest.mark.parametrize(("value", "fragment"), [
    ({"delay": 80}, "expected a mapping of delay_ms, jitter_ms, loss_pct"),
    ("80ms", "expected a mapping"),
    ({}, "expected a mapping"),
    ({"delay_ms": -1}, "lab_link.delay_ms=-1: a number in [0, 10000]"),
    ({"delay_ms": "80"}, "lab_link.delay_ms='80'"),
    ({"delay_ms": True}, "lab_link.delay_ms=True"),
    ({"loss_pct": 101}, "lab_link.loss_pct=101: a number in [0, 100]"),
    ({"jitter_ms": float("nan")}, "lab_link.jitter_ms=nan"),
])
def test_bad_lab_link_is_one_line_naming_host_and_key(value: object, fragment: str) -> None:
    with pytest.raises(LabError) as exc:
        parse_lab_hosts([_host(lab_link=value)])
    text = str(exc.value)
    assert text.startswith("lab-x: ") and fragment in text and "\n" not in text


def test_netem_and_emulator_command_lines() -> None:
    assert link.netem_args(link.Link(80, 30, 0.5)) == ["netem", "delay", "80ms", "30ms",
                                                        "loss", "0.5%"]
    assert link.netem_args(link.Link(5)) == ["netem", "delay", "5ms"]
    argv = link.emulator_argv("specdec-lab-demo-lab-x", link.Link(80, 30))
    assert argv[:4] == ["ip", "netns", "exec", "specdec-lab-demo-lab-x"]
    assert argv[-2:] == ["--tag", "specdec-lab-demo-lab-x"] and str(link.LINKEMU) in argv


def test_a_recorded_link_process_must_be_the_labs(tmp_path: object) -> None:
    inst = Instance("demo")
    (h,) = parse_lab_hosts([_host(lab_link={"delay_ms": 10})], inst)
    rec = {"spec": h.to_dict(), "link": {"pid": 1, "start": 5}}
    with pytest.raises(LabError, match=r"refused hosts\['lab-x'\]\.link"):
        check_host(inst, "lab-x", rec)


def test_shaper_follows_netems_uniform_jitter_and_random_loss() -> None:
    try:
        s = Shaper(0, 80, 30, 0, seed=1)
    except PermissionError:
        pytest.skip("no netlink socket here")
    delays = [s.sample() for _ in range(4000)]
    assert all(d is not None and 0.050 <= d <= 0.110 for d in delays)
    assert statistics.mean(d for d in delays if d is not None) == pytest.approx(0.080, abs=0.002)
    lossy = Shaper(0, 10, 0, 25, seed=2)
    lost = sum(lossy.sample() is None for _ in range(4000)) / 4000
    assert lost == pytest.approx(0.25, abs=0.03)
    s.sock.close()
    lossy.sock.close()
