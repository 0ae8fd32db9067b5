"""The lab's nvpmodel / jetson_clocks / tegrastats stand-ins: real formats, real state files,
the reboot-required behaviour of nvpmodel (specdec_lab/tegra.py)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from specdec.catalog import load_catalog
from specdec.host.power import parse_clocks, parse_query, parse_status
from specdec_lab.identity import device_files
from specdec_lab.tegra import Tegra


def host_root(tmp_path: Path, device: str) -> Path:
    """A lab host's Jetson files under tmp_path (links materialised: the root is not /)."""
    ident = device_files(load_catalog().device(device))
    for rel, data in ident.files.items():
        if not rel.startswith("firmware/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(data)
    for rel, target in ident.links.items():
        src = tmp_path / target.lstrip("/")
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(src.read_bytes())
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal: 7801000 kB\nMemAvailable: 6000000 kB\n")
    return tmp_path


def run(t: Tegra, tool: str, *argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    if tool == "nvpmodel":
        rc = t.nvpmodel(list(argv), io.StringIO(stdin), out)
    else:
        rc = t.jetson_clocks(list(argv), out)
    return rc, out.getvalue()


def test_nano_super_mode_ids_come_from_its_conf(tmp_path: Path) -> None:
    t = Tegra(host_root(tmp_path, "orin-nano-8gb"), reboot=lambda: pytest.fail("no reboot"))
    assert run(t, "nvpmodel", "-f", "/etc/nvpmodel.conf")[0] == 0  # boot: the default, 25W
    rc, out = run(t, "nvpmodel", "-q")
    assert (rc, parse_query(out)) == (0, ("25W", 1))
    assert out == "NV Power Mode: 25W\n1\n"
    # Mode 0 is 15W on this module, not MAXN: a live switch (same GPU masks).
    assert run(t, "nvpmodel", "-m", "0")[0] == 0
    assert parse_query(run(t, "nvpmodel", "-q")[1]) == ("15W", 0)
    assert run(t, "nvpmodel", "-m", "2") == (0, "")
    assert (tmp_path / "var/lib/nvpmodel/status").read_text() == "pmode:0002 fmode:quiet\n"
    assert parse_query(run(t, "nvpmodel", "-q")[1]) == ("MAXN_SUPER", 2)


@pytest.mark.parametrize(("answer", "rc", "line"), [
    ("no\n", 1, "NVPM ERROR: optMask is 1, no request for power mode"),
    ("", 234, "NVPM ERROR: bad input!"),
])
def test_reboot_prompt_declined_or_unanswered_changes_nothing(tmp_path: Path, answer: str,
                                                              rc: int, line: str) -> None:
    t = Tegra(host_root(tmp_path, "agx-orin-64gb"), reboot=lambda: pytest.fail("no reboot"))
    assert parse_query(run(t, "nvpmodel", "-q")[1]) == ("MODE_30W", 2)  # AGX boot default
    got, out = run(t, "nvpmodel", "-m", "0", stdin=answer)
    assert got == rc
    assert "NVPM WARN: Reboot required for changing to this power mode: 0" in out
    assert "DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm:" in out
    assert out.rstrip().endswith(line)
    assert parse_query(run(t, "nvpmodel", "-q")[1]) == ("MODE_30W", 2)


@pytest.mark.parametrize(("argv", "answer"), [(("-m", "0"), "YES\n"), (("-m", "0", "--force"), "")])
def test_confirmed_or_forced_switch_reboots_into_the_mode(tmp_path: Path, argv: tuple[str, ...],
                                                          answer: str) -> None:
    reboots: list[int] = []
    t = Tegra(host_root(tmp_path, "agx-orin-64gb"), reboot=lambda: reboots.append(1))
    rc, out = run(t, "nvpmodel", *argv, stdin=answer)
    assert (rc, reboots) == (0, [1])
    assert "NVPM WARN: rebooting" in out
    assert parse_status((tmp_path / "var/lib/nvpmodel/status").read_text()) == 0
    assert parse_query(run(t, "nvpmodel", "-q")[1]) == ("MAXN", 0)


def test_jetson_clocks_show_format_and_state(tmp_path: Path) -> None:
    t = Tegra(host_root(tmp_path, "orin-nano-8gb"))
    run(t, "nvpmodel", "-m", "0")  # 15W: GPU 612 MHz, EMC 2133 MHz caps
    rc, out = run(t, "jetson_clocks", "--show")
    assert rc == 0
    assert out.startswith("SOC family:tegra234  Machine:NVIDIA Jetson Orin Nano Engineering "
                          "Reference Developer Kit Super\n")
    assert re.search(r"^cpu0:  Online=1 Governor=schedutil MinFreq=\d+ MaxFreq=1497600 "
                     r"CurrentFreq=\d+ IdleStates: WFI=1 c7=1$", out, re.M)
    clocks = parse_clocks(out)
    assert (clocks["gpu_max_mhz"], clocks["emc_max_mhz"], clocks["mode"]) == (612.0, 2133.0,
                                                                            "15W")
    assert clocks["gpu_cur_mhz"] < clocks["gpu_max_mhz"]  # not pinned yet
    assert run(t, "jetson_clocks") == (0, "")
    assert parse_clocks(run(t, "jetson_clocks", "--show")[1])["gpu_cur_mhz"] == 612.0
    run(t, "nvpmodel", "-m", "2")  # a mode change resets the pinned clocks
    clocks = parse_clocks(run(t, "jetson_clocks", "--show")[1])
    assert (clocks["gpu_max_mhz"], clocks["emc_max_mhz"]) == (1020.0, 3199.0)
    assert clocks["gpu_cur_mhz"] < 1020.0


def test_tegrastats_line_parses_as_jetson_stats_does(tmp_path: Path) -> None:
    t = Tegra(host_root(tmp_path, "agx-orin-64gb"))
    line = t.tegrastats_line()
    # jetson_stats jtop/core/tegra_parse.py regexes
    assert re.search(r"RAM (\d+)\/(\d+)(\w)B( ?)\(lfb (\d+)x(\d+)(\w)B\)", line)
    assert re.search(r"\bEMC_FREQ (\d+)%@(\d+)", line)
    assert re.search(r"\b([A-Z0-9_]+) (?:(\d+)%)?@\[([0-9,]+)\]", line)  # GR3D_FREQ 0%@[0,0]
    assert re.search(r"\bVDD_IN (\d+)mW/(\d+)mW", line)
    cpus = re.search(r"CPU \[([^\]]*)\]", line)
    assert cpus and cpus.group(1).count(",") == 11  # 12 cores on AGX Orin 64GB
