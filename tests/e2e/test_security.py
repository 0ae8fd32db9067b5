"""Closed to the network the fleet sits on, in the lab, after the first deploy.

The lab's hosts share one network (`specdec_lab.host.lan_routes`): any host outside the Dynamo
group is an *intruder* to it, as a laptop on the same shop floor would be. From the intruder
(and from this machine, which runs the deploy but is no member either): the group's etcd, its
request and response planes and its workers' system ports refuse the connection; every host's
API answers 401 on every route without the fleet's key, routes vLLM's own key leaves open
(``/invocations``, ``/metrics``, ``/health``) included. Meanwhile the members reach each other
(etcd over TLS with their member certificate), the group serves through its frontend and every
host serves with the key. The fleet's key and the group's private keys appear in no unit file,
argv, journal, pyinfra output, report or ``docker inspect``.
"""

from __future__ import annotations

import shlex

import pytest

from specdec.engines.dynamo.facts import DEFAULT_SYSTEM_PORT
from specdec.host import layout
from tests.e2e.conftest import LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e

FRONT, WORKER = "lab-dyn1", "lab-dyn2"
GROUP_PORTS = {"etcd": 2379, "system": DEFAULT_SYSTEM_PORT,
               "request plane": DEFAULT_SYSTEM_PORT + 1}
FRONT_ONLY = {"response stream": DEFAULT_SYSTEM_PORT + 2}
OPEN_IN_VLLM = ("/invocations", "/metrics", "/health", "/tokenize", "/version", "/v1/models")


def _group(lab: LabFleet) -> None:
    if not {FRONT, WORKER} <= {h.name for h in lab.hosts}:
        pytest.skip("the lab has no Dynamo group (SPECDEC_LAB_DYNAMO=0)")


def _intruder(lab: LabFleet) -> str:
    return next(h.name for h in lab.hosts if h.name not in (FRONT, WORKER))


def _connect(lab: LabFleet, src: str, address: str, port: int) -> str:
    """From lab host ``src``: ``open``, ``refused`` or ``timeout`` for a TCP connection."""
    probe = (f"python3 -c {shlex.quote(_PROBE)} {address} {port}")
    return lab.ssh(src, probe, timeout=60).stdout.strip()


_PROBE = """import socket, sys
s = socket.socket()
s.settimeout(4)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("open")
except ConnectionRefusedError:
    print("refused")
except OSError:
    print("timeout")
"""


def test_an_intruder_reaches_no_group_port(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    _group(lab)
    intruder = _intruder(lab)
    front, worker = lab.host(FRONT), lab.host(WORKER)
    targets = [(front, p) for p in [*GROUP_PORTS.values(), *FRONT_ONLY.values()]]
    targets += [(worker, p) for name, p in GROUP_PORTS.items() if name != "etcd"]
    for host, port in targets:
        # the intruder lab host, and this machine: neither is a member
        assert _connect(lab, intruder, host.address, port) == "refused", (intruder, host, port)
        assert lab.http(f"http://{host.address}:{port}/health", key=False)[0] == 0, (host, port)
    # ... while the members reach each other: the worker asks the frontend's etcd, over TLS,
    # with its member certificate (and without one, the TLS handshake fails)
    tls = layout.GROUP_TLS_DIR
    ask = (f"curl -s -m 10 --cacert {tls}/ca.crt --cert {tls}/member.crt --key {tls}/member.key "
           f"https://{front.address}:2379/health")
    assert '"health":"true"' in lab.ssh(WORKER, ask).stdout
    bare = lab.ssh(WORKER, f"curl -s -m 10 --cacert {tls}/ca.crt https://{front.address}:2379"
                   "/health; echo rc=$?", check=False).stdout
    assert '"health"' not in bare and "rc=0" not in bare
    assert _connect(lab, WORKER, front.address, FRONT_ONLY["response stream"]) == "open"
    assert _connect(lab, FRONT, worker.address, GROUP_PORTS["request plane"]) == "open"


def test_every_api_wants_the_key_on_every_route(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    intruder = _intruder(lab)
    apis = [h for h in lab.hosts if h.name != WORKER]  # a worker-only member serves no API
    for h in apis:
        base = f"{lab.api(h)}"
        for path in OPEN_IN_VLLM:
            assert lab.http(base + path, key=False)[0] == 401, (h.name, path)
            # the intruder trusts any certificate (-k): the key alone keeps it out
            out = lab.ssh(intruder, f"curl -sk -o /dev/null -w '%{{http_code}}' -m 10 "
                          f"{base}{path}", check=False).stdout
            assert out == "401", (h.name, path, out)
        chat = {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        assert lab.http(base + "/v1/chat/completions", chat, key=False)[0] == 401, h.name
        assert lab.http(base + "/v1/models")[0] == 200, h.name  # with the key: served
        # the engine itself listens on loopback only: the intruder cannot go around the proxy
        port = 8001 if h.port == 8000 else h.port + 1
        assert _connect(lab, intruder, h.address, port) != "open", h.name  # dropped
        assert "table inet specdec" in lab.ssh(h.name, "nft list table inet specdec").stdout


def test_the_key_and_the_group_keys_appear_nowhere_else(lab: LabFleet,
                                                         deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    key = lab.api_key_file.read_text().strip()
    assert key.startswith("sdk_")
    marks = {"the API key": key}
    members = [h.name for h in lab.hosts if h.name in (FRONT, WORKER)]
    for name in members:  # a line of each member's private key
        pem = lab.ssh(name, f"cat {layout.GROUP_TLS_DIR}/member.key").stdout.splitlines()
        assert pem and pem[0] == "-----BEGIN PRIVATE KEY-----"
        marks[f"{name}'s member key"] = pem[1]
    for what, mark in marks.items():
        assert mark not in deployed.output, f"{what} is in pyinfra -vvv output"
        for run in lab.runs:
            assert mark not in run.output, what
        if deployed.reports is not None:
            for p in deployed.reports.rglob("*"):
                if p.is_file():
                    assert mark not in p.read_text(errors="replace"), (what, p)
    q = {w: shlex.quote(m) for w, m in marks.items()}
    for h in lab.hosts:
        own = {layout.API_KEY_FILE, f"{layout.GROUP_TLS_DIR}/member.key"}
        for what, mark in q.items():
            found = lab.ssh(h.name, (
                f"grep -rlF -- {mark} /etc /var/lib/specdec /run/systemd "
                "/var/lib/docker/containers 2>/dev/null || true")).stdout.split()
            assert not set(found) - own, f"{h.name}: {what} found in {found}"
            assert marks[what] not in lab.ssh(h.name, "ps -eo args ww").stdout, what
            assert marks[what] not in lab.ssh(h.name, "journalctl --no-pager -o cat").stdout
            units = lab.ssh(h.name, "cat /etc/systemd/system/specdec-*.service "
                            f"{layout.CURRENT}/* 2>/dev/null || true").stdout
            assert marks[what] not in units, (h.name, what)
            inspect = lab.ssh(h.name, "docker inspect $(docker ps -aq) 2>/dev/null || true",
                              check=False).stdout
            assert marks[what] not in inspect, (h.name, what)
        mode = lab.ssh(h.name, f"stat -c '%a %U' {layout.API_KEY_FILE}").stdout.split()
        assert mode == ["600", "root"]
