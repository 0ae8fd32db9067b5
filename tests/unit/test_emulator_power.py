"""The emulator follows the host's power mode (specdec_lab/emulator/hostpower.py, runtime.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specdec_lab.emulator.hostpower import HostPower
from specdec_lab.emulator.profiles import device_profile
from specdec_lab.emulator.runtime import make_context

CONFS = Path(__file__).resolve().parents[2] / "specdec_lab/nvpmodel"


def _host(tmp_path: Path, conf: str, status: str | None) -> Path:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/nvpmodel.conf").write_text((CONFS / conf).read_text())
    if status is not None:
        (tmp_path / "var/lib/nvpmodel").mkdir(parents=True, exist_ok=True)
        (tmp_path / "var/lib/nvpmodel/status").write_text(status)
    return tmp_path


def test_profile_bandwidth_per_mode_and_engine_efficiency() -> None:
    nano = device_profile("orin-nano-8gb", power_mode="15W")
    assert (nano.bandwidth_gbs, nano.power_mode, nano.bw_eff) == (68.3, "15W", 0.46)
    assert device_profile("orin-nano-8gb").bandwidth_gbs == 102.4  # no mode known: the peak
    spark = device_profile("dgx-spark", engine="trtllm")
    assert spark.bw_eff == 0.75 and device_profile("dgx-spark", engine="vllm").bw_eff == 0.73


def test_context_takes_the_hosts_current_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setenv("SPECDEC_EMU_DEVICE", "orin-nano-8gb")
    root = _host(tmp_path, "nvpmodel_p3767_0003_super.conf", "pmode:0000 fmode:quiet\n")
    ctx = make_context("vllm", None, 1.0, host_root=root)
    assert (ctx.device.power_mode, ctx.device.bandwidth_gbs) == ("15W", 68.3)
    # nvpmodel -m 2 (it writes a new status file): the next poll sees MAXN_SUPER
    assert ctx.power is not None
    ctx.power.interval_s = 0.0
    status = root / "var/lib/nvpmodel/status"
    status.write_text("pmode:0002 fmode:quiet\n")
    st = status.stat()
    os.utime(status, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert ctx.refresh_power() is True
    assert (ctx.device.power_mode, ctx.device.bandwidth_gbs) == ("MAXN_SUPER", 102.4)
    assert ctx.refresh_power() is False  # unchanged files: nothing to do


def test_no_nvpmodel_on_the_host_means_the_device_peak(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_EMU_DEVICE", "dgx-spark")
    ctx = make_context("trtllm", None, 1.0, host_root=tmp_path)
    assert ctx.power is None and ctx.device.bandwidth_gbs == 273


def test_boot_default_without_a_status_file(tmp_path: Path) -> None:
    p = HostPower(_host(tmp_path, "nvpmodel_p3701_0000.conf", None))
    assert p.mode == "MODE_30W"  # PM_CONFIG DEFAULT=2
