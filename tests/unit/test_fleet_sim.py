"""benchmarks/fleet_sim.py: the real scheduler in virtual time behaves as a fleet would."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmod import load

ROOT = Path(__file__).resolve().parents[2]
sim = load("fleet_sim")

# a measured-inputs file as benchmarks/oracle_gap.py and fleet_scale.py write it (figures of
# the test's own: the scheduler model is tested, not the lab's costs)
INPUTS = {"tune": {"commit": "test", "kinds": {
    k.name: {"restarts_tune": 6, "tune_bench_s": 100.0 + 50 * i, "gate_bench_s": 15.0}
    for i, k in enumerate(sim.DEVICES)}}, "control_node": {"commit": "test",
                                                           "cpu_s_per_host": 2.0}}


def params(**kw: float) -> object:
    path = Path("fleet_inputs.json")
    return sim.Params(sim.kinds(INPUTS, path), sim.cpu_s_per_host(INPUTS, path), **kw)


def test_a_site_mirror_fetches_each_thing_once_per_site():
    p = params(drop=0.0)
    one = sim.simulate(200, 1, True, 1, p, "1,25%,100%")
    models = {k.model for k in p.kinds}
    weights = sum(sim.load_catalog().models[m].weight_bytes for m in models) / sim.GB
    heads = sum({k.model: k.head_gb for k in p.kinds}.values())
    images = 8.0 + 12.0  # one L4T and one SBSA image
    assert abs(one["wan_gb"] - (weights + heads + images)) < 0.01
    two = sim.simulate(200, 2, True, 1, p, "1,25%,100%")
    assert abs(two["wan_gb"] - 2 * one["wan_gb"]) < 0.01
    without = sim.simulate(200, 1, False, 1, p, "1,25%,100%")
    assert without["wan_gb"] > 30 * one["wan_gb"] and without["wall_s"] > one["wall_s"]


def test_more_control_nodes_and_dropped_devices():
    p = params(drop=0.05)
    single = sim.simulate(2000, 20, True, 1, p, "1,5%,25%,100%")
    sharded = sim.simulate(2000, 20, True, 4, p, "1,5%,25%,100%")
    assert sharded["wall_s"] < single["wall_s"] / 2
    assert single["dropped"] == 100 and single["resumed_s"] >= max(single["wall_s"],
                                                                  p.back_after_s)
    assert single["parallel"] == min(20 * p.control_cores, 2000)


def test_measured_inputs_are_read_and_a_missing_one_names_its_writer(tmp_path, capsys):
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(INPUTS))
    assert sim.main(["--inputs", str(path), "--devices", "10", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)[0]["devices"] == 10
    ks = {k.name: k for k in sim.kinds(INPUTS, path)}
    assert ks["orin-nx-16gb"].tune_bench_s == 200.0 and ks["dgx-spark"].restarts_tune == 6
    # the tuning costs drive the wall time: doubled tune seconds, a longer rollout
    slow = {**INPUTS, "tune": {"kinds": {n: {**v, "tune_bench_s": 2 * v["tune_bench_s"]}
                                          for n, v in INPUTS["tune"]["kinds"].items()}}}
    path.write_text(json.dumps(slow))
    assert sim.main(["--inputs", str(path), "--devices", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["wall_s"] > json.loads(out)[0]["wall_s"]
    del slow["control_node"]
    path.write_text(json.dumps(slow))
    assert sim.main(["--inputs", str(path), "--devices", "10"]) == 2
    err = capsys.readouterr().err
    assert "control_node.cpu_s_per_host: missing" in err and "fleet_scale.py --write-inputs" in err
    assert sim.main(["--inputs", str(path), "--devices", "10", "--cpu-s-per-host", "2",
                     "--json"]) == 0
