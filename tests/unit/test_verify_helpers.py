"""specdec.verify.verifier: whether a host is verified at all (off, no speculation, unchanged) and
the
verifier's helpers (memlock, uploads, bench summaries)."""

from __future__ import annotations

from specdec.host import release
from specdec.plan.planner import baseline
from specdec.verify.spec import FileSpec
from specdec.verify.verifier import (
    bench_summary,
    memlock_ok,
    needs_verification,
    parse_limits_memlock,
    unchanged_report,
    upload_command,
)
from tests.unit.verify_fakes import FAST, OLD, PLAIN, PLAN, B, Behaviour, C, FakeHost, run, spec


def test_verify_off_is_not_verified(tmp_path):
    host = FakeHost(C, OLD, (C, OLD), {C: Behaviour(bench=FAST), B: Behaviour(bench=PLAIN)})
    rep = run(host, spec(tmp_path, benchmark=False))
    assert rep["outcome"] == "not_verified" and host.last_good == C and host.benched == []
    assert "specdec_verify=false" in rep["message"]


def test_plan_without_speculation_is_no_speculation_after_health(tmp_path):
    bplan = baseline(PLAN)
    host = FakeHost(B, OLD, (B, OLD), {B: Behaviour()})
    rep = run(host, spec(tmp_path, plan=bplan, candidate=B, desired=B, baseline_id=None))
    assert rep["outcome"] == "no_speculation" and host.last_good == B
    assert host.benched == [] and "speculation is off" in rep["message"]


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


# -- helpers -----------------------------------------------------------------------------------


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
