"""The site mirror through deploys/specdec.py on @fake hosts: the mirror host gets nginx, its
rendered configuration (tested with `nginx -t` before the reload) and a registry cache; a site
host downloads with HF_ENDPOINT at the mirror and pulls its image through it by digest; a
converged mirror host gets nothing on the second run."""

from __future__ import annotations

import json
import shlex

from specdec.plan.hostdata import parse_host_settings
from specdec.plan.sites import mirror_of, resolve
from specdec.render.mirror import CACHE_DIR, NGINX_CONF, render_mirror
from specdec.roles.common import plan_host
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
    assert "HF_ENDPOINT=http://10.7.0.5:8180" in fetch and "HF_HUB_DISABLE_XET=1" in fetch
    assert TOKEN not in fetch and "HF_TOKEN_PATH=" in fetch
    daemon = json.loads(dict(r.uploads)[DAEMON_JSON])
    assert "10.7.0.5:5002" in daemon["insecure-registries"]
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
    assert "resolver 10.7.0.1" in uploads[NGINX_CONF].decode()
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
    daemon = json.loads(world.files[DAEMON_JSON]["content"])
    daemon["insecure-registries"] = [a for _, a in hp.settings.registry_mirror]
    world.put(DAEMON_JSON, json.dumps(daemon))
    world.images[hp.plan.image] = hp.plan.image
    world.put("/etc/specdec/image.digest", hp.plan.image + "\n")
    again = run_deploy(monkeypatch, world, MIRROR, name=HOST)
    assert again.commands == [], [shlex.split(c)[:3] for c in again.commands]
    assert again.uploads == []
