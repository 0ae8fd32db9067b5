"""The lab as one site: its hosts download weights and pull images through a site mirror that
one of them runs (`specdec.plan.sites`, ``roles/site_mirror.py``), the Hub being the lab's own
(`specdec_lab.hubsvc`).

``SPECDEC_LAB_MIRROR=HOST`` names the mirror host (default: the fleet's first host);
``SPECDEC_LAB_MIRROR=none`` leaves the lab without a site: every host then downloads straight
from the Hub at its gateway. The mirror host's upstreams are the lab's: the Hub and its CDN at
its gateway, and the lab registry in its own namespace (standing for nvcr.io and the others).
`routes` lets the site's hosts reach the mirror host (and only it) through the control node.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.config.inventory import load_inventory
from specdec.host.layout import HF_TOKEN_FILE
from specdec.host.prefetch import CONTAINER_HF_TOKEN
from specdec.plan.hostdata import parse_hosts
from specdec.plan.sites import CA_VARIABLES, site_mirrors
from specdec_lab.errors import LabError
from specdec_lab.hubsvc import CDN_PORT, endpoint
from specdec_lab.images import REGISTRY
from specdec_lab.spec import LabHost
from specdec_lab.system import run

__all__ = ["ENV", "SITE", "check_mirrors", "host_download", "mirror_host", "routes",
           "site_keys"]

ENV = "SPECDEC_LAB_MIRROR"
SITE = "lab"
_REGISTRY_PORT = REGISTRY.rsplit(":", 1)[1]


def mirror_host(env: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The lab's mirror host from ``SPECDEC_LAB_MIRROR`` (default: the first host)."""
    text = env.get(ENV, "").strip()
    if text in ("none", "0"):
        return None
    if not text:
        return names[0] if names else None
    if text not in names:
        raise ValueError(f"{ENV}={text!r}: not a host of this lab fleet (hosts: "
                         f"{', '.join(names)}; or none)")
    return text


def site_keys(name: str, gateway: str, mirror: str | None, hub_ca: str) -> dict[str, Any]:
    """A lab host's site keys: at the lab site (the mirror host: what its mirror fronts, the
    Hub's CA ``hub_ca``), or without a site, straight from the Hub (and its CA)."""
    if mirror is None:
        return {"specdec_hub_endpoint": endpoint(gateway), "specdec_hub_ca_file": hub_ca}
    keys: dict[str, Any] = {"specdec_site": SITE}
    if name == mirror:
        keys.update({
            "specdec_site_mirror": True,
            "specdec_hub_upstream": endpoint(gateway),
            "specdec_hub_cdn_hosts": [f"{gateway}:{CDN_PORT}"],
            "specdec_hub_ca_file": hub_ca,
            # the lab's registry, in the mirror's own namespace: its loopback
            "specdec_registry_upstreams": {REGISTRY: f"http://127.0.0.1:{_REGISTRY_PORT}"},
        })
    return keys


def check_mirrors(hosts: list[LabHost], inventory: str, limit: str | None) -> None:
    """Every host to boot has its site's mirror booted too (its downloads go there)."""
    if not limit:
        return
    names = {h.name for h in hosts}
    mirrors = site_mirrors(parse_hosts(load_inventory(inventory)))
    for s in parse_hosts(load_inventory(inventory, limit)):
        m = mirrors.get(s.site) if s.site else None
        if m is not None and m.host not in names:
            raise LabError(f"{s.host}: its site's mirror {m.host} is not in --limit {limit}: "
                           f"add it, or set {ENV}=none (every host straight from the lab's "
                           f"Hub) or {ENV}=<a host of the limit>")


def routes(hosts: list[LabHost], inventory: str, limit: str | None = None) -> None:
    """Routes between each site's hosts and its mirror host, through the control node."""
    by_name = {h.name: h for h in hosts}
    settings = parse_hosts(load_inventory(inventory, limit))
    for site, m in site_mirrors(settings).items():
        mirror = by_name.get(m.host)
        if mirror is None:
            continue
        peers = [by_name[s.host] for s in settings
                 if s.site == site and s.host != m.host and s.host in by_name]
        for h in (mirror, *peers):
            run(["sysctl", "-q", "-w", f"net.ipv4.conf.{h.veth}.forwarding=1"],
                f"{h.name}: forwarding on {h.veth}")
        for p in peers:
            run(["ip", "-n", p.netns, "route", "replace", f"{mirror.address}/32", "via",
                 p.gateway], f"{p.name}: route to its site mirror {mirror.name}")
            run(["ip", "-n", mirror.netns, "route", "replace", f"{p.address}/32", "via",
                 mirror.gateway], f"{mirror.name}: route to site host {p.name}")


def host_download(plan: Mapping[str, Any], repo: str, endpoint: str, scratch: str,
                  token: bool, ca: str) -> str:
    """A shell command for a lab host: ``repo`` into the scratch cache ``scratch`` with the
    host's own Hub CLI (its image's, or its native install's), from ``endpoint`` (HTTPS,
    trusting the CA file ``ca`` on the host only, as specdec runs it); with the host's token
    file as ``HF_TOKEN_PATH`` when ``token`` (never the token itself), else none."""
    q = shlex.quote
    env = {"HF_HOME": scratch, "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "NO_COLOR": "1",
           **{v: ca for v in CA_VARIABLES}}
    pick = (f'if command -v hf >/dev/null; then c=hf; else c=huggingface-cli; fi; '
            f'"$c" download {q(repo)}')
    if plan.get("runtime") == "docker":
        token_args = (f"-v {HF_TOKEN_FILE}:{CONTAINER_HF_TOKEN}:ro "
                      f"-e HF_TOKEN_PATH={CONTAINER_HF_TOKEN} ") if token else \
            "-e HF_TOKEN_PATH=/dev/null "
        envs = " ".join(f"-e {k}={q(v)}" for k, v in env.items())
        run = (f"docker run --rm --network host -v {q(scratch)}:{q(scratch)} "
               f"-v {q(ca)}:{q(ca)}:ro {envs} "
               f"{token_args}--entrypoint sh {q(str(plan['image']))} -c {q(pick)}")
    else:
        envs = " ".join(f"{k}={q(v)}" for k, v in env.items())
        token_env = f" HF_TOKEN_PATH={HF_TOKEN_FILE}" if token else " HF_TOKEN_PATH=/dev/null"
        run = f"env {envs}{token_env} sh -c {q(pick)}"
    return f"mkdir -p {q(scratch)} && {run}"
