"""roles/factcache.py: facts read once per host per run, read again under the lock, answered
from that read until the run changes the host; and its one-command batch on a real shell."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from pyinfra.api import FactBase
from pyinfra.facts import files as ffacts
from pyinfra.facts import server as sfacts
from typing_extensions import override

from specdec.host import release
from specdec.render.files import LIMITS_PATH
from specdec.roles import facts as rfacts
from specdec.roles.factcache import FactBatch
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import SPARK, World, converged
from tests.deploy.harness import host_plan as _hp
from tests.deploy.test_deploy_verify import AGX, LiveWorld, _api_get, deploy, live, report

OTHER = "0" * 40


@dataclass
class DriftWorld(LiveWorld):
    """A converged host whose limits file was changed by hand after the deploy planned (after
    prepare, before the lock)."""

    def fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        if (cls is ffacts.Sha1File and kwargs.get("path") == LIMITS_PATH
                and self.states and self.states[0].is_executing):
            return OTHER
        return super().fact(cls, *args, **kwargs)


def _converged(agx_world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    w = converged(agx_world, hp, TOKEN)
    w.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        _api_get)
    return w


def test_a_change_after_prepare_is_seen_under_the_lock(agx_world, monkeypatch, on):
    """The operations decide from the read under the lock, not from prepare's: the limits file
    changed in between is uploaded again; every read after that change is live."""
    w = _converged(agx_world, monkeypatch)
    world = DriftWorld(**w.__dict__)
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    assert [p for p, _ in r.uploads] == [LIMITS_PATH], r.uploads
    assert "deploy.lock.new." in r.commands[0] and "deploy.lock.released." in r.commands[-1]
    executing = [name for name, ex in world.fact_reads if ex]
    assert executing[0] == "FactBatch"
    # the upload changed the host: later operations read it live again (serve's files)
    assert "Sha1File" in executing[1:] and "SpecdecReleases" in executing[1:], executing
    assert report(on)["outcome"] == "unchanged"


def test_switched_off_every_read_is_live(agx_world, monkeypatch, on):
    monkeypatch.setenv("SPECDEC_FACT_CACHE", "off")
    world = live(_converged(agx_world, monkeypatch))
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    assert len(r.commands) == 2
    executing = [name for name, ex in world.fact_reads if ex]
    assert "FactBatch" not in executing and executing.count("SpecdecReleases") >= 3


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_batch_on_a_real_shell_matches_each_fact(tmp_path):
    """One command, many facts: each part's value is what the fact alone reads (pyinfra's
    own processing); a failing part and an absent file are told apart."""
    f = tmp_path / "a file"
    f.write_text("one\n@@specdec-fact 1\n@@specdec-fact-rc 0 0\ntwo\n")  # no forged parts
    # an access time after the modification time: reading it (relatime) does not move it, so
    # the batch's stat and the fact's own agree whatever second each runs in
    mtime = f.stat().st_mtime
    os.utime(f, (mtime + 5, mtime))
    parts = ((ffacts.File, {"path": str(f)}), (ffacts.Sha1File, {"path": str(f)}),
             (ffacts.FileContents, {"path": str(f)}), (ffacts.File, {"path": str(tmp_path / "x")}),
             (ffacts.Directory, {"path": str(tmp_path)}), (sfacts.Which, {"command": "sh"}),
             (rfacts.BootId, {}), (rfacts.PackageState, {"binary": "sh"}))
    batch = FactBatch()
    cmd = batch.command(parts=parts).get_raw_value()
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True)
    got = batch.process(out.stdout.splitlines())
    for (cls, kw), (ok, value) in zip(parts, got, strict=True):
        fact = cls()
        alone = subprocess.run(["sh", "-c", str(_raw(fact.command(**kw)))],
                               capture_output=True, text=True, check=False)
        lines = alone.stdout.splitlines()
        assert ok, cls
        assert value == (fact.process(lines) if lines else fact.default()), cls
    assert got[3] == (True, None)  # absent: the fact's own answer, not a failure
    failing = FactBatch()
    cmd = failing.command(parts=((_Fails, {}), (rfacts.BootId, {}))).get_raw_value()
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True)
    got = failing.process(out.stdout.splitlines())
    assert got[0] == (False, None) and got[1][0]  # the failed part is read live instead


class _Fails(FactBase[str]):
    @override
    def command(self) -> str:
        return "echo half; exit 3"


def _raw(cmd: Any) -> str:
    return cmd.get_raw_value() if hasattr(cmd, "get_raw_value") else str(cmd)


def test_the_next_run_reads_in_prepare_what_this_one_asked_for(agx_world, monkeypatch, on):
    """The refresh lists the facts asked for (reports/cache/<host>/facts.json); the next run
    reads them in one command before planning: prepare then reads the host once or twice, not
    once per fact. The list holds no password or environment of the connection."""
    w = _converged(agx_world, monkeypatch)
    first = live(copy.deepcopy(w))
    assert not deploy(monkeypatch, first, AGX).failed
    manifest = on.parent / "cache" / "fake_orin-1" / "facts.json"
    listed = json.loads(manifest.read_text())
    assert len(listed) > 30 and all(set(e) == {"fact", "kwargs", "conn", "when"} for e in listed)
    assert not any("password" in k or k == "_env" for e in listed for k in e["conn"])
    before = [name for name, ex in first.fact_reads if not ex]
    again = live(copy.deepcopy(w))
    monkeypatch.setenv("SPECDEC_RUN_ID", "t2")
    r = deploy(monkeypatch, again, AGX)
    assert not r.failed, r.output
    prepare = [name for name, ex in again.fact_reads if not ex]
    assert prepare[0] == "FactBatch" and len(prepare) <= 2, prepare
    assert len(before) > 30
    assert [name for name, ex in again.fact_reads if ex] == ["FactBatch"]
    assert len(r.commands) == 2


def test_a_foreign_manifest_is_ignored(agx_world, monkeypatch, on):
    """The list is input: a fact from another module, a password, a nested value: ignored."""
    manifest = on.parent / "cache" / "fake_orin-1" / "facts.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps([
        {"fact": "os:system", "kwargs": {}, "conn": {}},
        {"fact": "pyinfra.facts.files:File", "kwargs": {"path": "/etc/x"},
         "conn": {"_sudo_password": "x"}},
        {"fact": "pyinfra.facts.files:File", "kwargs": {"path": {"a": 1}}, "conn": {}},
        "junk"]))
    world = live(_converged(agx_world, monkeypatch))
    assert not deploy(monkeypatch, world, AGX).failed
    assert "FactBatch" not in [name for name, ex in world.fact_reads if not ex]


def test_a_converged_spark_costs_one_read_too(spark_world, monkeypatch, on):
    """TensorRT-LLM on a DGX Spark (local head copy, tiktoken files, no Jetson tools)."""
    hp = _hp(spark_world, SPARK)
    c = hp.rendered.release_id
    w = converged(spark_world, hp, TOKEN)
    w.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        _api_get)
    world = live(w)
    r = deploy(monkeypatch, world, SPARK)
    assert not r.failed, r.output
    assert [name for name, ex in world.fact_reads if ex] == ["FactBatch"]
    assert len(r.commands) == 2


def test_with_yes_the_operations_reads_are_kept_for_the_next_run(agx_world, monkeypatch, on):
    """`pyinfra -y` (and `specdec rollout`) skips change detection: operations read their facts
    only while executing (pyinfra 3.10 api/operation.py, `should_check_for_changes`). Those
    reads are answered once per fact until the run changes the host, and the manifest written
    at the lock's release lists them: the next run reads the host once under the lock."""
    w = _converged(agx_world, monkeypatch)
    first = live(copy.deepcopy(w))
    assert not deploy(monkeypatch, first, AGX, check_for_changes=False).failed
    executing = [name for name, ex in first.fact_reads if ex]
    assert len(executing) > 20, executing  # read while executing, as the lab's runs do
    assert executing.count("Os") == 1, executing  # asked by many operations, read once
    manifest = on.parent / "cache" / "fake_orin-1" / "facts.json"
    listed = json.loads(manifest.read_text())
    when = [e["when"] for e in listed]
    assert when.count("execute") >= len(set(executing)) - 1 > 10 and "prepare" in when, when
    again = live(copy.deepcopy(w))
    monkeypatch.setenv("SPECDEC_RUN_ID", "t2")
    r = deploy(monkeypatch, again, AGX, check_for_changes=False)
    assert not r.failed, r.output
    # prepare reads only what planning asks for; the operations' facts once, under the lock
    prepare = [name for name, ex in again.fact_reads if not ex]
    assert prepare == ["FactBatch"], prepare
    assert [name for name, ex in again.fact_reads if ex] == ["FactBatch"]
    assert len(r.commands) == 2, r.commands
