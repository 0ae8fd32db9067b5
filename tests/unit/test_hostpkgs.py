"""specdec.plan.packages: the distribution packages planned for a host."""

from __future__ import annotations

from specdec.plan.packages import NFTABLES, NGINX, host_packages
from tests.unit.test_dynamo import plans
from tests.unit.test_render import plan_for


def test_a_host_serving_the_api_gets_the_firewall_and_the_proxy() -> None:
    assert host_packages(plan_for("dgx-spark-vllm-docker")) == (NFTABLES, NGINX)


def test_a_site_mirror_host_keeps_its_own_nginx() -> None:
    """its mirror runs the distribution's nginx.service: never masked there"""
    assert host_packages(plan_for("dgx-spark-vllm-docker"), site_mirror=True) == (NFTABLES,)


def test_a_dynamo_frontend_member_also_gets_etcd_with_its_unit_off() -> None:
    got = {p.host: host_packages(p) for p in plans()}
    etcd = [h for h, pk in got.items() if any(x.package == "etcd-server" for x in pk)]
    assert len(etcd) == 1, got  # the frontend member only
    pkg = next(x for x in got[etcd[0]] if x.package == "etcd-server")
    assert pkg.unit_off == "etcd.service" and not pkg.off_only_if_installed
    assert all(pk[0] == NFTABLES for pk in got.values())
