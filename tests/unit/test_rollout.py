"""specdec.fleet.rollout: batch spec, batching, stop rule, and the driver with a fake pyinfra."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from specdec.cli import main
from specdec.errors import RolloutError
from specdec.fleet import rollout as ro
from specdec.plan.hostdata import parse_host_settings
from specdec.report.fleet import load_reports, skipped_report, write_host_report


def test_parse_batches():
    assert ro.parse_batches("1,25%,100%") == [ro.Batch(count=1), ro.Batch(percent=25),
                                               ro.Batch(percent=100)]
    assert ro.parse_batches(" 2 , 50% ") == [ro.Batch(count=2), ro.Batch(percent=50)]


@pytest.mark.parametrize("bad", ["0,abc", "0", "abc", "150%", "0%", "1,,2", "", "-1", "1.5",
                                 "%", "25 %"])
def test_bad_batches(bad):
    with pytest.raises(RolloutError, match="--batches"):
        ro.parse_batches(bad)


@pytest.mark.parametrize("bad", ["-1", "101", "x", "nan"])
def test_bad_max_fail(bad):
    with pytest.raises(RolloutError, match="--max-fail-percent"):
        ro.parse_max_fail(bad)


def test_batch_hosts_ansible_serial():
    hosts = [f"h{i}" for i in range(8)]
    b = ro.batch_hosts(hosts, ro.parse_batches("1,25%,100%"))
    assert b == [["h0"], ["h1", "h2"], ["h3", "h4", "h5", "h6", "h7"]]
    # the last size repeats; a percentage rounds down but is at least 1
    assert ro.batch_hosts(hosts, ro.parse_batches("1,3")) == [
        ["h0"], ["h1", "h2", "h3"], ["h4", "h5", "h6"], ["h7"]]
    assert ro.batch_hosts(["a", "b"], ro.parse_batches("10%")) == [["a"], ["b"]]
    assert ro.batch_hosts(["a"], ro.parse_batches("5,100%")) == [["a"]]


def test_exceeds_is_strict():
    assert not ro.exceeds(0, 4, 0)
    assert ro.exceeds(1, 4, 0)
    assert not ro.exceeds(2, 4, 50)  # must be *exceeded*
    assert ro.exceeds(3, 4, 50)
    assert not ro.exceeds(4, 4, 100)


class FakePyinfra:
    """Writes the per-host report a deploy would write, with scripted outcomes."""

    def __init__(self, outcomes: dict[str, str], rc_override: int | None = None) -> None:
        self.outcomes = outcomes
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.rc_override = rc_override
        self.cwds: list[Path] = []

    def __call__(self, cmd: list[str], env: Any, cwd: Path) -> int:
        self.calls.append(cmd)
        self.cwds.append(cwd)
        self.envs.append(dict(env))
        hosts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--limit"]
        run_dir = Path(env["SPECDEC_REPORTS_DIR"]) / env["SPECDEC_RUN_ID"]
        rc = 0
        for h in hosts:
            out = self.outcomes.get(h, "kept")
            if out == "none":  # pyinfra died before verify: no report
                rc = 1
                continue
            write_host_report(run_dir, skipped_report(h, env["SPECDEC_RUN_ID"], f"{out} here",
                                                      outcome=out, phase="done"))
            rc = rc or int(out in ro.FAILED)
        return self.rc_override if self.rc_override is not None else rc


def make_plan(tmp_path: Path, hosts: list[str], batches: str = "1,25%,100%",
              max_fail: float = 0) -> ro.RolloutPlan:
    return ro.RolloutPlan(inventory=tmp_path / "inv.py", hosts=hosts,
                          batches=ro.batch_hosts(hosts, ro.parse_batches(batches)),
                          max_fail_percent=max_fail, run_id="run1",
                          reports_root=tmp_path / "reports")


HOSTS = [f"h{i}" for i in range(8)]


def test_all_good_runs_every_batch(tmp_path):
    fake = FakePyinfra({})
    res = ro.run_rollout(make_plan(tmp_path, HOSTS), fake, say=lambda s: None)
    assert len(fake.calls) == 3 and res.exit_code == 0 and res.stopped_after is None
    assert fake.calls[0][-2:] == ["--limit", "h0"]
    assert fake.calls[0][1:4] == ["-m", "pyinfra", "-y"]
    assert all(e["SPECDEC_RUN_ID"] == "run1" for e in fake.envs)
    summary = (tmp_path / "reports" / "run1" / "summary.md").read_text()
    assert summary.count("| kept |") == 8


def test_pyinfra_runs_in_the_users_directory(tmp_path, monkeypatch):
    """pyinfra reads group data from the working directory and beside the inventory, as
    `specdec plan` does: it runs where the user runs specdec, never in this package's checkout
    (whose example group_data/ would apply to the user's groups of the same name)."""
    user = tmp_path / "fleet"
    user.mkdir()
    monkeypatch.chdir(user)
    fake = FakePyinfra({})
    ro.run_rollout(make_plan(tmp_path, HOSTS[:2], batches="100%"), fake, say=lambda s: None)
    assert fake.cwds == [user]


def test_canary_failure_stops_and_skips_the_rest(tmp_path):
    fake = FakePyinfra({"h0": "rolled_back"})
    res = ro.run_rollout(make_plan(tmp_path, HOSTS), fake, say=lambda s: None)
    assert len(fake.calls) == 1
    assert res.stopped_after == 1 and res.exit_code == 1
    assert res.outcomes["h0"] == "rolled_back"
    assert all(res.outcomes[h] == "skipped" for h in HOSTS[1:])
    reps = {r["host"]: r for r in load_reports(tmp_path / "reports" / "run1")}
    assert "batch 1 had 1/1 failed" in reps["h5"]["message"]
    assert [r["host"] for r in load_reports(tmp_path / "reports" / "run1")] == HOSTS


def test_disabled_and_unchanged_are_not_failures(tmp_path):
    fake = FakePyinfra({"h0": "disabled", "h1": "unchanged"})
    res = ro.run_rollout(make_plan(tmp_path, HOSTS), fake, say=lambda s: None)
    assert len(fake.calls) == 3 and res.exit_code == 0


def test_max_fail_percent_tolerates_within_limit(tmp_path):
    fake = FakePyinfra({"h1": "failed"})  # batch 2 = h1,h2 → 50%
    res = ro.run_rollout(make_plan(tmp_path, HOSTS, max_fail=50), fake, say=lambda s: None)
    assert len(fake.calls) == 3 and res.stopped_after is None
    assert res.exit_code == 1  # a failed host is never a success
    fake = FakePyinfra({"h1": "failed"})
    plan = make_plan(tmp_path, HOSTS, max_fail=49)
    plan = ro.RolloutPlan(**{**plan.__dict__, "run_id": "run2"})
    res = ro.run_rollout(plan, fake, say=lambda s: None)
    assert len(fake.calls) == 2 and res.stopped_after == 2


def test_missing_report_counts_as_failed(tmp_path):
    fake = FakePyinfra({"h0": "none"})
    res = ro.run_rollout(make_plan(tmp_path, HOSTS), fake, say=lambda s: None)
    assert res.outcomes["h0"] == "failed" and res.stopped_after == 1
    rep = json.loads((tmp_path / "reports" / "run1" / "h0.json").read_text())
    assert rep["phase"] == "deploy" and "pyinfra exited 1" in rep["message"]


def test_nonzero_exit_with_good_reports_stops(tmp_path):
    fake = FakePyinfra({}, rc_override=1)
    res = ro.run_rollout(make_plan(tmp_path, HOSTS), fake, say=lambda s: None)
    assert res.stopped_after == 1


# -- CLI: bad input, nothing touched -----------------------------------------------------------


@pytest.mark.parametrize(("argv", "needle"), [
    (["--batches", "0,abc"], "--batches='0,abc'"),
    (["--batches", "150%"], "'150%' is not a percentage"),
    (["--max-fail-percent", "abc"], "--max-fail-percent"),
    (["--run-id", "../x"], "--run-id"),
    (["--data", "novalue"], "--data"),
])
def test_cli_bad_input(tmp_path, capsys, monkeypatch, argv, needle):
    called = []
    monkeypatch.setattr(ro, "run_rollout", lambda *a, **k: called.append(a))
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = ['a']\n")
    rc = main(["rollout", str(inv), "--reports", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert rc != 0 and not called
    assert needle in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_unwritable_reports(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert rc == 2 and "not writable" in err and len(err.strip().splitlines()) == 1


def test_cli_used_run_id_refused(tmp_path, capsys):
    root = tmp_path / "r"
    write_host_report(root / "old", skipped_report("a", "old", "x"))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(root), "--run-id", "old"])
    assert rc == 2 and "already used" in capsys.readouterr().err


@pytest.mark.usefixtures("hf_token")
def test_cli_rollout_end_to_end_with_fake_pyinfra(tmp_path, capsys, monkeypatch):
    fake = FakePyinfra({"orin-nano-01": "disabled"})
    real = ro.run_rollout
    monkeypatch.setattr(ro, "run_rollout", lambda plan, **kw: real(plan, fake, say=print, **kw))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
               "--run-id", "demo", "--batches", "1,100%", "--data", "specdec_reverify=true"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| disabled |" in out and "batch 2/2" in out
    assert fake.calls[0][-2:] == ["--data", "specdec_reverify=true"]
    assert fake.calls[0][-4:-2] == ["--limit", "agx-orin-01"]


def test_missing_report_names_pyinfra_error_and_host_meta(tmp_path):
    def runner(cmd, env, cwd):
        return 1, "h0: could not read the device identity files"

    plan = make_plan(tmp_path, HOSTS)
    plan = ro.RolloutPlan(**{**plan.__dict__, "meta": {"h0": {"device": "orin-nano-8gb",
                                                               "method": "ngram"}}})
    ro.run_rollout(plan, runner, say=lambda s: None)
    rep = json.loads((tmp_path / "reports" / "run1" / "h0.json").read_text())
    assert rep["message"].endswith(": h0: could not read the device identity files")
    assert rep["device"] == "orin-nano-8gb" and rep["method"] == "ngram"


def test_host_meta_from_inventory_data():
    meta = ro.host_meta(parse_host_settings("x", {"specdec_device": "orin-nano-8gb",
                                                  "specdec_model": "Qwen/Qwen3-0.6B"}))
    assert meta["device"] == "orin-nano-8gb" and meta["method"]
    assert ro.host_meta(parse_host_settings("x", {"specdec_device": "no-such-device"})) == {}


def test_subprocess_runner_echoes_and_keeps_the_error(tmp_path, capsys):
    code = ("print('--> Starting'); print('--> pyinfra error in f.py line 3: h: boom'); "
            "raise SystemExit(1)")
    rc, err, _ = ro._subprocess_runner([sys.executable, "-c", code], {}, tmp_path)
    assert (rc, err) == (1, "h: boom")
    assert "--> Starting" in capsys.readouterr().out


@pytest.mark.usefixtures("hf_token")
def test_cli_passes_dry_diff_and_verbosity_to_pyinfra(tmp_path, capsys, monkeypatch):
    """--dry: one pyinfra --dry over every targeted host, no run directory; --diff and -vv
    reach every pyinfra run; --exclude leaves hosts (names, globs) out."""
    calls: list[list[str]] = []
    real = ro.dry_run
    monkeypatch.setattr(ro, "dry_run",
                        lambda plan: real(plan, lambda c, e, d: calls.append(c) or 0))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), "--run-id",
               "dry1", "--dry", "--diff", "-vv", "--exclude", "orin-nano-*"])
    assert rc == 0 and len(calls) == 1
    cmd = calls[0]
    assert cmd[-1] == "--dry" and "--diff" in cmd and "-vv" in cmd and "-y" not in cmd
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--limit"] == [
        "agx-orin-01", "orin-nx-01"]
    assert not (tmp_path / "dry1").exists()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--exclude", "nope"], "--exclude='nope': matches no host"),
    (["--exclude", "orin*,agx*"], "leaves no host"),
    (["--dry", "--shard", "1/2"], "--dry and --shard"),
])
def test_cli_bad_exclude_and_dry(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.setattr(ro, "dry_run", lambda *a: pytest.fail("ran"))
    monkeypatch.setattr(ro, "run_rollout", lambda *a, **k: pytest.fail("ran"))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
