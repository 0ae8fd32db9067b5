"""Which distribution packages a host needs for its plan (planned in prepare; the
`host_packages` role only converges to the list)."""

from __future__ import annotations

from specdec.engines.base import HostPackage
from specdec.engines.registry import engine_of
from specdec.plan.types import Plan

__all__ = ["NFTABLES", "NGINX", "host_packages"]

# Every host: nftables for the release's firewall (`specdec.render.firewall`); a host serving the
# API:
# nginx for its proxy (`specdec.render.proxy`). An nginx specdec installs has the distribution's
# nginx.service (port 80) masked before the package can start it; one already there is the
# host's own and left alone. A site's mirror host runs the distribution's nginx.service for its
# caches (`specdec.roles.site_mirror`, which installs nginx there): never masked on it.
NFTABLES = HostPackage("nftables", "nft")
NGINX = HostPackage("nginx", "nginx", "nginx.service", off_only_if_installed=True)


def host_packages(plan: Plan, site_mirror: bool = False) -> tuple[HostPackage, ...]:
    """The network's packages, then the engine's (e.g. a Dynamo frontend member's etcd)."""
    engine = engine_of(plan)
    nginx = engine.serves_api(plan) and not site_mirror
    return (NFTABLES, *([NGINX] if nginx else []), *engine.host_packages(plan))
