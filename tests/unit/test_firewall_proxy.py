"""The release's firewall and API proxy, for real on this machine: every rendered ruleset passes
``nft -c`` and loads twice in a private network namespace (the second load replaces the table
in one transaction), and the rendered nginx config, with the key map its unit writes from the
credential, refuses every route without the key (401) and proxies with it, streaming as the
engine sends."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
            assert f"dport {s.port}" in out and "reject with tcp reset" in out
    assert "policy accept" in out and 'iif "lo" accept' in out


def test_members_only_sockets_reject_the_rest() -> None:
    text = firewall.ruleset(_plans()[4])  # the frontend member
    for port in (2379, 8081, 8082, 8083):
        assert f"ip daddr 192.0.2.1 tcp dport {port} ip saddr {{ 192.0.2.1/32, 192.0.2.2/32 }} " \
               "accept" in text
        assert f"ip daddr 192.0.2.1 tcp dport {port} ct state new reject with tcp reset" in text
    assert "2380" not in text and "8001" not in text  # loopback sockets need no rule


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


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[str]:
    """nginx with the rendered config and the unit's own key map step, in front of a stand-in
    engine; yields the proxy's URL."""
    nginx = _tool("nginx")
    port, engine_port = _port(), _port()
    plan = make_plan("p", {**BASE, "specdec_port": port, "specdec_engine_port": engine_port,
                           "specdec_listen": "127.0.0.1"})
    run, creds = tmp_path / "run", tmp_path / "creds"
    run.mkdir()
    creds.mkdir()
    (creds / proxy.KEY_CREDENTIAL).write_text(KEY + "\n")
    # the unit's ExecStartPre, as systemd runs it (its credentials and runtime directories)
    pre = subprocess.run(["/bin/sh", "-c", proxy._key_map_script()], capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"],
                                         "CREDENTIALS_DIRECTORY": str(creds),
                                         "RUNTIME_DIRECTORY": str(run)})
    assert pre.returncode == 0, pre.stderr
    assert oct((run / "key.conf").stat().st_mode & 0o777) == "0o600"
    conf = tmp_path / "nginx.conf"
    conf.write_text(proxy.config(plan).replace(proxy.RUN_DIR, str(run)))
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
        yield f"http://127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(10)
        srv.shutdown()
        srv.server_close()


def _get(url: str, key: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_proxy_requires_the_key_on_every_route(proxied: str) -> None:
    _Engine.seen.clear()
    # vLLM's own key leaves these open; the proxy does not
    for path in ("/v1/models", "/invocations", "/metrics", "/health", "/tokenize", "/version",
                 "/lab/truth", "/"):
        assert _get(proxied + path, None)[0] == 401, path
        assert _get(proxied + path, "sdk_" + "wrong" * 8)[0] == 401, path
        assert _get(proxied + path, KEY.lower())[0] == 401, path
    assert _Engine.seen == []  # nothing reached the engine
    status, body = _get(proxied + "/v1/models", KEY)
    assert status == 200 and body == b'{"ok": true}' and _Engine.seen == ["/v1/models"]


def test_proxy_streams_as_the_engine_sends(proxied: str) -> None:
    req = urllib.request.Request(proxied + "/stream", headers={"Authorization": f"Bearer {KEY}"})
    _Engine.client_read.clear()
    _Engine.held.clear()
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback
        first = r.readline()
        _Engine.client_read.set()
        rest = r.read()
    assert first == b"data: 0\n" and rest.count(b"data:") == 2
    # the first event reached the client while the engine still held the rest back: not
    # buffered until the end (a buffering proxy would have kept the engine waiting 10 s)
    assert _Engine.held == [False]


def test_the_key_map_step_refuses_a_bad_credential(tmp_path: Path) -> None:
    for bad in ("", "not-a-key", KEY + "\nsecond line", 'sdk_x"; evil'):
        (tmp_path / proxy.KEY_CREDENTIAL).write_text(bad)
        out = subprocess.run(["/bin/sh", "-c", proxy._key_map_script()], capture_output=True,
                             text=True, env={"PATH": os.environ["PATH"],
                                             "CREDENTIALS_DIRECTORY": str(tmp_path),
                                             "RUNTIME_DIRECTORY": str(tmp_path)})
        assert out.returncode != 0 and "malformed" in out.stderr
        assert not (tmp_path / "key.conf").exists()
