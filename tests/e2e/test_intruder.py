"""An intruder on the fleet's LAN, after the first deploy (issue 29): it reaches no port but the
planned ones, also while a host-network container opens a listener of its own; it reads no HF
token off the wire of a download through the site mirror; a rotated-out API key stops working
after the deploy that retires it; and a flushed firewall is back after one no-op deploy.

The lab's hosts reach each other through this machine (`specdec_lab.host.lan_routes`): it is
the router of their LAN, so a capture on a host's veth here sees every frame that host sends or
receives, as an attacker on the path would.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specdec.host.layout import RELEASES_DIR, SITE_CA_FILE
from specdec.plan.sites import HUB_PORT
from specdec_lab.sites import host_download
from tests.e2e.conftest import LabFleet, PyinfraRun
from tests.e2e.test_security import FRONT, WORKER, _connect

pytestmark = pytest.mark.e2e
STRAY_PORT = 5557  # vLLM's --kv-events-config tcp://*:5557, opened outside the plan
STRAY = "specdec-e2e-stray"
GATED = "meta-llama/Llama-3.2-1B-Instruct"
ETH_P_ALL = 0x0003


def _plan(lab: LabFleet, host: str) -> dict:
    return json.loads(lab.ssh(host, f"cat {RELEASES_DIR}/$(basename $(readlink "
                                    "/var/lib/specdec/current))/plan.json").stdout)


def _roles(lab: LabFleet) -> tuple[str, str]:
    """A docker host outside the Dynamo group (the target) and another host (the intruder)."""
    loose = [h.name for h in lab.hosts if h.name not in (FRONT, WORKER)]
    target = next((n for n in loose if _plan(lab, n)["runtime"] == "docker"), None)
    if target is None or len(loose) < 2:
        pytest.skip("the lab needs a docker host and another host outside the group")
    return target, next(n for n in loose if n != target)


def _planned_open(plan: dict, intruder_address: str) -> set[int]:
    """The ports the plan lets ``intruder_address`` reach: its sockets' reach, and SSH."""
    src = ipaddress.ip_address(intruder_address)
    out = {int(plan.get("ssh_port") or 22)}
    for s in plan["sockets"]:
        nets = [ipaddress.ip_network(n, strict=False) for n in s["reach"]]
        if any(n.version == src.version and src in n for n in nets):
            out |= set(range(s["port"], (s.get("port_end") or s["port"]) + 1))
    return out


def _listening(lab: LabFleet, host: str) -> set[int]:
    """TCP ports ``host`` listens on at an address other than loopback."""
    out = set()
    for line in lab.ssh(host, "ss -Hltn").stdout.splitlines():
        local = line.split()[3]
        addr, port = local.rsplit(":", 1)
        if not addr.strip("[]").startswith(("127.", "::1")):
            out.add(int(port))
    return out


@contextmanager
def _stray_listener(lab: LabFleet, host: str) -> Iterator[None]:
    """A host-network container of the host's own image listening on every address."""
    image = shlex.quote(str(_plan(lab, host)["image"]))
    lab.ssh(host, f"docker rm -f {STRAY} >/dev/null 2>&1; docker run -d --rm --name {STRAY} "
                  f"--network host --entrypoint python3 {image} -m http.server {STRAY_PORT}")
    try:
        deadline = time.monotonic() + 60
        while STRAY_PORT not in _listening(lab, host):
            assert time.monotonic() < deadline, f"{host}: the stray listener never listened"
            time.sleep(0.5)
        yield
    finally:
        lab.ssh(host, f"docker rm -f {STRAY}", check=False)


def test_the_lan_reaches_only_the_planned_ports(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    target, intruder = _roles(lab)
    planned = _planned_open(_plan(lab, target), lab.host(intruder).address)
    with _stray_listener(lab, target):
        listening = _listening(lab, target)
        assert STRAY_PORT in listening and STRAY_PORT not in planned
        assert _connect(lab, target, "127.0.0.1", STRAY_PORT) == "open"  # it does serve
        got = {p: _connect(lab, intruder, lab.host(target).address, p) for p in listening}
    assert {p for p, r in got.items() if r == "open"} == listening & planned, got
    assert listening & planned, "nothing planned listens: the test proves nothing"


class _Sniffer:
    """Every frame on some of this machine's interfaces (AF_PACKET), kept in memory."""

    def __init__(self, interfaces: list[str]) -> None:
        self.frames: list[bytes] = []
        self._stop = threading.Event()
        self._socks = []
        for name in interfaces:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((name, 0))
            s.settimeout(0.2)
            self._socks.append(s)
        self._threads = [threading.Thread(target=self._read, args=(s,), daemon=True)
                         for s in self._socks]
        for t in self._threads:
            t.start()

    def _read(self, s: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                self.frames.append(s.recv(65535))
            except TimeoutError:
                continue

    def stop(self) -> bytes:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for s in self._socks:
            s.close()
        return b"\n".join(self.frames)


def test_no_token_on_the_wire_of_a_mirrored_download(lab: LabFleet,
                                                     deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    mirror = lab.hosts[0]  # SPECDEC_LAB_MIRROR's default
    client = next((h for h in lab.hosts if h.name not in (mirror.name, FRONT, WORKER)
                   and lab.ssh(h.name, f"test -f {SITE_CA_FILE}", check=False).returncode == 0),
                  None)
    if client is None:
        pytest.skip("no host of the lab downloads through a site mirror")
    marker = "specdec-wire-" + secrets.token_hex(8)
    sniffer = _Sniffer(sorted({mirror.veth, client.veth}))
    try:
        # the capture reads payloads: a datagram with a marker crosses it in clear
        lab.ssh(client.name, f"python3 -c \"import socket; socket.socket(socket.AF_INET, "
                             f"socket.SOCK_DGRAM).sendto(b'{marker}', ('{mirror.address}', 9))\"")
        cmd = host_download(_plan(lab, client.name), GATED,
                            f"https://{mirror.address}:{HUB_PORT}", "/tmp/specdec-e2e-wire",
                            True, SITE_CA_FILE)
        proc = lab.ssh(client.name, f"rm -rf /tmp/specdec-e2e-wire; {cmd}", check=False,
                       timeout=300)
    finally:
        wire = sniffer.stop()
        lab.ssh(client.name, "rm -rf /tmp/specdec-e2e-wire", check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-800:]
    assert marker.encode() in wire, "the capture saw no payload"
    assert len(wire) > 100_000, len(wire)  # the download crossed it
    token = lab.hf_token.encode()
    assert token not in wire, "the HF token crossed the LAN in clear"
    assert token.hex().encode() not in wire


def _apis(lab: LabFleet) -> list:
    return [h for h in lab.hosts if h.name != WORKER]  # a worker-only member serves no API


def _status(lab: LabFleet, key: str) -> dict[str, int]:
    return {h.name: lab.http(f"{lab.api(h)}/v1/models", key=key)[0] for h in _apis(lab)}


def test_a_rotated_out_key_stops_working(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    old = lab.api_key_file.read_text().strip()
    rotated = lab.specdec("keys", "rotate", lab.inventory, timeout=120)
    assert rotated.returncode == 0, rotated.stderr
    new = lab.api_key_file.read_text().strip()
    assert new != old and old not in rotated.stdout + rotated.stderr
    run = lab.pyinfra(env={"SPECDEC_RUN_ID": "rotate"})
    assert run.rc == 0 and run.changed, run.summary()
    assert set(_status(lab, old).values()) == {200}  # the overlap: both keys served
    assert set(_status(lab, new).values()) == {200}
    retired = lab.specdec("keys", "retire", lab.inventory, timeout=120)
    assert retired.returncode == 0, retired.stderr
    run = lab.pyinfra(env={"SPECDEC_RUN_ID": "retire"})
    assert run.rc == 0, run.summary()
    assert set(_status(lab, old).values()) == {401}
    assert set(_status(lab, new).values()) == {200}
    for text in (run.output, *(r.output for r in lab.runs)):
        assert old not in text and new not in text


def test_a_flushed_firewall_is_back_after_one_no_op_deploy(lab: LabFleet,
                                                           deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    target, intruder = _roles(lab)
    address = lab.host(target).address
    tables = "nft list tables"
    lab.ssh(target, "systemctl restart nftables.service")  # its start flushes every table
    assert "inet specdec" in lab.ssh(target, tables).stdout  # ... and its drop-in reloads ours
    with _stray_listener(lab, target):
        assert _connect(lab, intruder, address, STRAY_PORT) != "open"
        lab.ssh(target, "nft flush ruleset")
        assert "inet specdec" not in lab.ssh(target, tables).stdout
        assert _connect(lab, intruder, address, STRAY_PORT) == "open"  # the test can fail
        run = lab.pyinfra("--limit", target, env={"SPECDEC_RUN_ID": "refirewall"})
        assert run.rc == 0, run.summary()
        assert any(h == target for h, _ in run.changed), run.summary()  # reported as a change
        assert "inet specdec" in lab.ssh(target, tables).stdout
        assert _connect(lab, intruder, address, STRAY_PORT) != "open"
    assert lab.http(f"{lab.api(lab.host(target))}/v1/models")[0] == 200
    again = lab.pyinfra("--limit", target, env={"SPECDEC_RUN_ID": "refirewall-again"})
    assert again.rc == 0 and not again.changed, again.summary()

