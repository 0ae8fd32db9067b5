"""Power modes on the lab fleet: per-module nvpmodel.conf, the nvpmodel / jetson_clocks stand-ins,
the Jetson tuning role choosing modes by name (and rebooting when nvpmodel needs it), the
emulator following the host's mode, and lab reports in device time (see conftest.py)."""

from __future__ import annotations

import json

import pytest

from specdec.host.power import parse_clocks, parse_conf, parse_query
from tests.e2e.conftest import LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e

# host -> (module conf's id 0, the mode the role must set: name and id in that conf)
EXPECTED = {
    "lab-agx": ("MAXN", ("MAXN", 0)),
    "lab-nano": ("15W", ("MAXN_SUPER", 2)),  # mode 0 is NOT MAXN here
    "lab-nx": ("MAXN_SUPER", ("MAXN_SUPER", 0)),
}


def _truth(lab: LabFleet, name: str) -> dict[str, object]:
    h = lab.host(name)
    status, doc = lab.http(f"{lab.api(h)}/lab/truth")
    assert status == 200, status
    return dict(doc)


def _hosts(lab: LabFleet) -> list[str]:
    return [h.name for h in lab.hosts if h.name in EXPECTED]


def test_each_jetson_runs_its_fastest_mode_by_name(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    for name in _hosts(lab):
        mode0, want = EXPECTED[name]
        conf = parse_conf(lab.ssh(name, "cat /etc/nvpmodel.conf").stdout)
        assert conf.modes[0].name == mode0, name
        assert parse_query(lab.ssh(name, "nvpmodel -q").stdout) == want, name
        clocks = parse_clocks(lab.ssh(name, "jetson_clocks --show").stdout)
        assert clocks["mode"] == want[0] and clocks["gpu_cur_mhz"] == clocks["gpu_max_mhz"]
        record = json.loads(lab.ssh(name, "cat /var/lib/specdec/tuning.json").stdout)
        assert (record["power_mode"], record["power_mode_id"]) == want, record
        ident = json.loads(lab.ssh(name, "specdec identify --json").stdout)
        assert (ident["power_mode"], ident["power_mode_id"]) == want
        assert ident["module_name"] and ident["jetpack"] == "6.2"
    if "lab-agx" in _hosts(lab):  # MODE_30W -> MAXN changes the GPU's TPC mask: a reboot
        record = json.loads(lab.ssh("lab-agx", "cat /var/lib/specdec/tuning.json").stdout)
        assert record["rebooted"] is True and record["previous"] == ["MODE_30W", 2]


def test_the_emulator_follows_the_host_power_mode(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    for name, bw in (("lab-agx", 204.8), ("lab-nano", 102.4), ("lab-nx", 102.4)):
        if name in _hosts(lab):  # lab-agx and lab-nx in docker, lab-nano native
            truth = _truth(lab, name)
            assert (truth["power_mode"], truth["bandwidth_gbs"]) == (EXPECTED[name][1][0], bw)


def test_a_host_left_in_15w_benchmarks_slower_and_the_next_deploy_restores_it(
        lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    if "lab-nano" not in _hosts(lab):
        pytest.skip("lab-nano is not in this fleet")
    h = lab.host("lab-nano")
    url = f"{lab.api(h)}"

    def tpot() -> float:
        proc = lab.specdec("bench", url, "--concurrency", "1", "--requests", "4",
                           "--max-tokens", "48", "--warmup", "1", "--no-progress",
                           "--api-key-file", str(lab.api_key_file),
                           "--ca-file", str(lab.instance.api_ca_file), timeout=600)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["device_time"]["emulated"] is True
        return float(doc["concurrency"]["1"]["tpot_ms_p50"])

    fast = tpot()
    lab.ssh("lab-nano", "nvpmodel -m 0")  # 15W: a live switch, EMC capped at 2133 MHz
    assert parse_query(lab.ssh("lab-nano", "nvpmodel -q").stdout) == ("15W", 0)
    slow = tpot()
    assert _truth(lab, "lab-nano")["bandwidth_gbs"] == 68.3
    assert slow / fast > 1.25, (fast, slow)  # 102.4 vs 68.3 GB/s, less per-step overheads
    again = lab.pyinfra()
    assert again.rc == 0, again.summary()
    assert {op for host, op in again.changed if host == "lab-nano"} == {
        "Jetson tuning | Set the fastest nvpmodel mode (MAXN_SUPER, else MAXN) by name",
        "Jetson tuning | Run jetson_clocks"}, again.changed
    assert all(host == "lab-nano" for host, _ in again.changed), again.changed
    assert parse_query(lab.ssh("lab-nano", "nvpmodel -q").stdout) == ("MAXN_SUPER", 2)
    third = lab.pyinfra()
    assert third.rc == 0 and third.changed == [], third.summary()


def test_lab_report_is_device_time_with_plain_roofline_figures(lab: LabFleet,
                                                              deployed: PyinfraRun) -> None:
    assert deployed.rc == 0 and deployed.reports is not None, deployed.summary()
    if "lab-agx" not in _hosts(lab):
        pytest.skip("lab-agx is not in this fleet")
    rep = json.loads((deployed.reports / "lab-agx.json").read_text())
    assert rep["outcome"] == "kept", rep["message"]
    assert rep["baseline"]["device_time"]["emulated"] is True
    roof = rep["roofline"]
    # Llama-3.1-8B bf16 on an AGX Orin in MAXN: below bandwidth / weights, at the catalog's
    # vLLM efficiency (0.68; devices.yaml, fitted in specdec_lab/emulator/calibration.py).
    assert (roof["power_mode"], roof["bandwidth_gbs"]) == ("MAXN", 204.8)
    assert roof["baseline_decode_tok_s"] < roof["limit_tok_s"] < 14.0
    assert 60 <= roof["baseline_pct"] <= 80, roof
    assert 0 < roof["speculative_pct"] <= 100, roof
    assert rep["power"]["power_mode"] == "MAXN" and rep["power"]["clocks"]["gpu_max_mhz"]
    summary = (deployed.reports / "summary.md").read_text()
    assert "agx-orin-64gb (emulated)" in summary and "device time" in summary
