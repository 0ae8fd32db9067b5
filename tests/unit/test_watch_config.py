"""`specdec watch`'s input: the host-data key, SSH connection data, the command line, the
engines' metric sources, the running release's plan.json, the traffic mix. Bad input is one
line naming the field and value, exit 2, before any host is reached."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.cli.watch import parse_address
from specdec.engines.registry import engine_of
from specdec.errors import ConfigError
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.planner import plan_host_settings
from specdec.watch.running import plan_from_json, time_scale
from specdec.watch.ssh import connection
from specdec_lab.traffic import Traffic, parse_mix

ROOT = Path(__file__).resolve().parents[2]
NANO = {"specdec_device": "orin-nano-8gb", "specdec_model": "Qwen/Qwen3-0.6B",
        "specdec_runtime": "native"}


def test_watch_key_defaults_to_report_and_takes_reverify() -> None:
    assert parse_host_settings("h", NANO).watch_action == "report"
    s = parse_host_settings("h", {**NANO, "specdec_watch": {"action": "reverify"}})
    assert s.watch_action == "reverify"


@pytest.mark.parametrize(("value", "needle"), [
    ({"action": "restart"}, "specdec_watch.action='restart': must be one of report, reverify"),
    ({"acton": "report"}, "did you mean action?"),
    ("reverify", "specdec_watch='reverify': must be a mapping"),
])
def test_watch_key_bad_values_are_one_line(value: object, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_host_settings("h", {**NANO, "specdec_watch": value})
    assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("h:")


def test_ssh_connection_from_inventory_data() -> None:
    c = connection("lab-nano", {"ssh_hostname": "10.0.0.2", "ssh_user": "root", "ssh_port": 2222,
                                "ssh_key": "/k", "ssh_known_hosts_file": "/dev/null",
                                "ssh_strict_host_key_checking": "off"})
    argv = c.argv("true")
    assert argv[-2:] == ["10.0.0.2", "true"] and argv[-3] == "--"
    for pair in (["-p", "2222"], ["-l", "root"], ["-i", "/k"]):
        i = argv.index(pair[0])
        assert argv[i:i + 2] == pair
    assert "StrictHostKeyChecking=no" in argv and "BatchMode=yes" in argv
    assert "UserKnownHostsFile=/dev/null" in argv
    # pyinfra's default policy; the inventory name when there is no ssh_hostname
    d = connection("orin-1", {})
    assert d.destination == "orin-1" and d.strict == "accept-new"


@pytest.mark.parametrize(("data", "needle"), [
    ({"ssh_password": "x"}, "ssh_password is set"),
    ({"ssh_port": 0}, "ssh_port=0"),
    ({"ssh_hostname": "-oProxyCommand=x"}, "not a host name"),
    ({"ssh_strict_host_key_checking": "maybe"}, "ssh_strict_host_key_checking='maybe'"),
    ({"ssh_user": "a\nb"}, "line break"),
])
def test_ssh_connection_refusals(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        connection("h", data)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_non_ssh_connectors_are_refused() -> None:
    with pytest.raises(ConfigError, match="SSH only"):
        connection("@local", {})
    assert connection("@ssh/orin-1", {}).destination == "orin-1"


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's specdec
    return subprocess.run([sys.executable, "-m", "specdec.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("args", "needle"), [
    (["--interval", "0"], "--interval='0': must be in 0.5..3600"),
    (["--interval", "nan"], "--interval='nan'"),
    (["--window", "x"], "--window='x': not a number"),
    (["--serve", "nowhere"], "--serve='nowhere': expected HOST:PORT"),
    (["--textfile", "/no/such/dir/x.prom"], "--textfile='/no/such/dir/x.prom'"),
])
def test_cli_bad_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    proc = _cli("watch", "inventories/jetsons.py", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_serve_without_a_host_is_loopback() -> None:
    """``--serve :PORT`` bound every interface with no authentication (issue 29)."""
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:9464") == ("0.0.0.0", 9464)  # every interface: named
    assert parse_address("[::1]:9") == ("::1", 9)


def test_cli_bad_host_data_exits_2_before_any_host(tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('orin-1', {'ssh_hostname': '192.0.2.1', "
                   "'specdec_watch': {'action': 'reboot'}})]\n")
    proc = _cli("watch", str(inv), "--once", cwd=tmp_path)
    assert proc.returncode == 2
    assert "orin-1: specdec_watch.action='reboot'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _plan(**data: object):  # type: ignore[no-untyped-def]
    return plan_host_settings(parse_host_settings("h", {**NANO, **data}), None)


def test_engines_say_where_their_counters_are() -> None:
    p = _plan(specdec_method="ngram", specdec_num_speculative_tokens=4)
    [src] = engine_of(p).metrics_sources(p)
    assert (src.role, src.address, src.port, src.path, src.format) == (
        "engine", "127.0.0.1", p.engine_port, "/metrics", "prometheus")
    assert dict(src.counters)["drafts"] == "vllm:spec_decode_num_drafts_total"
    assert src.truth and src.caveat is None
    spark = plan_host_settings(parse_host_settings("s", {
        "specdec_device": "dgx-spark", "specdec_engine": "trtllm", "specdec_model":
        "Qwen/Qwen3-8B", "specdec_image": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"}),
        None)
    [t] = engine_of(spark).metrics_sources(spark)
    assert t.format == "json-iterations" and t.weight == "iterLatencyMS"


def test_vllm_v0_counters_are_not_read() -> None:
    p = _plan(specdec_device="orin-nx-16gb", specdec_model="Qwen/Qwen3-1.7B",
              specdec_method="draft_model", specdec_draft="Qwen/Qwen3-0.6B",
              specdec_num_speculative_tokens=5, specdec_runtime="docker",
              specdec_image="dustynv/vllm:0.9.2-r36.4-cu128-24.04")
    [src] = engine_of(p).metrics_sources(p)
    assert src.caveat and "V0" in src.caveat and "engine/metrics.py" in src.caveat


def test_plan_json_round_trips_and_bad_ones_are_one_line() -> None:
    p = _plan(specdec_env={"SPECDEC_EMU_TIME_SCALE": "0.1"})
    back = plan_from_json(json.loads(p.to_json()), "h")
    assert back == p and time_scale(back) == 0.1
    with pytest.raises(ConfigError, match="port="):
        plan_from_json({**json.loads(p.to_json()), "port": "80; rm"}, "h")
    with pytest.raises(ConfigError, match="engine='bogus'"):
        plan_from_json({**json.loads(p.to_json()), "engine": "bogus"}, "h")
    with pytest.raises(ConfigError, match="not a plan"):
        plan_from_json([1], "h")
    assert time_scale(dataclasses.replace(p, env=(("SPECDEC_EMU_TIME_SCALE", "x"),))) is None


def test_traffic_mix_and_bounds() -> None:
    assert parse_mix("code=0.8,chat=0.2") == {"code": pytest.approx(0.8),
                                              "chat": pytest.approx(0.2)}
    assert parse_mix("code=3,chat=1")["code"] == pytest.approx(0.75)
    for bad, needle in (("code=x", "not a number"), ("poetry=1", "unknown category"),
                        ("code=-1", ">= 0"), ("code=0", "sum to 0"), ("code", "expected"),
                        ("code=1,code=2", "twice")):
        with pytest.raises(ConfigError, match=needle):
            parse_mix(bad)
    with pytest.raises(ConfigError, match="bounded"):
        Traffic("http://x", {"code": 1.0}, 1.0).check()
    with pytest.raises(ConfigError, match="--rate"):
        Traffic("http://x", {"code": 1.0}, 0.0, requests=3).check()
    Traffic("http://x", {"code": 1.0}, 1.0, requests=3).check()
