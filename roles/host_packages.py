"""Distribution packages a release's units need on the host (`Engine.host_packages`): present,
with the distribution's own unit of each kept off (the release carries specdec's)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy, operation

from roles.common import HostPlan
from roles.facts import PackageState
from specdec.engines.base import HostPackage
from specdec.engines.registry import engine_of
from specdec.plan_types import Plan

__all__ = ["host_packages", "network_packages", "package_present"]

# Every host: nftables for the release's firewall (`specdec.firewall`); a host serving the API:
# nginx for its proxy (`specdec.proxy`). An nginx specdec installs has the distribution's
# nginx.service (port 80) masked before the package can start it; one already there is the
# host's own and left alone. A site's mirror host runs the distribution's nginx.service for its
# caches (`roles.site_mirror`, which installs nginx there): never masked on it.
NFTABLES = HostPackage("nftables", "nft")
NGINX = HostPackage("nginx", "nginx", "nginx.service", off_only_if_installed=True)


def network_packages(plan: Plan, site_mirror: bool = False) -> list[HostPackage]:
    nginx = engine_of(plan).serves_api(plan) and not site_mirror
    return [NFTABLES, *([NGINX] if nginx else [])]


@deploy("Host packages")
def host_packages(hp: HostPlan) -> None:
    """Each package the plan's engine needs (e.g. a Dynamo frontend member's etcd).

    + hp: the host's plan and renderings
    """
    needs = network_packages(hp.plan, hp.settings.site_mirror)
    for need in [*needs, *engine_of(hp.plan).host_packages(hp.plan)]:
        off = f" and the distribution's {need.unit_off} is off" if need.unit_off and not \
            need.off_only_if_installed else ""
        package_present(name=f"Ensure {need.package} is installed{off}", need=need)


@operation()
def package_present(need: HostPackage):
    """``need.binary`` on PATH (else install ``need.package``); ``need.unit_off`` neither enabled
    nor running.

    + need: the package, its binary and the distribution's unit to keep off
    """
    st = host.get_fact(PackageState, binary=need.binary, unit=need.unit_off or "")
    pkg = shlex.quote(need.package)
    off = (f"systemctl disable --now {shlex.quote(need.unit_off)}" if need.unit_off else None)
    if not st.get("binary"):
        if off and need.off_only_if_installed:
            yield f"systemctl mask --now {shlex.quote(need.unit_off or '')} >/dev/null 2>&1 || true"
            off = None
        yield (f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {pkg} || "
               f"{{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
               f"{pkg}; }}")
        if off:
            yield f"{off} >/dev/null 2>&1 || true"
        return
    if off and not need.off_only_if_installed and (
            st.get("enabled") == "enabled" or st.get("active") == "active"):
        yield off
        return
    host.noop(f"{need.binary} at {st['binary']}" + (
        f"; the distribution's {need.unit_off} is off" if need.unit_off
        and not need.off_only_if_installed else ""))
