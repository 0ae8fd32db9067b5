"""The release's firewall and API proxy, for real on this machine: every rendered ruleset passes
``nft -c`` and loads twice in a private network namespace (the second load replaces the table
in one transaction); loaded between two namespaces it drops every new connection but SSH and
the planned sockets from their networks (a listener outside the plan times out, as a host
network container's would); and the rendered nginx config, with the key map its unit writes
from the credentials, serves only HTTPS (the inventory CA's certificate), refuses every route
without the key (401), accepts the rotated-out key beside the new one until it is retired, and
proxies with it, streaming as the engine sends."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specdec.config import pki
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import make_plan, plan_host_settings
from specdec.plan.types import Plan
from specdec.render import firewall, proxy

KEY = "sdk_" + "Proxy0key" * 5
BASE = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}


def _plans() -> list[Plan]:
    out = [make_plan("a", BASE),
           make_plan("b", {**BASE, "specdec_allow_from": ["10.0.0.0/8", "fd00::/8"],
                           "specdec_listen": "10.1.2.3"}),
           make_plan("c", {**BASE, "specdec_allow_from": ["192.168.0.0/16", "fd00::/8"],
                           "specdec_listen": "::"}),
           make_plan("d", {**BASE, "specdec_listen": "fd00::5", "specdec_port": 9000,
                           "specdec_allow_from": ["fd00::/64"]})]
    hosts = [(f"s{i}", {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
                        "specdec_model": "Qwen/Qwen3-8B", "ssh_hostname": f"192.0.2.{i}",
                        "specdec_group": "g"}) for i in (1, 2)]
    settings = parse_hosts(hosts)
    groups = groups_of(settings)
    out += [plan_host_settings(s, group=groups[s.host]) for s in settings]
    return out


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.fail(f"{name} is not installed (make setup installs it)")
    return path


@pytest.mark.parametrize("plan", _plans(), ids=lambda p: p.host)
def test_ruleset_checks_and_loads_twice_in_a_private_netns(plan: Plan, tmp_path: Path) -> None:
    nft = _tool("nft")
    text = firewall.ruleset(plan)
    f = tmp_path / firewall.ruleset_name(text)
    f.write_text(text)
    check = subprocess.run([nft, "-c", "-f", str(f)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    if os.geteuid() != 0:
        pytest.fail("loading the ruleset needs root (a private network namespace)")
    load = subprocess.run(
        ["unshare", "--net", "sh", "-c", f"{nft} -f {f} && {nft} -f {f} && "
         f"{nft} list table inet specdec && {nft} delete table inet specdec && "
         f"! {nft} list table inet specdec 2>/dev/null"],
        capture_output=True, text=True, timeout=60)
    assert load.returncode == 0, load.stderr
    out = load.stdout
    for s in plan.sockets:
        if s.reach and s.address not in ("127.0.0.1",):
            port = f"{s.port}-{s.port_end}" if s.port_end else str(s.port)
            assert f"dport {port}" in out and "reject with tcp reset" in out
    assert "policy drop" in out and 'iif "lo" accept' in out and "tcp dport 22 accept" in out


def test_members_only_sockets_reject_the_rest() -> None:
    text = firewall.ruleset(_plans()[4])  # the frontend member
    # etcd, the system port, the request plane, the response stream; the event plane's
    # publishers on ephemeral ports
    for port in ("2379", "8081", "8082", "8083", "32768-60999"):
        assert f"ip daddr 192.0.2.1 tcp dport {port} ip saddr {{ 192.0.2.1/32, 192.0.2.2/32 }} " \
               "accept" in text
        assert f"ip daddr 192.0.2.1 tcp dport {port} ct state new reject with tcp reset" in text
    assert "2380" not in text and "8001" not in text  # loopback sockets need no rule


_PROBE = ("import socket, sys\ns = socket.socket()\ns.settimeout(2)\n"
          "try:\n    s.connect((sys.argv[1], int(sys.argv[2])))\n    print('open')\n"
          "except ConnectionRefusedError:\n    print('refused')\nexcept OSError:\n"
          "    print('timeout')\n")
_LISTEN = ("import socket, sys, time\nss = []\nfor p in sys.argv[1:]:\n"
           "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "    s.bind(('0.0.0.0', int(p))); s.listen(); ss.append(s)\n"
           "print('up', flush=True)\ntime.sleep(120)\n")


@contextlib.contextmanager
def _netns(*names: str) -> Iterator[None]:
    """Fresh network namespaces, removed after."""
    made = []
    try:
        for n in names:
            subprocess.run(["ip", "netns", "add", n], check=True)
            made.append(n)
        yield
    finally:
        for n in made:
            subprocess.run(["ip", "netns", "delete", n], check=False)


def test_the_firewall_drops_every_new_connection_outside_the_plan(tmp_path: Path) -> None:
    """A host namespace with the ruleset of a plan whose API admits 10.9.1.0/24 only; a LAN
    namespace with one address inside that network and one outside: SSH and the API (from
    inside) connect, the API from outside is refused, a listener outside the plan (5557, as
    a --network host container's ``--kv-events-config tcp://*:5557``) times out from both."""
    if os.geteuid() != 0:
        pytest.fail("the firewall's traffic test needs root (network namespaces)")
    nft = _tool("nft")
    plan = make_plan("fw", {**BASE, "specdec_allow_from": ["10.9.1.0/24"]})
    rules = tmp_path / "r.nft"
    rules.write_text(firewall.ruleset(plan))
    tag = f"sdfw{os.getpid()}"
    host, lan = f"{tag}h", f"{tag}l"
    with _netns(host, lan):
        ip = ["ip", "-n", host]
        subprocess.run(["ip", "link", "add", f"{tag}a", "netns", host, "type", "veth", "peer",
                        f"{tag}b", "netns", lan], check=True)
        for ns, dev, addrs in ((host, f"{tag}a", ["10.9.1.1/24"]),
                               (lan, f"{tag}b", ["10.9.1.2/24", "10.9.2.2/24"])):
            for a in addrs:
                subprocess.run(["ip", "-n", ns, "addr", "add", a, "dev", dev], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        subprocess.run([*ip, "addr", "add", "10.9.2.1/24", "dev", f"{tag}a"], check=True)
        subprocess.run(["ip", "netns", "exec", host, nft, "-f", str(rules)], check=True)
        srv = subprocess.Popen(["ip", "netns", "exec", host, "python3", "-c", _LISTEN, "22",
                                str(plan.port), "5557"], stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout is not None and srv.stdout.readline().strip() == "up"

            def probe(src: str, dst: str, port: int) -> str:
                code = _PROBE.replace("s = socket.socket()",
                                      f"s = socket.socket(); s.bind(({src!r}, 0))")
                return subprocess.run(["ip", "netns", "exec", lan, "python3", "-c", code, dst,
                                       str(port)], capture_output=True, text=True,
                                      check=True).stdout.strip()

            assert probe("10.9.1.2", "10.9.1.1", 22) == "open"  # SSH: kept
            assert probe("10.9.1.2", "10.9.1.1", plan.port) == "open"  # planned, allowed
            assert probe("10.9.2.2", "10.9.2.1", plan.port) == "refused"  # planned, not for it
            assert probe("10.9.1.2", "10.9.1.1", 5557) == "timeout"  # not planned: dropped
            assert probe("10.9.2.2", "10.9.2.1", 5557) == "timeout"
            local = subprocess.run(["ip", "netns", "exec", host, "python3", "-c", _PROBE,
                                    "127.0.0.1", "5557"], capture_output=True, text=True)
            assert local.stdout.strip() == "open"  # the host itself still reaches it
        finally:
            srv.terminate()
            srv.wait(10)


class _Engine(http.server.BaseHTTPRequestHandler):
    """Stands in for the engine on loopback: every path answers; the stream sends its first
    event, then holds the rest until the client says it has read that one (``client_read``, at
    most 10 s: ``held`` records each wait that ran out)."""

    seen: list[str] = []
    client_read = threading.Event()
    held: list[bool] = []

    def log_message(self, *a: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        _Engine.seen.append(self.path)
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(3):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                if i == 0:
                    _Engine.held.append(not _Engine.client_read.wait(10))
            return
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


OLD = "sdk_" + "Retired0key" * 4  # the rotated-out key, still accepted until retired


def _key_map(creds: Path, run: Path) -> subprocess.CompletedProcess[str]:
    """The unit's ExecStartPre, as systemd runs it (its credentials and runtime directories)."""
    return subprocess.run(["/bin/sh", "-c", proxy._key_map_script()], capture_output=True,
                          text=True, env={"PATH": os.environ["PATH"],
                                          "CREDENTIALS_DIRECTORY": str(creds),
                                          "RUNTIME_DIRECTORY": str(run)})


@dataclass
class Proxied:
    url: str
    ca: ssl.SSLContext
    plain: str  # the same port, plain HTTP
    rotating: bool  # a rotated-out key is given besides the fleet's


@pytest.fixture(params=[OLD, ""], ids=["rotating", "one-key"])
def proxied(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Proxied]:
    """nginx with the rendered config (HTTPS with a certificate of the inventory's CA) and
    the unit's own key map step (with a rotated-out key, or none), in front of a stand-in
    engine."""
    nginx = _tool("nginx")
    port, engine_port = _port(), _port()
    plan = make_plan("p", {**BASE, "specdec_port": port, "specdec_engine_port": engine_port,
                           "specdec_listen": "127.0.0.1"})
    run, creds = tmp_path / "run", tmp_path / "creds"
    run.mkdir()
    creds.mkdir()
    (creds / proxy.KEY_CREDENTIAL).write_text(KEY + "\n")
    (creds / proxy.OLD_KEY_CREDENTIAL).write_text(request.param + "\n" if request.param else "")
    got = pki.issue(pki.api_authority(None, tmp_path / "inv"), "p", ["127.0.0.1", "localhost"],
                    server=True)
    (creds / proxy.TLS_CERT).write_bytes(got.cert_pem)
    (creds / proxy.TLS_KEY).write_bytes(got.key_pem)
    pre = _key_map(creds, run)
    assert pre.returncode == 0, pre.stderr
    assert oct((run / "key.conf").stat().st_mode & 0o777) == "0o600"
    conf = tmp_path / "nginx.conf"
    conf.write_text(proxy.config(plan).replace(proxy.RUN_DIR, str(run))
                    .replace(proxy._CREDS, str(creds)))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", engine_port), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    p = subprocess.Popen([nginx, "-p", str(run), "-c", str(conf)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield Proxied(f"https://127.0.0.1:{port}",
                      ssl.create_default_context(cadata=got.ca_pem.decode()),
                      f"http://127.0.0.1:{port}", bool(request.param))
    finally:
        p.terminate()
        p.wait(10)
        srv.shutdown()
        srv.server_close()


def _get(p: Proxied, path: str, key: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(p.url + path,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=p.ca) as r:  # noqa: S310
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_proxy_requires_the_key_on_every_route(proxied: Proxied) -> None:
    _Engine.seen.clear()
    # vLLM's own key leaves these open; the proxy does not
    for path in ("/v1/models", "/invocations", "/metrics", "/health", "/tokenize", "/version",
                 "/lab/truth", "/"):
        assert _get(proxied, path, None)[0] == 401, path
        assert _get(proxied, path, "sdk_" + "wrong" * 8)[0] == 401, path
        assert _get(proxied, path, KEY.lower())[0] == 401, path
        assert _get(proxied, path, OLD.lower())[0] == 401, path
    assert _Engine.seen == []  # nothing reached the engine
    status, body = _get(proxied, "/v1/models", KEY)
    assert status == 200 and body == b'{"ok": true}' and _Engine.seen == ["/v1/models"]
    # the rotated-out key: accepted while it is being retired, refused once it is
    assert _get(proxied, "/v1/models", OLD)[0] == (200 if proxied.rotating else 401)


def test_proxy_speaks_only_tls_with_the_inventory_ca(proxied: Proxied) -> None:
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(proxied.url + "/v1/models", timeout=10)  # the system's trust
    req = urllib.request.Request(proxied.plain + "/v1/models",
                                 headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(urllib.error.HTTPError) as got:  # plain HTTP to the TLS port
        urllib.request.urlopen(req, timeout=10)
    assert got.value.code == 400


def test_proxy_streams_as_the_engine_sends(proxied: Proxied) -> None:
    req = urllib.request.Request(proxied.url + "/stream",
                                 headers={"Authorization": f"Bearer {KEY}"})
    _Engine.client_read.clear()
    _Engine.held.clear()
    with urllib.request.urlopen(req, timeout=30, context=proxied.ca) as r:  # noqa: S310
        first = r.readline()
        _Engine.client_read.set()
        rest = r.read()
    assert first == b"data: 0\n" and rest.count(b"data:") == 2
    # the first event reached the client while the engine still held the rest back: not
    # buffered until the end (a buffering proxy would have kept the engine waiting 10 s)
    assert _Engine.held == [False]


def test_the_key_map_step_refuses_a_bad_credential(tmp_path: Path) -> None:
    for bad in ("", "not-a-key", KEY + "\nsecond line", 'sdk_x"; evil'):
        for current, old in ((bad, ""), (KEY, bad or "sdk_short")):
            (tmp_path / proxy.KEY_CREDENTIAL).write_text(current)
            (tmp_path / proxy.OLD_KEY_CREDENTIAL).write_text(old)
            out = _key_map(tmp_path, tmp_path)
            assert out.returncode != 0 and "malformed" in out.stderr
            assert not (tmp_path / "key.conf").exists()
