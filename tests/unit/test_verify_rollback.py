"""specdec.verify.verifier when the candidate fails, against a fake host: crash, OOM, health
timeout,
hang, process checks; rollback to last-good and a restore that fails; the host's guard."""

from __future__ import annotations

import json

from tests.unit.verify_fakes import FAST, OLD, PLAIN, TOKEN, B, Behaviour, C, FakeHost, run, spec


def test_crash_at_start_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="crash"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back"
    assert rep["phase"] == "unit"
    assert "RuntimeError: engine died" in rep["message"]
    assert host.current == OLD and host.last_good == OLD
    assert host.benched == []
    assert any("systemctl daemon-reload" in c for c in host.commands)


def test_oom_is_named_and_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="oom"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back" and rep["phase"] == "oom"
    assert "OOM" in rep["message"] and "CUDA out of memory" in rep["message"]


def test_slow_start_times_out_then_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="never"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back" and rep["phase"] == "health"
    assert "not healthy after 60s" in rep["message"]
    assert host.clock >= 60
    m = next(m for m in rep["measurements"] if m["name"] == "time_to_healthy[candidate]")
    assert m["ok"] is False and m["threshold"] == 60


def test_hang_mid_benchmark_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench="hang"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back" and rep["phase"] == "bench"
    assert "hung" in rep["message"]
    assert host.current == OLD


def test_baseline_failure_also_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(health="crash"),
                                       OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back"
    assert host.current == OLD


def test_memlock_too_low_rolls_back(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(memlock="65536"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back" and rep["phase"] == "process"
    assert "memlock 65536" in rep["message"]


def test_token_in_argv_fails_without_printing_it(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(argv=("vllm", TOKEN)), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back"
    assert "HF token is in the engine's argv" in rep["message"]
    assert TOKEN not in json.dumps(rep)


def test_no_last_good_fails_and_stops_a_crash_loop(tmp_path):
    host = FakeHost(C, None, (C,), {C: Behaviour(health="crash")})
    rep = run(host, spec(tmp_path, prior_current=None))
    assert rep["outcome"] == "failed"
    assert "no last-good" in rep["message"]
    assert host.stopped


def test_prior_current_is_restored_when_no_last_good(tmp_path):
    host = FakeHost(C, None, (C, OLD), {C: Behaviour(health="crash"), OLD: Behaviour()})
    rep = run(host, spec(tmp_path, prior_current=OLD))
    assert rep["outcome"] == "rolled_back"
    assert host.current == OLD


def test_restore_that_fails_is_failed(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="crash"),
                                       OLD: Behaviour(health="crash")})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "failed"
    assert "restoring last-good" in rep["message"]


# -- the host's guard ------------------------------------------------------------------------


def test_guard_is_armed_for_each_phase_and_disarmed_by_the_commit(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "kept"
    arms = [g for g in host.guard if g[0] == "arm"]
    # health of the candidate, its bench, the switch to the baseline, its bench, back again
    assert [g[1] for g in arms] == [C, C, B, B, C]
    assert arms[0][2] == 60 + 30 and arms[1][2] == 600 + 150  # health / bench + margin
    assert not host.armed and host.last_good == C
    commit = next(c for c in host.commands if c.startswith("flock ") and "last-good" in c)
    assert "/var/lib/specdec/last-good.commit.tmp" in commit and f"not {C}" in commit


def test_guard_is_not_armed_when_running_last_good(tmp_path):
    host = FakeHost(C, C, (C, B), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, reverify=True, restarted=False))
    assert rep["outcome"] == "kept"
    assert [g[1] for g in host.guard if g[0] == "arm"] == [B, B]  # only while off last-good


def test_rollback_disarms_the_guard(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="crash"), OLD: Behaviour()})
    assert run(host, spec(tmp_path))["outcome"] == "rolled_back"
    assert host.guard[0][:2] == ("arm", C) and host.guard[-1] == ("disarm",)


def test_failed_restore_leaves_the_guard_armed(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(health="crash"),
                                       OLD: Behaviour(health="crash")})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "failed" and "guard reverts it" in rep["message"]
    assert ("disarm",) not in host.guard


def test_commit_after_the_guard_reverted_is_not_a_success(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN),
                                       OLD: Behaviour()})
    host.guard_reverted = C
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] in ("rolled_back", "failed")
    assert "reverted" in rep["message"] and host.last_good == OLD


def test_release_reverted_by_the_guard_before_verify_is_a_rollback(tmp_path):
    # serve made C current; the control node lost the host; its guard went back to OLD.
    host = FakeHost(OLD, OLD, (C, OLD), {C: Behaviour(bench=FAST), OLD: Behaviour()})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "rolled_back" and rep["phase"] == "guard", rep["message"]
    assert f"guard reverted {C} to last-good {OLD}" in rep["message"]
    assert host.benched == [] and host.current == OLD and host.last_good == OLD
