"""The serving group's etcd with the flags specdec renders, judged by etcd 3.4 itself (Debian
12's etcd-server): the peer port takes only the frontend member's own certificate (no plaintext,
no other member's certificate, no certificate of another CA), the client port takes any member's
certificate of the group's CA, and a member that is only a client holds a certificate no TLS
client accepts from a server (issue 29, medium 7)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specdec.config import pki
from specdec.engines.dynamo.units import etcd_argv, member_cn
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import make_plan


def _member(addr: str) -> dict[str, Any]:
    return {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
            "specdec_model": "Qwen/Qwen3-8B", "ssh_hostname": addr, "specdec_group": "pair"}


PAIR = [("@ssh/spark-01", _member("192.0.2.41")), ("@ssh/spark-02", _member("192.0.2.42"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Etcd:
    client: int
    peer: int
    certs: Path

    def curl(self, port: int, path: str, *, cert: str | None = None,
             scheme: str = "https") -> subprocess.CompletedProcess[str]:
        c = self.certs
        argv = ["curl", "-sS", "--http1.1", "-m", "5", "--cacert", str(c / "ca.crt")]
        if cert is not None:
            argv += ["--cert", str(c / f"{cert}.crt"), "--key", str(c / f"{cert}.key")]
        return subprocess.run([*argv, f"{scheme}://127.0.0.1:{port}{path}"],
                              capture_output=True, text=True, timeout=30, check=False)


def _certs(tmp: Path) -> Path:
    """The group's CA and both members' certificates as the deploy issues them, plus one of
    another CA."""
    ca = pki.authority(tmp / "ca", "group pair")
    front, worker = (member_cn(n) for n, _ in PAIR)
    out = tmp / "certs"
    out.mkdir()
    for name, server in ((front, True), (worker, False)):
        got = pki.issue(ca, name, ["127.0.0.1", "localhost"], server=server)
        (out / f"{name}.crt").write_bytes(got.cert_pem)
        (out / f"{name}.key").write_bytes(got.key_pem)
    (out / "ca.crt").write_bytes(ca.cert_pem)
    rogue = pki.issue(pki.authority(tmp / "rogue", "rogue"), front, ["127.0.0.1"], server=True)
    (out / "rogue.crt").write_bytes(rogue.cert_pem)
    (out / "rogue.key").write_bytes(rogue.key_pem)
    return out


def _argv(tmp: Path, certs: Path, client: int, peer: int, server_cert: str) -> list[str]:
    """The frontend member's rendered etcd command, on loopback ports of this machine, its
    credentials from ``certs``."""
    plans = [make_plan(n, d, group=groups_of(parse_hosts(PAIR))[n]) for n, d in PAIR]
    argv = etcd_argv(plans[0])
    creds = {"%d/group-ca.crt": certs / "ca.crt",
             "%d/group-member.crt": certs / f"{server_cert}.crt",
             "%d/group-member.key": certs / f"{server_cert}.key"}
    out = [str(creds.get(a, a)).replace(":2380", f":{peer}") for a in argv]
    for flag in ("--listen-client-urls", "--advertise-client-urls"):
        out[out.index(flag) + 1] = f"https://127.0.0.1:{client}"
    out[out.index("--data-dir") + 1] = str(tmp / "data")
    return out


def _start(argv: list[str], e: Etcd) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"etcd exited: {proc.stderr.read().decode()[-800:]}")
        try:
            socket.create_connection(("127.0.0.1", e.client), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("etcd did not listen")


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed ('make setup' installs etcd-server)")
    certs = _certs(tmp_path)
    e = Etcd(_free_port(), _free_port(), certs)
    proc = _start(_argv(tmp_path, certs, e.client, e.peer, member_cn(PAIR[0][0])), e)
    try:
        yield e
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_peer_port_takes_only_the_members_own_certificate(etcd: Etcd) -> None:
    front, worker = (member_cn(n) for n, _ in PAIR)
    # the finding: plaintext on the peer port listed the members (and served raft) to anyone
    plain = etcd.curl(etcd.peer, "/members", scheme="http")
    assert "peerURLs" not in plain.stdout
    for cert in (None, worker, "rogue"):
        assert "peerURLs" not in etcd.curl(etcd.peer, "/members", cert=cert).stdout, cert
    assert "peerURLs" in etcd.curl(etcd.peer, "/members", cert=front).stdout


def test_the_client_port_takes_every_members_certificate_and_no_other(etcd: Etcd) -> None:
    front, worker = (member_cn(n) for n, _ in PAIR)
    for cert in (front, worker):
        assert '"health":"true"' in etcd.curl(etcd.client, "/health", cert=cert).stdout, cert
    for cert in (None, "rogue"):
        assert '"health"' not in etcd.curl(etcd.client, "/health", cert=cert).stdout, cert


def test_a_client_only_certificate_cannot_serve(tmp_path: Path) -> None:
    """etcd started with the worker's certificate (clientAuth only): etcd's own client refuses
    the server (Go's crypto/x509: incompatible key usage), as it accepts the frontend's."""
    if shutil.which("etcdctl") is None:
        pytest.fail("etcdctl is not installed ('make setup' installs etcd-client)")
    certs = _certs(tmp_path)
    front, worker = (member_cn(n) for n, _ in PAIR)
    for server, healthy in ((worker, False), (front, True)):
        e = Etcd(_free_port(), _free_port(), certs)
        data = tmp_path / server
        data.mkdir()
        proc = _start(_argv(data, certs, e.client, e.peer, server), e)
        try:
            out = subprocess.run(
                ["etcdctl", f"--endpoints=https://127.0.0.1:{e.client}", "--dial-timeout=3s",
                 "--cacert", str(certs / "ca.crt"), "--cert", str(certs / f"{front}.crt"),
                 "--key", str(certs / f"{front}.key"), "endpoint", "health"],
                capture_output=True, text=True, timeout=60, check=False)
            assert (out.returncode == 0) is healthy, (server, out.stdout + out.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
