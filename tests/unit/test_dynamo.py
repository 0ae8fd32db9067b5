"""NVIDIA Dynamo: release facts, serving groups, planning, rendering, batching, reports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specdec.engines.dynamo.facts import dynamo_facts
from specdec.engines.registry import support
from specdec.engines.support import Target
from specdec.engines.version import Version
from specdec.errors import ConfigError
from specdec.fleet.rollout import Batch, batch_units
from specdec.host import layout, release
from specdec.plan.groups import check_limit, check_plans, groups_of, units
from specdec.plan.hostdata import parse_host_settings, parse_hosts
from specdec.plan.planner import baseline, make_plan
from specdec.render.files import render
from specdec.report.fleet import summary_markdown

Q8 = "Qwen/Qwen3-8B"


def spark(addr: str, **kw: Any) -> dict[str, Any]:
    return {"specdec_device": "dgx-spark", "specdec_engine": "dynamo", "specdec_model": Q8,
            "ssh_hostname": addr, "specdec_group": "pair", **kw}


PAIR = [("spark-01", spark("192.0.2.41")), ("spark-02", spark("192.0.2.42"))]


def plans(hosts: list[tuple[str, dict[str, Any]]] = PAIR) -> list[Any]:
    g = groups_of(parse_hosts(hosts))
    return [make_plan(n, d, group=g[n]) for n, d in hosts]


# -- release facts ---------------------------------------------------------------------------


def test_dynamo_release_pins_its_vllm() -> None:
    f = dynamo_facts("1.6.1")
    assert f is not None and f.vllm == Version.parse("0.31.0") and "METADATA" in f.source
    assert dynamo_facts("1.5.0") is None


def test_support_is_the_pinned_vllm_releases() -> None:
    qwen = Target(Q8, "Qwen3ForCausalLM", "qwen3")
    assert support("dynamo", Version.parse("1.6.1"), "eagle3", qwen).ok
    # vLLM 0.31.0 refuses mlp_speculator (removed from V1), so Dynamo 1.6.1 does too
    sup = support("dynamo", Version.parse("1.6.1"), "mlp_speculator", qwen)
    assert not sup.ok and "vLLM 0.31.0" in sup.reason
    unknown = support("dynamo", Version.parse("9.9.9"), "eagle3", qwen)
    assert not unknown.ok and "not in the release table" in unknown.reason


# -- host data and groups --------------------------------------------------------------------


def test_group_keys_only_for_dynamo_and_checked() -> None:
    with pytest.raises(ConfigError, match="only applies to specdec_engine='dynamo'"):
        parse_host_settings("h", {"specdec_group": "pair"})
    with pytest.raises(ConfigError, match="group name"):
        parse_host_settings("h", {"specdec_engine": "dynamo", "specdec_group": "Pair!"})
    with pytest.raises(ConfigError, match="must be one of"):
        parse_host_settings("h", {"specdec_engine": "dynamo",
                                  "specdec_dynamo_router_mode": "fastest"})
    with pytest.raises(ConfigError, match="managed by specdec"):
        parse_host_settings("h", {"specdec_engine": "dynamo",
                                  "specdec_extra_args": ["--discovery-backend=file"]})
    with pytest.raises(ConfigError, match="reserved"):
        parse_host_settings("h", {"specdec_env": {"DYN_SYSTEM_PORT": "9"}})
    # Dynamo 1.6.1 reads DYN_SYSTEM_PORT as an i16: 40000 would fail at worker start.
    with pytest.raises(ConfigError, match=r"specdec_dynamo_system_port=40000: .*1024\.\.32767"):
        parse_host_settings("h", {"specdec_engine": "dynamo",
                                  "specdec_dynamo_system_port": 40000})


def test_groups_frontend_addresses_and_errors() -> None:
    g = groups_of(parse_hosts(PAIR))
    assert g["spark-01"] is g["spark-02"]
    assert g["spark-01"].frontend == "spark-01" and g["spark-01"].frontend_address == \
        "192.0.2.41"
    link = [(n, {**d, "specdec_dynamo_address": f"192.168.100.{i}",
                 "specdec_group_frontend": "spark-02"}) for i, (n, d) in enumerate(PAIR, 1)]
    g2 = groups_of(parse_hosts(link))["spark-01"]
    assert g2.frontend == "spark-02" and g2.address("spark-01") == "192.168.100.1"
    alone = groups_of(parse_hosts([("solo", {"specdec_engine": "dynamo",
                                             "ssh_hostname": "192.0.2.9"})]))["solo"]
    assert alone.name == "solo" and alone.members == ("solo",)
    with pytest.raises(ConfigError, match="'solo': must be an IP address"):  # firewalled by IP
        groups_of(parse_hosts([("solo", {"specdec_engine": "dynamo"})]))
    with pytest.raises(ConfigError, match="several frontends"):
        groups_of(parse_hosts([(n, {**d, "specdec_group_frontend": n}) for n, d in PAIR]))
    with pytest.raises(ConfigError, match="not a member"):
        groups_of(parse_hosts([(n, {**d, "specdec_group_frontend": "spark-09"}) for n, d in PAIR]))
    with pytest.raises(ConfigError, match="also the address"):
        groups_of(parse_hosts([(n, {**d, "ssh_hostname": "192.0.2.41"}) for n, d in PAIR]))


def test_a_group_is_targeted_whole() -> None:
    g = groups_of(parse_hosts([*PAIR, ("orin", {"specdec_device": "agx-orin-64gb"})]))
    check_limit(g, ["spark-01", "spark-02", "orin"])
    check_limit(g, ["orin"])
    with pytest.raises(ConfigError, match="but not spark-02"):
        check_limit(g, ["spark-01", "orin"])
    assert units(["orin", "spark-02", "x", "spark-01"], g) == [
        ["orin"], ["spark-01", "spark-02"], ["x"]]


def test_rollout_batches_never_split_a_group() -> None:
    order = [["a"], ["s1", "s2"], ["b"], ["c"]]
    assert batch_units(order, [Batch(count=1), Batch(percent=100)]) == [
        ["a"], ["s1", "s2", "b", "c"]]
    assert batch_units([["s1", "s2"], ["a"]], [Batch(count=1), Batch(count=1)]) == [
        ["s1", "s2"], ["a"]]
    assert batch_units(order, [Batch(count=2)]) == [["a"], ["s1", "s2"], ["b", "c"]]


# -- planning ------------------------------------------------------------------------------------


def test_members_plan_their_roles() -> None:
    p1, p2 = plans()
    assert p1.engine == "dynamo" and p1.engine_version == "1.6.1"
    assert p1.dynamo is not None and p1.dynamo.vllm_version == "0.31.0"
    assert p1.image == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert p1.dynamo and p2.dynamo and p1.dynamo.is_frontend and not p2.dynamo.is_frontend
    assert p2.dynamo.etcd_endpoint == "https://192.0.2.41:2379" and p2.dynamo.address == \
        "192.0.2.42"
    # every socket planned: the worker's on every member (its event plane's publishers on
    # ephemeral ports too), etcd's and the frontend's on the frontend member; the group's
    # reach only the members, the frontend's HTTP is loopback
    members = ("192.0.2.41/32", "192.0.2.42/32")
    assert {(s.unit, s.address, s.port, s.reach) for s in p2.sockets} == {
        ("specdec-engine", "192.0.2.42", 8081, members),
        ("specdec-engine", "192.0.2.42", 8082, members),
        ("specdec-engine", "192.0.2.42", 32768, members)}
    assert [s.port_end for s in p2.sockets if s.port == 32768] == [60999]
    assert {(s.unit, s.address, s.port) for s in p1.sockets} == {
        ("specdec-proxy", "0.0.0.0", 8000), ("specdec-engine", "192.0.2.41", 8081),
        ("specdec-engine", "192.0.2.41", 8082), ("specdec-engine", "192.0.2.41", 32768),
        ("specdec-etcd", "192.0.2.41", 2379),
        ("specdec-etcd", "127.0.0.1", 2379), ("specdec-etcd", "127.0.0.1", 2380),
        ("specdec-frontend", "192.0.2.41", 8083), ("specdec-frontend", "127.0.0.1", 8001)}
    assert p1.method == "eagle3" and p1.release_id() != p2.release_id()
    with pytest.raises(ConfigError, match="needs the whole inventory"):
        make_plan("spark-01", PAIR[0][1])


def test_members_must_plan_the_same_speculation() -> None:
    odd = [PAIR[0], ("spark-02", {**PAIR[1][1], "specdec_num_speculative_tokens": 2})]
    with pytest.raises(ConfigError, match="num_speculative_tokens 2 differs"):
        check_plans(plans(odd))


def test_native_dynamo_reads_the_installed_release() -> None:
    data = {**PAIR[0][1], "specdec_runtime": "native", "specdec_group": None}
    p = make_plan("spark-01", data, installed={"dynamo": "1.6.1"})
    assert p.engine_version == "1.6.1"
    with pytest.raises(Exception, match="not in specdec's release table"):
        make_plan("spark-01", data, installed={"dynamo": "1.4.0"})
    with pytest.raises(Exception, match="no ai-dynamo in /opt/dynamo/venv"):
        make_plan("spark-01", data, installed={})


# -- rendering -------------------------------------------------------------------------------------


def _files(plan: Any) -> dict[str, str]:
    return {Path(f.path).name: f.content for f in render(plan).release_files}


def test_worker_and_frontend_units() -> None:
    p1, p2 = plans()
    f1, f2 = _files(p1), _files(p2)
    named = {n for n in f1 if n.startswith(("firewall-", "proxy-"))}
    assert len(named) == 2 and set(f1) - named == {
        "specdec-engine.service", "specdec-etcd.service", "specdec-frontend.service",
        "specdec-firewall.service", "specdec-proxy.service", "plan.json"}
    # a worker-only member serves no API: no proxy
    assert {n for n in f2 if not n.startswith("firewall-")} == {
        "specdec-engine.service", "specdec-firewall.service", "plan.json"}
    worker = f2["specdec-engine.service"]
    assert "python3 -m dynamo.vllm --model Qwen/Qwen3-8B" in worker
    assert "-e ETCD_ENDPOINTS=https://192.0.2.41:2379" in worker
    assert "-e DYN_TCP_RPC_HOST=192.0.2.42" in worker and "-e DYN_SYSTEM_PORT=8081" in worker
    assert "-e DYN_TCP_RPC_PORT=8082" in worker and "DYN_SYSTEM_ENABLED" not in worker
    # the member certificate reaches the runtime as PEM contents, read inside the container
    assert "-v /etc/specdec/tls/group/member.key:/run/secrets/group-member.key:ro" in worker
    assert "ETCD_AUTH_CLIENT_KEY=$$(cat" in worker and "BEGIN" not in worker
    assert "--port" not in worker.split("dynamo.vllm", 1)[1]
    cfg = json.loads(re.search(r"--speculative-config '(\{.*?\})'", worker).group(1))
    from specdec.engines.vllm.facts import vllm_facts

    assert cfg["method"] == "eagle3" and set(cfg) <= vllm_facts("0.31.0").spec_keys
    assert "After=network-online.target specdec-firewall.service docker.service " \
           "specdec-etcd.service" in f1["specdec-engine.service"]
    assert "python3 -m dynamo.frontend --http-host 127.0.0.1 --http-port 8001 --router-mode " \
           "round-robin --migration-limit 3" in f1["specdec-frontend.service"]
    etcd = f1["specdec-etcd.service"]
    assert "--listen-client-urls https://192.0.2.41:2379,https://127.0.0.1:2379" in etcd
    assert "--cert-file %d/group-member.crt --key-file %d/group-member.key " \
           "--trusted-ca-file %d/group-ca.crt --client-cert-auth" in etcd
    assert "LoadCredential=group-member.key:/etc/specdec/tls/group/member.key" in etcd
    assert "Type=notify" in etcd


def test_baseline_shares_the_etcd_and_frontend_units() -> None:
    p1 = plans()[0]
    cand, base = _files(p1), _files(baseline(p1))
    assert cand["specdec-engine.service"] != base["specdec-engine.service"]
    for u in ("specdec-etcd.service", "specdec-frontend.service"):
        assert cand[u] == base[u]  # a baseline/candidate switch restarts only the worker


def test_native_units_use_the_venv() -> None:
    hosts = [(n, {**d, "specdec_runtime": "native"}) for n, d in PAIR]
    f1 = _files(plans(hosts)[0])
    assert "exec \"$$@\"' sh /opt/dynamo/venv/bin/python3 -m dynamo.vllm" in \
        f1["specdec-engine.service"]
    assert "Environment=DYN_SYSTEM_HOST=192.0.2.41" in f1["specdec-engine.service"]
    assert "exec \"$$@\"' sh /opt/dynamo/venv/bin/python3 -m dynamo.frontend" in \
        f1["specdec-frontend.service"]
    # natively each unit's IP filter admits loopback and the members only
    for u in ("specdec-engine.service", "specdec-frontend.service", "specdec-etcd.service"):
        assert "IPAddressDeny=any\nIPAddressAllow=localhost 192.0.2.41/32 192.0.2.42/32" in f1[u]
    # offline behind the frontend: the HF token is not the engine's (issue 29)
    assert "hf_token" not in f1["specdec-engine.service"]
    assert "LoadCredential=group-member.key:" in f1["specdec-engine.service"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_group_units(tmp_path: Path) -> None:
    hosts = [(n, {**d, "specdec_runtime": "native"}) for n, d in PAIR]
    for name, text in _files(plans(hosts)[0]).items():
        if not name.endswith(".service"):
            continue
        text = re.sub(r"^ExecStart=\S+", "ExecStart=/bin/true", text, flags=re.M)
        path = tmp_path / name
        path.write_text(text)
        out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                             capture_output=True, text=True, check=False, timeout=60)
        bad = [ln for ln in out.stderr.splitlines() if str(path) in ln and
               "Unknown key" in ln or "bad unit file" in ln]
        assert bad == [], name


def test_aux_restart_restarts_only_changed_units(tmp_path: Path) -> None:
    """The shell the guard, the switch and recover run: only a differing unit restarts."""
    for rid, body in (("a", "x"), ("b", "x"), ("c", "y")):
        d = tmp_path / "releases" / rid
        d.mkdir(parents=True)
        (d / "specdec-etcd.service").write_text("etcd")
        (d / "specdec-frontend.service").write_text(body)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n"
                                       "[ \"$1\" != is-active ]\n")
    (bin_dir / "systemctl").chmod(0o755)

    def calls(old: str, new: str) -> list[str]:
        (tmp_path / "calls").write_text("")
        subprocess.run(["sh", "-c", f"cd {tmp_path} && PATH={bin_dir}:$PATH; "
                        + release.aux_restart(old, new)], check=True)
        return [c for c in (tmp_path / "calls").read_text().splitlines()
                if not c.startswith("is-active")]

    # is-active answers "not running" in this fake, so everything is (re)started from a to b:
    assert calls("releases/a", "releases/b") == ["restart specdec-etcd.service",
                                                 "restart specdec-frontend.service"]
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n")
    assert calls("releases/a", "releases/b") == []
    assert calls("releases/a", "releases/c") == ["restart specdec-frontend.service"]
    (tmp_path / "releases" / "d").mkdir()
    assert calls("releases/a", "releases/d") == ["stop specdec-etcd.service",
                                                 "stop specdec-frontend.service"]


def test_guard_script_restarts_aux_units_on_revert() -> None:
    from specdec.host.guard import script

    text = script()
    assert "cmp -s \"$cur\"/specdec-frontend.service \"$good\"/specdec-frontend.service" in text
    assert text.index("specdec-etcd.service") < text.index("specdec-frontend.service") < \
        text.index(f"systemctl restart {layout.SERVICE_NAME}.service")


# -- reports ---------------------------------------------------------------------------------


def test_fleet_summary_has_the_group() -> None:
    def rep(host: str, role: str, outcome: str) -> dict[str, Any]:
        return {"host": host, "outcome": outcome, "device": "dgx-spark", "method": "eagle3",
                "message": "group pair: speculation kept on every member",
                "baseline": {"c1": {"throughput_tok_s": 10.0, "tpot_ms_p50": 100.0}},
                "candidate": {"c1": {"throughput_tok_s": 20.0, "tpot_ms_p50": 50.0}},
                "group": {"name": "pair", "url": "http://192.0.2.41:8000", "role": role,
                          "outcome": "kept", "frontend": "spark-01"}}

    md = summary_markdown([rep("spark-01", "etcd, frontend, worker", "kept"),
                           rep("spark-02", "worker", "kept")], "r1")
    section = md.split("## Serving groups")[1]
    assert "| pair | http://192.0.2.41:8000 | spark-01 (etcd, frontend, worker): kept; " \
           "spark-02 (worker): kept | kept | +100.0% |" in section


@pytest.mark.parametrize(("rows", "expect"), [
    ([("orin-a", {"specdec_device": "agx-orin-64gb"})],
     "orin-a: specdec_engine='dynamo': not supported on agx-orin-64gb"),
    ([("spark-a", {"specdec_group": "g"}),
      ("spark-b", {"specdec_group": "g", "specdec_model": "Qwen/Qwen3-4B"})],
     "spark-b: group 'g': model 'Qwen/Qwen3-4B' differs from spark-a's 'Qwen/Qwen3-8B'"),
    ([("spark-a", {"specdec_group": "g", "specdec_group_frontend": "spark-z"}),
      ("spark-b", {"specdec_group": "g"})],
     "spark-a: specdec_group_frontend='spark-z': not a member of group 'g'"),
])
def test_bad_groups_are_one_line_exit_2(tmp_path: Path, rows: list[tuple[str, dict[str, Any]]],
                                        expect: str) -> None:
    import sys

    base = {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
            "specdec_model": "Qwen/Qwen3-8B"}
    hosts = [(n, {**base, "ssh_hostname": f"192.0.2.{i}", **d})
             for i, (n, d) in enumerate(rows, start=10)]
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = {hosts!r}\n")
    out = subprocess.run([sys.executable, "-m", "specdec", "plan", str(inv)], capture_output=True,
                         text=True, check=False, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and expect in out.stderr, out.stderr


def test_a_member_address_must_be_an_ip(tmp_path: Path) -> None:
    import sys

    base = {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
            "specdec_model": "Qwen/Qwen3-8B", "specdec_group": "g"}
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = {[('spark-a', base), ('spark-b', base)]!r}\n")
    out = subprocess.run([sys.executable, "-m", "specdec", "plan", str(inv)], capture_output=True,
                         text=True, check=False, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 2 and out.stderr == (
        "specdec: error: spark-a: specdec_dynamo_address='spark-a': must be an IP address (the "
        "group's firewall lets its members in by address; set it, or ssh_hostname, to the "
        "member's IP)\n")


def test_worker_card_path_is_the_same_on_every_member(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # the frontend refuses a second worker whose model card checksum (path included) differs
    import tempfile

    from specdec_lab.emulator.dynamo_worker import _card_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    a, b = _card_dir("Qwen/Qwen3-8B"), _card_dir("Qwen/Qwen3-8B")
    assert a == b == tmp_path / "specdec-dynamo-card" / "Qwen--Qwen3-8B" and a.is_dir()
    assert _card_dir("Qwen/Qwen3-4B") != a
