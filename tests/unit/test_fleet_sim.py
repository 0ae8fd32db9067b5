"""benchmarks/fleet_sim.py: the real scheduler in virtual time behaves as a fleet would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fleet_sim", ROOT / "benchmarks" / "fleet_sim.py")
assert _spec is not None and _spec.loader is not None
sim = importlib.util.module_from_spec(_spec)
sys.modules["fleet_sim"] = sim  # its dataclasses look their module up
_spec.loader.exec_module(sim)


def test_a_site_mirror_fetches_each_thing_once_per_site():
    p = sim.Params(drop=0.0)
    one = sim.simulate(200, 1, True, 1, p, "1,25%,100%")
    models = {k.model for k in sim.KINDS}
    weights = sum(sim.load_catalog().models[m].weight_bytes for m in models) / sim.GB
    heads = sum({k.model: k.head_gb for k in sim.KINDS}.values())
    images = 8.0 + 12.0  # one L4T and one SBSA image
    assert abs(one["wan_gb"] - (weights + heads + images)) < 0.01
    two = sim.simulate(200, 2, True, 1, p, "1,25%,100%")
    assert abs(two["wan_gb"] - 2 * one["wan_gb"]) < 0.01
    without = sim.simulate(200, 1, False, 1, p, "1,25%,100%")
    assert without["wan_gb"] > 30 * one["wan_gb"] and without["wall_s"] > one["wall_s"]


def test_more_control_nodes_and_dropped_devices():
    p = sim.Params(drop=0.05)
    single = sim.simulate(2000, 20, True, 1, p, "1,5%,25%,100%")
    sharded = sim.simulate(2000, 20, True, 4, p, "1,5%,25%,100%")
    assert sharded["wall_s"] < single["wall_s"] / 2
    assert single["dropped"] == 100 and single["resumed_s"] >= max(single["wall_s"],
                                                                  p.back_after_s)
    assert single["parallel"] == min(20 * p.control_cores, 2000)
