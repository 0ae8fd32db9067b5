"""nginx configuration injection (issue 29, High 3), against Debian's real nginx: a URL in host
data can never become nginx directives. Host data refuses every path character outside RFC 3986
(and ';', '$', quotes there); the renderer quotes every value and refuses one quoting cannot
keep one token, so a value that got past the checks still cannot inject; and an upstream whose
path uses every character that *is* allowed passes ``nginx -t`` and reaches the upstream, path
intact, on real requests."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.config import pki
from specdec.errors import ConfigError, RenderError
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.planner import make_plan
from specdec.plan.sites import SiteMirror
from specdec.render import proxy
from specdec.render.mirror import nginx_conf
from specdec.render.nginx import quote
from tests.unit.test_firewall_proxy import _Engine
from tests.unit.test_lab_hub import free_port
from tests.unit.test_site_mirror import NGINX, nginx_main

# what the audit injected (a space or ';' in the path became directives), and its relatives
HOSTILE = [
    "https://hub.example/x; access_log /tmp/pwned",
    "https://hub.example/x access_log /tmp/pwned",
    "https://hub.example/x;return 200 owned",
    "https://hub.example/x}location /{return 200",
    "https://hub.example/x{",
    'https://hub.example/x"',
    "https://hub.example/x'",
    "https://hub.example/$host",
    "https://hub.example/x\\",
    "https://hub.example/x\tx",
    "https://hub.example/x%",
    "https://hub.example/x%zz",
    "https://hub.example/x|y^",
]
MIRROR = {"specdec_device": "dgx-spark", "specdec_site": "a", "specdec_site_mirror": True}


@pytest.mark.parametrize("url", HOSTILE)
def test_host_data_refuses_every_path_that_could_be_directives(url: str) -> None:
    for key, data in (("specdec_hub_upstream", {"specdec_hub_upstream": url}),
                      ("specdec_registry_upstreams.nvcr.io",
                       {"specdec_registry_upstreams": {"nvcr.io": url}})):
        with pytest.raises(ConfigError) as got:
            parse_host_settings("m1", {**MIRROR, **data})
        text = str(got.value)
        assert text.startswith(f"m1: {key}=") and "\n" not in text
        assert "path may hold only" in text or "must not have surrounding" in text or \
            "control character" in text, text


@pytest.mark.parametrize("url", HOSTILE[:9])
def test_the_renderer_refuses_what_quoting_cannot_keep_one_token(url: str) -> None:
    """Past the checks (a caller building a SiteMirror itself): still no directive."""
    with pytest.raises(RenderError, match="refusing to write"):
        nginx_conf(SiteMirror("a", "m1", "10.0.0.2", hub_upstream=url, resolver="127.0.0.53"))
    with pytest.raises(RenderError):
        nginx_conf(SiteMirror("a", "m1", "10.0.0.2", cdn_hosts=("cdn;x",), resolver="1.1.1.1"))
    with pytest.raises(RenderError):
        nginx_conf(SiteMirror("a", "m1", "10.0.0.2", resolver="1.1.1.1 ipv6=on; x"))
    assert quote("https://h:1/a!b&c(d)*+,=:@~%2F") == '"https://h:1/a!b&c(d)*+,=:@~%2F"'


def test_every_value_in_the_rendered_configs_is_quoted() -> None:
    conf = nginx_conf(SiteMirror("a", "m1", "10.0.0.2", resolver="127.0.0.53"))
    for directive in ("resolver", "set $specdec_hub", "access_log", "error_log",
                      "ssl_certificate", "ssl_certificate_key", "proxy_ssl_trusted_certificate"):
        lines = [ln.strip() for ln in conf.splitlines() if ln.strip().startswith(directive)]
        assert lines and all(ln.split(" ", 2 if directive.startswith("set") else 1)[-1]
                             .startswith('"') for ln in lines), (directive, lines)
    p = make_plan("h", {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B",
                        "specdec_listen": "fd00::5"})
    text = proxy.config(p)
    assert 'listen "[fd00::5]:8000" ssl;' in text and 'server "127.0.0.1:8001";' in text


@pytest.fixture
def upstream() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)  # any path answers
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


def test_an_allowed_path_passes_nginx_t_and_reaches_the_upstream_intact(
        tmp_path: Path, upstream: int) -> None:
    path = "/p!a&b(c)*+,=:@~-._%2F"
    url = f"http://127.0.0.1:{upstream}{path}"
    s = parse_host_settings("m1", {**MIRROR, "specdec_hub_upstream": url})
    assert s.hub_upstream == url  # host data accepts it
    m = SiteMirror("a", "m1", "127.0.0.1", hub_upstream=url, cdn_hosts=("127.0.0.1:9",))
    got = pki.issue(pki.authority(tmp_path / "ca", "site a"), "mirror", list(m.names()),
                    server=True)
    prefix = tmp_path / "n"
    for sub in ("cache", "log", "tmp"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "c.crt").write_bytes(got.cert_pem)
    (prefix / "c.key").write_bytes(got.key_pem)
    port = free_port()
    conf = prefix / "m.conf"
    conf.write_text(nginx_conf(m, cache_dir=str(prefix / "cache"), log_dir=str(prefix / "log"),
                               hub_port=port, lfs_port=free_port(),
                               cert=(str(prefix / "c.crt"), str(prefix / "c.key"))))
    (prefix / "nginx.conf").write_text(nginx_main(prefix, conf))
    args = [NGINX, "-c", str(prefix / "nginx.conf"), "-p", str(prefix)]
    check = subprocess.run([*args, "-t"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(args, stderr=subprocess.PIPE)
    try:
        ctx = ssl.create_default_context(cafile=None)
        ctx.load_verify_locations(cadata=got.ca_pem.decode())
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/api/models/o/n?x=1",
                                            timeout=5, context=ctx) as r:
                    assert r.status == 200
                    break
            except OSError:
                time.sleep(0.1)
        assert _Engine.seen[-1] == f"{path}/api/models/o/n?x=1", _Engine.seen
        assert not list(prefix.rglob("pwned*"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
