"""specdec.verify.verifier on a healthy candidate, against a fake host: keep, disable or hold; extra
rounds; the baseline cache; roofline and power mode in the report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specdec.host import release
from specdec.verify.spec import Roofline
from specdec.verify.verifier import FAILURE_OUTCOMES
from tests.unit.verify_fakes import (
    FAST,
    OLD,
    PLAIN,
    PLAN,
    SLOW8,
    B,
    Behaviour,
    C,
    FakeHost,
    result,
    run,
    spec,
)


def test_paying_config_is_kept(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "kept", rep["message"]
    assert host.current == C and host.last_good == C
    assert host.benched == [C, B]  # candidate first, then one switch to the baseline
    assert rep["acceptance"]["length"] == 2.4
    assert rep["acceptance"]["per_position"] == [0.7, 0.45, 0.25]
    # limit: 204.8 GB/s / 8 GB = 25.6 tok/s; baseline decode 1000/50 ms = 20 tok/s; the
    # speculative decode 1000/25 ms against 2.4 (acceptance length) x the limit.
    roof = rep["roofline"]
    assert roof["limit_tok_s"] == pytest.approx(25.6)
    assert roof["baseline_pct"] == pytest.approx(100 * 20 / 25.6, abs=0.05)
    assert roof["speculative_pct"] == pytest.approx(100 * (1000 / 25) / (2.4 * 25.6), abs=0.05)
    assert roof["speculative_pct"] <= 100 and "acceptance length" in roof["how"]
    assert host.offsets == [0, 0]
    names = {m["name"] for m in rep["measurements"]}
    assert {"memlock", "hf_token_in_argv", "throughput_gain_c1", "no_regression_c8",
            "acceptance_length", "roofline.baseline_pct", "roofline.speculative_pct"} <= names
    assert all(m["time"] for m in rep["measurements"])
    # the baseline's figures are cached for the next run
    assert json.loads((tmp_path / "cache" / f"{B}.json").read_text()) == PLAIN


def test_c8_regression_is_disabled_and_recorded(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=SLOW8), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "disabled", rep["message"]
    assert "c=8" in rep["message"]
    assert host.current == B and host.last_good == B
    decision = json.loads(host.files[f"/var/lib/specdec/releases/{C}/decision.json"])
    assert decision["outcome"] == "disabled" and decision["active"] == B
    # serve honours it on the next run
    st = release.ReleaseState(B, B, (B, C), {C: decision})
    assert release.desired_release(C, st) == B


def _estimated(res: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(res))
    out["concurrency"]["1"]["tokens_estimated"] = 3
    return out


def test_estimated_tokens_hold_the_host_on_last_good(tmp_path):
    host = FakeHost(C, OLD, (C, OLD, B), {C: Behaviour(bench=_estimated(FAST)),
                                          B: Behaviour(bench=PLAIN), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "held" and rep["phase"] == "gate"
    assert host.current == OLD and host.last_good == OLD and host.benched == [C, B]
    assert "tokens estimated" in rep["message"] and rep["gate"]["held"]
    assert "held" in FAILURE_OUTCOMES


def test_estimated_tokens_without_last_good_fall_back_to_the_baseline(tmp_path):
    host = FakeHost(C, None, (C,), {C: Behaviour(bench=_estimated(FAST)),
                                    B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "held" and host.current == B and host.last_good == B
    assert "no last-good release" in rep["message"]


def test_inconclusive_measures_more_rounds_then_disables(tmp_path, monkeypatch):
    from specdec.gate import decide as gate

    seen: list[int] = []

    def unclear(bases, cands, policy=None):
        seen.append(len(bases))
        return gate.Decision("inconclusive", [], "not decisive: x", {}, rounds=len(bases))

    monkeypatch.setattr(gate, "decide", unclear)
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert PLAN.gate.max_rounds == 6
    assert seen == [1, 2, 3, 4, 5, 6]
    assert host.benched == [C, B, B, C] * 3  # one restart per extra round (ABAB)
    # each round measures the next prompts (the baseline 3 at c=1 a round, the candidate 4)
    assert host.offsets == [0, 0, 3, 4, 8, 6, 9, 12, 16, 12, 15, 20]
    assert rep["outcome"] == "disabled" and host.current == B
    assert "inconclusive" in rep["message"]
    assert rep["candidate"]["rounds"] == 6 and rep["baseline"]["rounds"] == 6
    decisions = [m["value"] for m in rep["measurements"] if m["name"] == "decision"]
    assert decisions == ["inconclusive"] * 6


def test_extra_round_that_decides_keep(tmp_path, monkeypatch):
    from specdec.gate import decide as gate

    real = gate.decide

    def first_unclear(bases, cands, policy=None):
        if len(bases) == 1:
            return gate.Decision("inconclusive", [], "not decisive: x", {}, rounds=1)
        return real(bases, cands, policy)

    monkeypatch.setattr(gate, "decide", first_unclear)
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert host.benched == [C, B, B, C]
    assert rep["outcome"] == "kept" and host.current == C and host.last_good == C


def test_no_more_rounds_when_keep_is_impossible(tmp_path):
    low = result(20.2, 49.5, 101.0)  # +1%: shown below the +30% keep threshold
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=low), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert host.benched == [C, B]
    assert rep["outcome"] == "disabled"


def test_recorded_disable_reverified_measures_baseline_first(tmp_path):
    host = FakeHost(B, B, (B, C), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, desired=B, reverify=True, restarted=False))
    assert host.benched == [B, C]
    assert rep["outcome"] == "kept" and host.current == C and host.last_good == C
    assert any(f"rm -f /var/lib/specdec/releases/{C}/decision.json" in c for c in host.commands)


def test_reverify_ignores_the_cache(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps({**PLAIN,
                                                              "runner": {"where": "host"}}))
    host = FakeHost(C, C, (C, B), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, reverify=True, restarted=False))
    assert rep["outcome"] == "kept"
    assert host.benched == [C, B]


def test_cached_baseline_from_another_runner_is_measured_again(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(PLAIN))  # no runner: control
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=SLOW8), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))  # bench_mode host (the default)
    assert host.benched[-1] == B and rep["baseline"]["cached"] is False
    assert any("measured from control" in e["message"] for e in rep["events"])


def test_cached_baseline_is_reused_and_baseline_uploaded_on_disable(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps({**PLAIN,
                                                              "runner": {"where": "host"}}))
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=SLOW8), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "disabled"
    assert host.benched == [C]  # baseline not re-measured
    assert rep["baseline"]["cached"] is True
    # the baseline release was not on the host: uploaded before switching to it
    assert f"/var/lib/specdec/releases/{B}/specdec-engine.service" in host.files
    assert host.current == B


def test_cached_baseline_with_other_bench_settings_is_not_reused(tmp_path):
    (tmp_path / "cache").mkdir()
    other = {**PLAIN, "config": {"requests": 999, "max_tokens": 1}}
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(other))
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert host.benched == [C, B]
    assert rep["baseline"]["cached"] is False


def test_a_cached_baseline_of_another_time_basis_is_measured_again(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    (tmp_path / "cache").mkdir()
    emulated = {**PLAIN, "config": {"requests": [3, 8], "max_tokens": 48,
                                    "prompt_offset": [0, 0]},
                "device_time": {"emulated": True, "time_scale": 0.1}, "runner": {"where": "host"}}
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(emulated))
    rep = run(host, spec(tmp_path))  # a real device's plan: no emulator time scale
    assert host.benched == [C, B]
    assert rep["baseline"]["cached"] is False
    assert any("another time basis" in e["message"] for e in rep["events"])


def test_roofline_accounts_for_the_emulator_time_scale(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, roofline=Roofline(204.8, 8 * 10**9, time_scale=0.1)))
    assert rep["roofline"]["baseline_pct"] == pytest.approx(100 * 20 * 0.1 / 25.6, abs=0.05)
    # results already in device time (labelled by the bench) are not scaled again
    label = {"device_time": {"emulated": True, "time_scale": 0.1}}
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench={**FAST, **label}),
                                       B: Behaviour(bench={**PLAIN, **label})})
    rep = run(host, spec(tmp_path / "2", roofline=Roofline(204.8, 8 * 10**9, time_scale=0.1)))
    assert rep["roofline"]["baseline_pct"] == pytest.approx(100 * 20 / 25.6, abs=0.05)
    assert rep["baseline"]["device_time"]["time_scale"] == 0.1


def test_power_mode_and_clocks_are_in_the_report(tmp_path):
    power = {"power_mode": "MAXN", "power_mode_id": 0, "clocks": {"gpu_max_mhz": 1300.5},
             "bandwidth_gbs": 204.8, "bandwidth_source": "catalog power_modes.MAXN"}
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    roof = Roofline(204.8, 8 * 10**9, bandwidth_source=power["bandwidth_source"], power=power)
    rep = run(host, spec(tmp_path, roofline=roof))
    assert rep["power"] == power
    assert rep["roofline"]["power_mode"] == "MAXN"
    assert rep["roofline"]["bandwidth_source"] == "catalog power_modes.MAXN"
