"""specdec.roles.facts: commands are read-only and never fail the host; outputs parse as
documented."""

from __future__ import annotations

import subprocess

import pytest
from pyinfra.api.exceptions import FactProcessError

from specdec.errors import IdentifyError
from specdec.host import prefetch, release
from specdec.host.identify import IDENTITY_FILES, identity_command, split_identity_output
from specdec.roles.facts import (
    DeviceIdentity,
    DockerDaemonConfig,
    HfCached,
    ImageDigest,
    JetsonPower,
    SpecdecReleases,
)
from tests.deploy.harness import identity_output as _as_output
from tests.unit.test_identify import AGX64, SPARK


def test_identity_roundtrip_jetson():
    ident = DeviceIdentity().process(_as_output(AGX64))
    assert ident is not None and ident.device == "agx-orin-64gb" and ident.l4t == "36.4.3"


def test_identity_roundtrip_spark():
    ident = DeviceIdentity().process(_as_output(SPARK))
    assert ident is not None and ident.device == "dgx-spark"


def test_missing_files_are_none():
    files = split_identity_output(_as_output(AGX64))
    assert set(files) == set(IDENTITY_FILES)
    assert files["etc/dgx-release"] is None
    assert files["proc/device-tree/model"] == "NVIDIA Jetson AGX Orin Developer Kit\n"


def test_identity_roundtrip_x86_cpu():
    files = dict.fromkeys(IDENTITY_FILES)
    files["proc/meminfo"] = "MemTotal: 16000000 kB\n"
    files["uname-m.txt"] = "x86_64\n"
    ident = DeviceIdentity().process(_as_output(files))
    assert ident is not None and (ident.device, ident.memory_gib) == ("x86-cpu", 15.3)


def test_unsupported_hardware_is_one_line_error():
    files = dict.fromkeys(IDENTITY_FILES)
    files["proc/meminfo"] = "MemTotal: 16000000 kB\n"
    files["uname-m.txt"] = "x86_64\n"
    files["nvidia-smi.txt"] = "NVIDIA GeForce RTX 4090, 24564 MiB, 550.54.14\n"
    with pytest.raises(IdentifyError) as err:
        DeviceIdentity().process(_as_output(files))
    assert "\n" not in str(err.value)


def test_identity_command_runs_here_and_exits_zero(tmp_path):
    # On this (non-Jetson) machine most files are missing: the command must still succeed.
    out = subprocess.run(["sh", "-c", identity_command()], capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 0
    files = split_identity_output(out.stdout.splitlines())
    assert set(files) == set(IDENTITY_FILES)
    assert files["proc/meminfo"] and "MemTotal" in files["proc/meminfo"]
    assert files["uname-m.txt"] and files["uname-m.txt"].strip()


def test_daemon_config():
    fact = DockerDaemonConfig()
    assert fact.default() is None  # absent file -> no output -> default
    assert fact.process(['{"log-driver": "json-file",', ' "x": 1}']) == {
        "log-driver": "json-file", "x": 1}
    with pytest.raises(FactProcessError):
        fact.process(["[1, 2]"])
    with pytest.raises(FactProcessError):
        fact.process(['{"log-driver": '])


def test_hf_cached():
    fact = HfCached()
    cmd = fact.command(repo="meta-llama/Llama-3.1-8B-Instruct")
    assert prefetch.repo_dir("meta-llama/Llama-3.1-8B-Instruct") in cmd
    assert "models--meta-llama--Llama-3.1-8B-Instruct/snapshots" in cmd
    assert fact.process(["yes"]) is True and fact.process(["no"]) is False
    assert fact.default() is False


def test_hf_cached_uses_the_completion_record():
    cmd = HfCached().command(repo="org/name")
    assert "/var/lib/specdec/hf/.specdec/complete/org--name" in cmd  # see tests/unit/test_prefetch
    local = HfCached().command(repo="org/name", local_dir="/var/lib/specdec/hf/local/org--name")
    assert "complete/org--name.local" in local


def test_image_digest():
    fact = ImageDigest()
    assert "docker image inspect" in fact.command(image="a/b:1")
    assert fact.process([f"a/b@sha256:{'1' * 64}", f"sha256:{'2' * 64}"]) == (
        f"a/b@sha256:{'1' * 64}")
    assert fact.process(["", f"sha256:{'2' * 64}"]) == f"sha256:{'2' * 64}"
    assert fact.process([]) is None


def test_jetson_power_fact() -> None:
    from pathlib import Path

    from specdec.host.power import choose_target

    conf = (Path(__file__).resolve().parents[2] / "specdec_lab/nvpmodel/"
            "nvpmodel_p3767_0003_super.conf").read_text().splitlines()
    fact = JetsonPower()
    out = ["@@specdec-power conf", *conf, "@@specdec-power status", "pmode:0000 fmode:quiet",
           "@@specdec-power query", "NVPM WARN: fan mode is not set!", "NV Power Mode: 15W",
           "0", "@@specdec-power clocks",
           "GPU MinFreq=306000000 MaxFreq=612000000 CurrentFreq=306000000",
           "EMC MinFreq=204000000 MaxFreq=2133000000 CurrentFreq=2133000000 FreqOverride=0",
           "NV Power Mode: 15W"]
    st = fact.process(out)
    assert st is not None and st.current == ("15W", 0)
    target = choose_target(st.conf)
    assert target is not None and (target.name, target.id) == ("MAXN_SUPER", 2)
    assert st.clocks == {"gpu_max_mhz": 612.0, "gpu_cur_mhz": 306.0, "emc_max_mhz": 2133.0,
                         "emc_cur_mhz": 2133.0, "mode": "15W"}
    # no nvpmodel conf (a Spark, a PC): no power state
    assert fact.process(["@@specdec-power conf", "@@specdec-power status",
                         "@@specdec-power query", "@@specdec-power clocks"]) is None
    assert "nvpmodel -q" in fact.command() and "jetson_clocks --show" in fact.command()


def test_releases_fact_parses_state():
    out = [
        "@@specdec-release current releases/aaa111",
        "@@specdec-release last-good releases/bbb222",
        "@@specdec-release release aaa111",
        "@@specdec-release release bbb222",
        "@@specdec-release decision aaa111",
        '{"outcome": "disabled",',
        ' "active": "bbb222"}',
        "",
    ]
    st = SpecdecReleases().process(out)
    assert st.current == "aaa111" and st.last_good == "bbb222"
    assert st.releases == ("aaa111", "bbb222")
    assert st.decisions == {"aaa111": {"outcome": "disabled", "active": "bbb222"}}
    assert release.desired_release("aaa111", st) == "bbb222"
    assert release.desired_release("ccc333", st) == "ccc333"
