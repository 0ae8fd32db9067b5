"""`specdec.plan.effects`: the first deploy's effects and duration, from the plan alone."""

from __future__ import annotations

from typing import Any

import pytest

from specdec.plan.effects import GIB, LINKS, LOAD_BPS, effects, first_deploy, restarts
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.planner import make_plan

L8 = "meta-llama/Llama-3.1-8B-Instruct"


def both(host: str, **kw: Any) -> tuple[Any, Any]:
    d = {f"specdec_{k}": v for k, v in kw.items()}
    return make_plan(host, d), parse_host_settings(host, d)


def test_a_jetson_can_reboot_a_spark_has_no_power_mode() -> None:
    p, s = both("agx", device="agx-orin-64gb", model=L8)
    assert any("REBOOTS" in line for line in effects(p, s))
    p, s = both("agx", device="agx-orin-64gb", model=L8, jetson_tuning=False)
    assert not any(line.startswith("power:") for line in effects(p, s))
    p, s = both("spark", device="dgx-spark", model=L8)
    assert not any(line.startswith("power:") for line in effects(p, s))


def test_k_auto_costs_restarts_a_pinned_k_does_not() -> None:
    auto, s = both("agx", device="agx-orin-64gb", model=L8)
    assert auto.k_auto and len(auto.tune_methods) == 2  # eagle3 against n-gram
    assert restarts(auto) == (3, 10)
    assert any(line.startswith("tune:") and "3-10 engine starts" in line
               for line in effects(auto, s))
    pinned, s = both("agx", device="agx-orin-64gb", model=L8, num_speculative_tokens=3)
    assert restarts(pinned) == (2, 2)
    assert not any(line.startswith("tune:") for line in effects(pinned, s))
    assert first_deploy(pinned).high_s < first_deploy(auto).high_s


def test_the_estimate_is_the_plans_weights_over_the_links() -> None:
    p, _ = both("agx", device="agx-orin-64gb", model=L8, num_speculative_tokens=3)
    est = first_deploy(p)
    weights = (p.fit.target_gib + p.fit.draft_gib) * GIB
    assert est.download_gib == pytest.approx(weights / GIB)
    # the slow end downloads at 100 Mbit/s and reads the weights back from eMMC at each start
    assert est.high_s > weights / LINKS[0][1] + 2 * weights / LOAD_BPS[0]
    assert est.low_s < est.high_s
    assert "about " in est.text() and " min: " in est.text()


def test_packages_and_the_api_key() -> None:
    p, s = both("agx", device="agx-orin-64gb", model=L8)
    lines = effects(p, s)
    assert any("nginx.service masked" in line for line in lines)
    assert any(line.startswith("api key: made on this machine") for line in lines)
    p, s = both("agx", device="agx-orin-64gb", model=L8, api_key_file="/keys/k")
    assert not any(line.startswith("api key:") for line in effects(p, s))
