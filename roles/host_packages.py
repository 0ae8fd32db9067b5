"""Distribution packages a release's units need on the host (`Engine.host_packages`): present,
with the distribution's own unit of each kept off (the release carries specdec's)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy, operation

from specdec.engines.base import HostPackage
from specdec.roles.common import HostPlan
from specdec.roles.facts import PackageState

__all__ = ["host_packages", "package_present"]


@deploy("Host packages")
def host_packages(hp: HostPlan) -> None:
    """Each package planned for the host (`specdec.plan.packages`: nftables, nginx for the API
    proxy, an engine's own, e.g. a Dynamo frontend member's etcd).

    + hp: the host's plan and renderings
    """
    for need in hp.packages:
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
