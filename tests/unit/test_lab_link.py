"""Link conditions per lab host (``lab_link``): parsing, the state record, netem's model in the
NFQUEUE emulator (this kernel has no sch_netem)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from specdec_lab import link
from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.linkemu import Shaper
from specdec_lab.spec import LabHost, parse_lab_hosts
from specdec_lab.state import check_host
from specdec_lab.system import proc_alive, stop_process


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


class _Done:
    def __init__(self, rc: int) -> None:
        self.returncode = rc


def test_apply_uses_netem_when_the_kernel_has_it(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(link, "run", lambda argv, what, check=True: calls.append(argv) or
                        _Done(0))
    assert link.apply("ns", "veth0", link.Link(80, 30), tmp_path / "link.log") is None
    assert calls == [["tc", "qdisc", "replace", "dev", "veth0", "root", "netem", "delay", "80ms",
                      "30ms"],
                     ["ip", "netns", "exec", "ns", "tc", "qdisc", "replace", "dev", "eth0",
                      "root", "netem", "delay", "80ms", "30ms"]]


def test_apply_falls_back_to_the_nfqueue_emulator(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """No sch_netem (tc fails): the emulator starts, and only once it is bound do the NFQUEUE
    rules go in (egress and ingress of the host's eth0, bypassed if it dies)."""
    calls: list[list[str]] = []
    ready = tmp_path / "link.ready"

    def fake_run(argv: list[str], what: str, check: bool = True) -> _Done:
        calls.append(argv)
        if argv[0] != "tc":
            assert ready.exists()  # rules only after the emulator is bound
        return _Done(1 if argv[0] == "tc" else 0)

    stand_in = [sys.executable, "-c", "import sys, time; open(sys.argv[-1], 'w').write('ready'); "
                                      "time.sleep(30)"]
    monkeypatch.setattr(link, "run", fake_run)
    monkeypatch.setattr(link, "emulator_argv", lambda netns, lk: stand_in)
    proc = link.apply("ns", "veth0", link.Link(80, 30), tmp_path / "link.log")
    try:
        assert proc is not None and proc_alive(proc)
        rules = [c for c in calls if c[0] != "tc"]
        assert [r[8:11] for r in rules] == [["POSTROUTING", "-o", "eth0"],
                                            ["PREROUTING", "-i", "eth0"]]
        assert all(r[:8] == ["ip", "netns", "exec", "ns", "iptables", "-t", "mangle", "-A"]
                   for r in rules)
        assert all(r[-5:] == ["-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"]
                   for r in rules)
    finally:
        stop_process(proc, grace=2)


def test_apply_fails_in_one_line_when_the_emulator_does_not_start(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(link, "run", lambda argv, what, check=True: _Done(1))
    monkeypatch.setattr(link, "emulator_argv", lambda netns, lk: [
        sys.executable, "-c", "import sys; print('bind: Operation not permitted'); sys.exit(1)"])
    with pytest.raises(LabError, match="no netem in this kernel and the NFQUEUE link emulator "
                                       "did not start: bind: Operation not permitted"):
        link.apply("ns", "veth0", link.Link(80), tmp_path / "link.log")
