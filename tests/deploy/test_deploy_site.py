"""The site mirror through deploys/specdec.py on @fake hosts: the mirror host gets nginx, its
rendered configuration (tested with `nginx -t` before the reload) and a registry cache; a site
host downloads with HF_ENDPOINT at the mirror (HTTPS, the site's CA) and pulls its image through
it by digest; a converged mirror host gets nothing on the second run."""

from __future__ import annotations

import json
import shlex

from specdec.config import apikey
from specdec.host import layout
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.sites import mirror_of, resolve
from specdec.render.mirror import CACHE_DIR, MIRROR_CERT, MIRROR_KEY, NGINX_CONF, render_mirror
from specdec.roles.common import plan_host, read_host_secrets, with_site_secrets
from specdec.roles.facts import DAEMON_JSON
from specdec.roles.site_mirror import NGINX_USER
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import AGX_UNGATED, HOST, World, converged, run_deploy

DIGEST = "sha256:" + "ef" * 32
IMAGE = f"ghcr.io/nvidia-ai-iot/vllm:0.19.0-r36.4.tegra-aarch64-cu126-22.04@{DIGEST}"
MIRROR = {**AGX_UNGATED, "specdec_image": IMAGE, "specdec_site": "s1",
          "specdec_site_mirror": True, "ssh_hostname": "10.7.0.5",
          "specdec_mirror_resolver": "10.7.0.1"}
SITE_HOST = {**AGX_UNGATED, "specdec_image": IMAGE, "specdec_site": "s1",
             "ssh_hostname": "10.7.0.6"}
VIA = f"10.7.0.5:5002/nvidia-ai-iot/vllm:0.19.0-r36.4.tegra-aarch64-cu126-22.04@{DIGEST}"


def test_a_site_host_downloads_and_pulls_through_the_mirror(agx_world: World,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_deploy(monkeypatch, agx_world, SITE_HOST, others=[("@fake/mirror", MIRROR)])
    assert not r.failed, r.output[-800:]
    assert f"docker pull {VIA}" in r.commands
    fetch = next(c for c in r.commands if " download " in c)
    assert "HF_ENDPOINT=https://10.7.0.5:8180" in fetch and "HF_HUB_DISABLE_XET=1" in fetch
    assert f"SSL_CERT_FILE={layout.SITE_CA_FILE}" in fetch  # the site's CA, and it only
    # an ungated model: no token at all (issue 29: not forwarded where it is not needed)
    assert TOKEN not in fetch and "HF_TOKEN_PATH=/dev/null" in fetch
    uploads = dict(r.uploads)
    ca = uploads[layout.SITE_CA_FILE]
    assert b"BEGIN CERTIFICATE" in ca and b"PRIVATE" not in ca
    assert uploads[f"{layout.DOCKER_CERTS_DIR}/10.7.0.5:5002/ca.crt"] == ca
    daemon = json.loads(uploads[DAEMON_JSON])
    assert "insecure-registries" not in daemon  # HTTPS: never an insecure registry
    assert not any("nginx" in c for c in r.commands)  # not the mirror: no mirror


def test_the_mirror_host_and_its_second_run(agx_world: World, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    agx_world.packages.pop("nginx")  # a host without nginx: the mirror role installs it
    r = run_deploy(monkeypatch, agx_world, MIRROR, name=HOST)
    assert not r.failed, r.output[-800:]
    s = parse_host_settings(HOST, MIRROR)
    files = render_mirror(mirror_of(s))
    uploads = dict(r.uploads)
    for path, text in files.files:
        assert uploads[path].decode() == text
    assert 'resolver "10.7.0.1"' in uploads[NGINX_CONF].decode()
    assert b"PRIVATE KEY" in uploads["/etc/specdec/tls/mirror/.mirror.key.new"]
    cmds = "\n".join(r.commands)
    assert "apt-get install -y -q nginx" in cmds
    assert "apt-get install -y -q docker-registry" in cmds
    assert "nginx -t -q && systemctl reload-or-restart nginx.service" in r.commands
    assert TOKEN.encode() not in b"".join(d for p, d in r.uploads
                                          if p != "/etc/specdec/.hf_token.new")

    hp = plan_host(resolve([s])[0], agx_world.identity)
    world = converged(agx_world, hp, TOKEN)
    world.packages.update({"nginx": "/usr/sbin/nginx",
                           "docker-registry": "/usr/bin/docker-registry"})
    for path, text in files.files:
        world.put(path, text)
        world.dirs.setdefault(path.rsplit("/", 1)[0], {"user": "root", "group": "root",
                                                       "mode": 755})
    for d in (f"{CACHE_DIR}/hub", f"{CACHE_DIR}/lfs"):
        world.dirs[d] = {"user": NGINX_USER, "group": NGINX_USER, "mode": 750}
    for c in files.registries:
        world.dirs[c.storage] = {"user": "docker-registry", "group": "docker-registry",
                                 "mode": 750}
        world.running[c.unit] = world.enabled[c.unit] = True
    world.running["nginx.service"] = world.enabled["nginx.service"] = True
    inv_dir = apikey.inventory_dir(None, [HOST])
    secrets = with_site_secrets(read_host_secrets(hp.settings, inv_dir), hp.settings,
                                (mirror_of(hp.settings), hp.settings), inv_dir)
    world.dirs[layout.PUBLIC_CA_DIR] = {"user": "root", "group": "root", "mode": 755}
    world.put(layout.SITE_CA_FILE, secrets.site_ca or "")
    for _, where in hp.settings.registry_mirror:  # Docker trusts the site's CA there
        world.dirs[f"{layout.DOCKER_CERTS_DIR}/{where}"] = {"user": "root", "group": "root",
                                                             "mode": 755}
        world.put(f"{layout.DOCKER_CERTS_DIR}/{where}/ca.crt", secrets.site_ca or "")
    world.dirs[layout.MIRROR_TLS_DIR] = {"user": "root", "group": "root", "mode": 700}
    for path, value in zip((MIRROR_CERT, MIRROR_KEY), secrets.mirror_tls or (), strict=True):
        text = value.unmask()
        world.put(path, text if text.endswith("\n") else text + "\n", "0600")
    world.images[hp.plan.image] = hp.plan.image
    world.put("/etc/specdec/image.digest", hp.plan.image + "\n")
    again = run_deploy(monkeypatch, world, MIRROR, name=HOST)
    assert again.commands == [], [shlex.split(c)[:3] for c in again.commands]
    assert again.uploads == []
