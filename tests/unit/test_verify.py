"""specdec.verify: the decision flow against a fake host (unit, HTTP, bench, /proc)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specdec import release
from specdec.errors import BenchError
from specdec.plan import baseline, make_plan
from specdec.render import render
from specdec.rounds import RoundBench
from specdec.verify import (
    FAILURE_OUTCOMES,
    FileSpec,
    Roofline,
    Verifier,
    VerifySpec,
    bench_summary,
    memlock_ok,
    needs_verification,
    parse_limits_memlock,
    unchanged_report,
    upload_command,
)

TOKEN = "hf_MARKERtoken123"
PLAN = make_plan("orin-1", {"specdec_device": "agx-orin-64gb",
                            "specdec_model": "meta-llama/Llama-3.1-8B-Instruct",
                            "specdec_num_speculative_tokens": 3,  # pinned: no tune phase
                            "specdec_health_timeout": 60}, None)
CAND = render(PLAN)
BASE = render(baseline(PLAN))
C, B, OLD = CAND.release_id, BASE.release_id, "0ld0ld0ld0ld"


def result(thr1: float, tpot1: float, thr8: float, n: int = 30,
           spec: dict[str, Any] | None = None) -> dict[str, Any]:
    reqs = [{"prompt_id": f"p{i}", "tpot_ms": tpot1 * (1 + 0.01 * (i % 3)), "error": None}
            for i in range(n)]
    return {"concurrency": {
        "1": {"throughput_tok_s": thr1, "tpot_ms_p50": tpot1, "requests": reqs},
        "8": {"throughput_tok_s": thr8, "tpot_ms_p50": tpot1 * 2, "requests": []},
    }, "spec_decode": spec}


FAST = result(40.0, 25.0, 160.0, spec={"acceptance_length": 2.4, "acceptance_rate": 0.47,
                                       "per_position": [0.7, 0.45, 0.25], "drafts": 100})
SLOW8 = result(40.0, 25.0, 60.0)
PLAIN = result(20.0, 50.0, 100.0)


@dataclass
class Behaviour:
    health: str = "ok"  # ok | crash | oom | never
    bench: dict[str, Any] | str = field(default_factory=lambda: PLAIN)  # result or "hang"
    memlock: str = "unlimited"
    argv: tuple[str, ...] = ("vllm", "serve", "m")


class FakeHost:
    """A host running one release at a time; facts of its unit, HTTP and bench."""

    def __init__(self, current: str | None, last_good: str | None, releases: tuple[str, ...],
                 behaviour: dict[str, Behaviour]) -> None:
        self.current = current
        self.last_good = last_good
        self.releases = set(releases)
        self.behaviour = behaviour
        self.commands: list[str] = []
        self.files: dict[str, str] = {}
        self.clock = 0.0
        self.restarts = 0
        self.stopped = False
        self.benched: list[str] = []
        self.offsets: list[int] = []
        self.guard: list[tuple[Any, ...]] = []  # ("arm", release, seconds) | ("disarm",)
        self.guard_reverted: str | None = None  # set: the host's guard already reverted

    @property
    def armed(self) -> bool:
        return bool(self.guard) and self.guard[-1][0] == "arm"

    def state(self) -> release.ReleaseState:
        return release.ReleaseState(self.current, self.last_good, tuple(sorted(self.releases)))

    def beh(self) -> Behaviour:
        return self.behaviour.get(self.current or "", Behaviour(health="never"))

    # HostIO
    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        self.commands.append(command)
        if command.startswith("flock ") and "last-good" in command and self.guard_reverted:
            return False, [f"current is releases/{self.current}, not {self.guard_reverted}: "
                           f"deadline: reverted {self.guard_reverted} to last-good"]
        if m := re.search(r"release=(\S+) deadline=(\d+)s", command):
            self.guard.append(("arm", m.group(1), int(m.group(2))))
        if "rm -f pending" in command or "rm -f /var/lib/specdec/pending" in command:
            self.guard.append(("disarm",))
        if m := re.search(r"ln -sfn releases/(\S+) \S+/current\.activate\.tmp", command):
            if m.group(1) not in self.releases:
                return False, []
            self.current = m.group(1)
            self.restarts = 0
            self.stopped = False
        if m := re.search(r"ln -sfn releases/(\S+) \S+/last-good\.\w+\.tmp", command):
            self.last_good = m.group(1)
        if "base64 -d" in command:
            path = re.findall(r"mv -f \S+ (\S+)$", command)[0]
            data = re.findall(r"printf '%s' (\S+) \| base64", command)[0].strip("'")
            import base64

            self.files[path] = base64.b64decode(data).decode()
            rid = path.split("/releases/")[1].split("/")[0]
            self.releases.add(rid)
        if command.startswith("systemctl show"):
            h = self.beh().health
            if self.stopped:
                return True, ["ActiveState=inactive", "SubState=dead", "Result=success"]
            if h in ("crash", "oom"):
                self.restarts += 1
                return True, ["ActiveState=activating", "SubState=auto-restart",
                              "Result=exit-code", f"NRestarts={self.restarts}", "MainPID=0"]
            return True, ["ActiveState=active", "SubState=running", "Result=success",
                          "NRestarts=0", "MainPID=4242"]
        if command.startswith("journalctl"):
            if self.beh().health == "oom":
                return True, ["loading weights", "torch.OutOfMemoryError: CUDA out of memory."]
            return True, ["Traceback (most recent call last):", "RuntimeError: engine died"]
        if "Max locked memory" in command:
            b = self.beh()
            out = ["@@pid 4242",
                   f"Max locked memory         {b.memlock}            {b.memlock}   bytes",
                   "@@argv"]
            out += sorted({hashlib.sha256(a.encode()).hexdigest() for a in b.argv})
            out += ["@@environ"]
            return True, out
        if command.startswith("systemctl stop"):
            self.stopped = True
        return True, []

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        if self.stopped or self.beh().health != "ok":
            return 0, ""
        if url.endswith("/health"):
            return 200, ""
        return 200, json.dumps({"data": [{"id": PLAN.served_model_name}]})

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        assert self.current is not None
        self.offsets.append(run.offsets[0])
        self.benched.append(self.current)
        b = self.beh().bench
        if isinstance(b, str):
            raise BenchError("no result within 600s (engine hung?)")
        out.write_text(json.dumps(b))
        return b

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def monotonic(self) -> float:
        return self.clock


def spec(tmp_path: Path, **kw: Any) -> VerifySpec:
    base: dict[str, Any] = dict(
        plan=PLAN, address="10.0.0.5", candidate=C, desired=C, baseline_id=B,
        baseline_files=tuple(FileSpec(f.path, f.content, f.mode, f.owner, f.group)
                             for f in BASE.release_files),
        restarted=True, secret_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
        cache_dir=tmp_path / "cache", work_dir=tmp_path / "bench",
        roofline=Roofline(204.8, 8 * 10**9), run_id="r1")
    base.update(kw)
    return VerifySpec(**base)


def run(host: FakeHost, sp: VerifySpec) -> dict[str, Any]:
    return Verifier(sp, host).run(host.state())


# -- outcomes ----------------------------------------------------------------------------------


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


def test_cached_baseline_is_reused_and_baseline_uploaded_on_disable(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(PLAIN))
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=SLOW8), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert rep["outcome"] == "disabled"
    assert host.benched == [C]  # baseline not re-measured
    assert rep["baseline"]["cached"] is True
    # the baseline release was not on the host: uploaded before switching to it
    assert f"/var/lib/specdec/releases/{B}/specdec-engine.service" in host.files
    assert host.current == B


def test_reverify_ignores_the_cache(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(PLAIN))
    host = FakeHost(C, C, (C, B), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, reverify=True, restarted=False))
    assert rep["outcome"] == "kept"
    assert host.benched == [C, B]


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


def test_plan_without_speculation_is_no_speculation_after_health(tmp_path):
    bplan = baseline(PLAN)
    host = FakeHost(B, OLD, (B, OLD), {B: Behaviour()})
    rep = run(host, spec(tmp_path, plan=bplan, candidate=B, desired=B, baseline_id=None))
    assert rep["outcome"] == "no_speculation" and host.last_good == B
    assert host.benched == [] and "speculation is off" in rep["message"]


def test_verify_off_is_not_verified(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, benchmark=False))
    assert rep["outcome"] == "not_verified" and host.last_good == C and host.benched == []
    assert "specdec_verify=false" in rep["message"]


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


def test_recorded_disable_reverified_measures_baseline_first(tmp_path):
    host = FakeHost(B, B, (B, C), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, desired=B, reverify=True, restarted=False))
    assert host.benched == [B, C]
    assert rep["outcome"] == "kept" and host.current == C and host.last_good == C
    assert any(f"rm -f /var/lib/specdec/releases/{C}/decision.json" in c for c in host.commands)


# -- helpers -----------------------------------------------------------------------------------


def test_needs_verification():
    st = release.ReleaseState(C, C, (C,))
    assert needs_verification(st, C, restarted=False, reverify=False) is None
    assert needs_verification(st, C, restarted=True, reverify=False)
    assert needs_verification(st, C, restarted=False, reverify=True)
    assert needs_verification(release.ReleaseState(C, OLD, (C, OLD)), C, False, False)
    assert needs_verification(release.ReleaseState(C, None, (C,)), C, False, False)
    assert needs_verification(release.ReleaseState(B, B, (B, C)), B, False, False) is None


def test_unchanged_report(tmp_path):
    rep = unchanged_report(spec(tmp_path), release.ReleaseState(C, C, (C,)), (200, ""))
    assert rep["outcome"] == "unchanged" and "specdec_reverify" in rep["message"]
    assert rep["candidate"] is None and "previous_outcome" not in rep


def test_unchanged_report_carries_the_last_verification(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    first = run(host, spec(tmp_path))
    assert first["outcome"] == "kept"
    again = unchanged_report(spec(tmp_path), host.state(), (200, ""), first)
    assert again["outcome"] == "unchanged" and again["previous_outcome"] == "kept"
    assert again["candidate"] == first["candidate"]
    assert again["acceptance"]["length"] == 2.4
    # a previous verification of another release is not carried over
    other = unchanged_report(spec(tmp_path), release.ReleaseState(B, B, (B,)), (200, ""), first)
    assert "previous_outcome" not in other and other["candidate"] is None


def test_memlock_parsing():
    lines = ["Limit                     Soft Limit           Hard Limit           Units",
             "Max locked memory         8388608              8388608              bytes"]
    assert parse_limits_memlock(lines) == "8388608"
    assert memlock_ok("8388608", "8388608")
    assert not memlock_ok("8388608", "65536")
    assert not memlock_ok("unlimited", "8388608")
    assert memlock_ok("unlimited", "unlimited")
    assert not memlock_ok("unlimited", None)


def test_upload_command_roundtrip(tmp_path):
    import grp
    import os
    import pwd
    import subprocess

    target = tmp_path / "d" / "f.txt"
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    cmd = upload_command(FileSpec(str(target), "a 'quoted' $x\n", "0640", user, group))
    subprocess.run(["sh", "-c", cmd], check=True)
    assert target.read_text() == "a 'quoted' $x\n"
    assert oct(target.stat().st_mode & 0o777) == "0o640"


def test_bench_summary_accepts_vllm_keys():
    s = bench_summary({"concurrency": {"1": {"output_throughput": 10.0, "median_tpot_ms": 9.0}}},
                      [1, 8])
    assert s["c1"]["throughput_tok_s"] == 10.0 and s["c1"]["tpot_ms_p50"] == 9.0
    assert s["c8"]["throughput_tok_s"] is None


def test_inconclusive_measures_more_rounds_then_disables(tmp_path, monkeypatch):
    from specdec import gate

    seen: list[int] = []

    def unclear(bases, cands, policy=None):
        seen.append(len(bases))
        return gate.Decision("inconclusive", [], "not decisive: x", {}, rounds=len(bases))

    monkeypatch.setattr(gate, "decide", unclear)
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert PLAN.gate.max_rounds == 4
    assert seen == [1, 2, 3, 4]
    assert host.benched == [C, B, B, C, C, B, B, C]  # one restart per extra round (ABAB)
    # each round measures the next prompts (the baseline 2 at c=1 a round, the candidate 4)
    assert host.offsets == [0, 0, 2, 4, 8, 4, 6, 12]
    assert rep["outcome"] == "disabled" and host.current == B
    assert "inconclusive" in rep["message"]
    assert rep["candidate"]["rounds"] == 4 and rep["baseline"]["rounds"] == 4
    decisions = [m["value"] for m in rep["measurements"] if m["name"] == "decision"]
    assert decisions == ["inconclusive"] * 4


def test_extra_round_that_decides_keep(tmp_path, monkeypatch):
    from specdec import gate

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
    low = result(21.0, 48.0, 101.0)  # +5%: shown below the +30% keep threshold
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=low), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert host.benched == [C, B]
    assert rep["outcome"] == "disabled"


def test_cached_baseline_with_other_bench_settings_is_not_reused(tmp_path):
    (tmp_path / "cache").mkdir()
    other = {**PLAIN, "config": {"requests": 999, "max_tokens": 1}}
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(other))
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path))
    assert host.benched == [C, B]
    assert rep["baseline"]["cached"] is False


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


def test_a_cached_baseline_of_another_time_basis_is_measured_again(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    (tmp_path / "cache").mkdir()
    emulated = {**PLAIN, "config": {"requests": [2, 8], "max_tokens": 64,
                                    "prompt_offset": [0, 0]},
                "device_time": {"emulated": True, "time_scale": 0.1}}
    (tmp_path / "cache" / f"{B}.json").write_text(json.dumps(emulated))
    rep = run(host, spec(tmp_path))  # a real device's plan: no emulator time scale
    assert host.benched == [C, B]
    assert rep["baseline"]["cached"] is False
    assert any("another time basis" in e["message"] for e in rep["events"])


def test_power_mode_and_clocks_are_in_the_report(tmp_path):
    power = {"power_mode": "MAXN", "power_mode_id": 0, "clocks": {"gpu_max_mhz": 1300.5},
             "bandwidth_gbs": 204.8, "bandwidth_source": "catalog power_modes.MAXN"}
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    roof = Roofline(204.8, 8 * 10**9, bandwidth_source=power["bandwidth_source"], power=power)
    rep = run(host, spec(tmp_path, roofline=roof))
    assert rep["power"] == power
    assert rep["roofline"]["power_mode"] == "MAXN"
    assert rep["roofline"]["bandwidth_source"] == "catalog power_modes.MAXN"


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
