"""Sites (specdec/site.py, specdec/mirror_config.py): host data, which mirror a host uses, images
through the site's registry mirror, the rendered configuration, rollout order."""

from __future__ import annotations

import pytest
import yaml

from specdec.errors import ConfigError
from specdec.host.layout import SITE_CA_FILE
from specdec.plan.hostdata import parse_host_settings, parse_hosts
from specdec.plan.planner import make_plan
from specdec.plan.sites import (
    DEFAULT_HUB,
    HUB_PORT,
    SiteMirror,
    download_env,
    mirror_of,
    registry_of,
    resolve,
    site_mirror_hosts,
)
from specdec.render.mirror import nginx_conf, registry_unit, registry_yaml, render_mirror

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"nvcr.io/nvidia/vllm:26.10-py3@{DIGEST}"


def spark(name: str, **data: object) -> tuple[str, dict[str, object]]:
    return name, {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B",
                  "ssh_hostname": f"10.0.0.{len(name)}", **data}


@pytest.mark.parametrize(("data", "message"), [
    ({"specdec_site": "Site A"}, "specdec_site='Site A': a site name is lowercase"),
    ({"specdec_site_mirror": True}, "specdec_site_mirror=True: a site mirror serves a site"),
    ({"specdec_site_mirror": "yes", "specdec_site": "a"}, "must be true or false"),
    ({"specdec_hub_upstream": "http://10.0.0.1"}, "only applies with specdec_site_mirror: true"),
    ({"specdec_hub_endpoint": "ftp://mirror"}, "not an https:// URL"),
    ({"specdec_hub_endpoint": "http://user:hf_secretsecret@mirror"},
     "a URL with credentials (user:password@)"),
    ({"specdec_hub_endpoint": "https://mirror:8180/"}, "drop the trailing '/'"),
    # the token and the files in clear on the LAN: http only to the host's own loopback
    ({"specdec_hub_endpoint": "http://mirror:8180"}, "plain http:// only to this host's own "
     "loopback"),
    ({"specdec_hub_endpoint": "http://10.0.0.1"}, "plain http:// only to this host's own"),
    ({"specdec_hub_endpoint": "http://[fd00::1]:8180"}, "plain http:// only"),
    ({"specdec_site": "a", "specdec_site_mirror": True,
      "specdec_hub_upstream": "http://hub.example"}, "plain http:// only to this host's own"),
    ({"specdec_site": "a", "specdec_site_mirror": True,
      "specdec_registry_upstreams": {"nvcr.io": "http://10.1.1.1:5000"}},
     "specdec_registry_upstreams.nvcr.io='http://10.1.1.1:5000': plain http:// only"),
    # a path that would be nginx directives: RFC 3986 without ';', '$', quotes, spaces, braces
    ({"specdec_site": "a", "specdec_site_mirror": True,
      "specdec_hub_upstream": "https://hub.example/a;access_log"}, "the URL's path may hold"),
    ({"specdec_site": "a", "specdec_site_mirror": True, "specdec_hub_cdn_hosts": "cdn"},
     "must be a list of host[:port] names"),
    ({"specdec_site": "a", "specdec_site_mirror": True,
      "specdec_registry_upstreams": {"nvcr.io": "nvcr.io"}}, "not an https:// URL"),
    ({"specdec_site": "a", "specdec_site_mirror": True, "specdec_mirror_resolver": "a b"},
     "not a host name or address"),
    ({"specdec_tune_cache": "a\nb"}, "specdec_tune_cache"),
])
def test_bad_site_data_is_one_line_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as got:
        parse_host_settings("h1", {"specdec_device": "dgx-spark", **data})
    text = str(got.value)
    assert message in text and "\n" not in text and "hf_secret" not in text
    assert text.startswith("h1: ")


def test_the_engine_port_of_a_mirror_host_must_not_be_the_mirrors() -> None:
    hosts = parse_hosts([spark("m1", specdec_site="a", specdec_site_mirror=True,
                               specdec_port=8180)])
    with pytest.raises(ConfigError, match="m1: specdec_port=8180: the site mirror"):
        resolve(hosts)


def test_two_mirrors_for_one_site_is_an_error_naming_both() -> None:
    hosts = parse_hosts([spark("m1", specdec_site="a", specdec_site_mirror=True),
                         spark("m2", specdec_site="a", specdec_site_mirror=True)])
    with pytest.raises(ConfigError, match="m2: .*site 'a' already has its mirror on m1"):
        resolve(hosts)


def test_a_sites_hosts_download_and_pull_through_its_mirror() -> None:
    hosts = resolve(parse_hosts([
        spark("m1", specdec_site="a", specdec_site_mirror=True, specdec_image=IMAGE),
        spark("h22", specdec_site="a", specdec_image=IMAGE),
        spark("pin", specdec_site="a", specdec_hub_endpoint="https://cache.example:9000"),
        spark("b1", specdec_site="b"),  # a site without a mirror: the Hub
        spark("lone"),
    ]))
    by = {s.host: s for s in hosts}
    assert by["h22"].hub_endpoint == f"https://10.0.0.2:{HUB_PORT}" and by["h22"].hub_mirrored
    assert by["m1"].hub_endpoint == by["h22"].hub_endpoint  # the mirror host too
    assert by["pin"].hub_endpoint == "https://cache.example:9000" and not by["pin"].hub_mirrored
    assert by["b1"].hub_endpoint is None and by["lone"].registry_mirror == ()
    env = dict(download_env(by["h22"]))
    # over TLS, trusting the site's CA only (every URL of the download is the mirror's)
    assert env == {"HF_ENDPOINT": "https://10.0.0.2:8180", "HF_HUB_DISABLE_XET": "1",
                   "SSL_CERT_FILE": SITE_CA_FILE, "REQUESTS_CA_BUNDLE": SITE_CA_FILE,
                   "HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    assert "SSL_CERT_FILE" not in dict(download_env(by["pin"]))  # not the site's mirror
    assert download_env(by["b1"]) == [] and download_env(by["lone"]) == []
    # the mirror's firewall admits the site's hosts, by address, and no one else
    assert by["m1"].site_clients == ("10.0.0.2/32", "10.0.0.3/32")  # m1, h22 and pin
    plan = make_plan("h22", {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B",
                             "specdec_image": IMAGE}, None)
    assert plan.image == IMAGE
    from specdec.plan.planner import plan_host_settings

    mirrored = plan_host_settings(by["h22"], None)
    assert mirrored.image == f"10.0.0.2:5003/nvidia/vllm:26.10-py3@{DIGEST}"
    assert mirrored.engine_version == plan.engine_version  # the planner sees the same image
    assert site_mirror_hosts(hosts) == {"m1"}
    # every socket of the mirror is planned (and so firewalled): the Hub, the CDN, 5001-5003
    planned = {s.port: s for s in plan_host_settings(by["m1"], None).sockets}
    assert {8180, 8181, 5001, 5002, 5003} <= set(planned)
    assert all(planned[p].reach == ("10.0.0.2/32", "10.0.0.3/32")
               for p in (8180, 8181, 5001, 5002, 5003))
    assert not any(s.port in (8180, 8181) for s in mirrored.sockets)  # not on a site host


def test_a_site_host_by_name_cannot_be_admitted_by_the_mirrors_firewall() -> None:
    with pytest.raises(ConfigError, match="h3: ssh_hostname='h3.example': must be an IP"):
        resolve(parse_hosts([spark("m1", specdec_site="a", specdec_site_mirror=True),
                             ("h3", {"specdec_device": "dgx-spark", "specdec_site": "a",
                                     "ssh_hostname": "h3.example"})]))


@pytest.mark.parametrize("url", ["http://127.0.0.1:5000", "http://localhost:8090",
                                 "http://[::1]:8090", "http://127.9.9.9",
                                 "https://hub.example/a/b-c._~!&()*+,=:@%2F"])
def test_loopback_http_and_rfc3986_paths_are_accepted(url: str) -> None:
    s = parse_host_settings("m1", {"specdec_device": "dgx-spark", "specdec_site": "a",
                                   "specdec_site_mirror": True, "specdec_hub_upstream": url})
    assert s.hub_upstream == url


def test_a_mirrored_image_must_be_pinned_by_digest() -> None:
    s = resolve(parse_hosts([spark("m1", specdec_site="a", specdec_site_mirror=True),
                             spark("h22", specdec_site="a")]))[1]
    from specdec.plan.planner import plan_host_settings

    with pytest.raises(ConfigError, match="needs the image pinned by digest"):
        plan_host_settings(s, None)  # the catalog's default: a tag


def test_docker_hub_references() -> None:
    assert registry_of("dustynv/vllm:0.9.2-r36.4-cu128-24.04") == ("docker.io", "dustynv/vllm")
    assert registry_of("ubuntu:24.04") == ("docker.io", "library/ubuntu")
    assert registry_of("registry-1.docker.io/a/b:1") == ("docker.io", "a/b")
    assert registry_of("localhost:5000/a/b:1") == ("localhost:5000", "a/b")


def test_the_hub_mirror_configuration() -> None:
    m = SiteMirror("a", "m1", "10.0.0.2", resolver="127.0.0.53")
    conf = nginx_conf(m)
    # no credential can reach a log or a cache key: no header and no query in either
    assert "$http_authorization" not in conf and "$request " not in conf
    assert "$args" not in conf.split("log_format", 1)[1].split(";", 1)[0]
    keys = [ln for ln in conf.splitlines() if "proxy_cache_key" in ln]
    assert keys and not any("$args" in k or "$request_uri" in k or "$http_" in k for k in keys)
    assert 'proxy_set_header Authorization "";' in conf  # nothing to the CDN
    assert "proxy_ssl_verify on;" in conf and "ca-certificates.crt" in conf
    assert "auth_request /_specdec_gate;" in conf and "proxy_method HEAD;" in conf
    for h in ("cdn-lfs.hf.co", "cas-bridge.xethub.hf.co"):
        assert f'"{h}" 1;' in conf
    with pytest.raises(ValueError, match="needs a resolver"):
        nginx_conf(SiteMirror("a", "m1", "10.0.0.2"))  # huggingface.co by name
    lab = nginx_conf(SiteMirror("a", "m1", "10.0.0.2", hub_upstream="http://127.0.0.1:8090",
                                cdn_hosts=("127.0.0.1:8091",)))
    assert "resolver" not in lab and "proxy_ssl" not in lab
    # the site's hosts speak TLS to both ports, and the CDN's redirects stay on TLS
    assert conf.count(" ssl;") == 2 and "ssl_certificate_key" in conf
    assert '"https://$host:8181/$1/$2"' in conf and "http://$host" not in conf


def test_the_registry_caches() -> None:
    files = render_mirror(SiteMirror("a", "m1", "10.0.0.2", resolver="1.1.1.1"))
    assert [c.registry for c in files.registries] == ["docker.io", "ghcr.io", "nvcr.io"]
    doc = yaml.safe_load(registry_yaml("nvcr.io", "https://nvcr.io", 5003, creds="/run/c"))
    assert doc["proxy"] == {"remoteurl": "https://nvcr.io"} and doc["http"]["addr"] == ":5003"
    assert doc["http"]["tls"] == {"certificate": "/run/c/mirror.crt", "key": "/run/c/mirror.key"}
    unit = registry_unit("nvcr.io", "/etc/specdec/mirror/registry-nvcr-io.yml")
    assert "Restart=always" in unit and "StartLimitIntervalSec=0" in unit
    assert "LoadCredential=mirror.key:/etc/specdec/tls/mirror/mirror.key" in unit
    assert mirror_of(parse_hosts([spark("m1", specdec_site="a", specdec_site_mirror=True)])[0]
                     ).hub_upstream == DEFAULT_HUB
