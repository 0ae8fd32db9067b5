"""deploys/specdec.py with the lock and verify roles switched on (pyinfra's @fake connector):
lock first and last, verification after serve, a failed verification fails the host."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import State
from pyinfra.api.exceptions import PyinfraError

from specdec.host import release
from specdec.roles import facts as rfacts
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import AGX as AGX_AUTO
from tests.deploy.harness import World, converged, run_deploy
from tests.deploy.harness import host_plan as _hp
from tests.unit.verify_fakes import FAST, PLAIN, SLOW8, Behaviour, FakeHost

OLD = "0ld0ld0ld0ld"
# `specdec.roles.verify` the attribute is the deploy function; the module is in sys.modules.
VERIFY_MOD = importlib.import_module("specdec.roles.verify")
AGX = {**AGX_AUTO, "specdec_num_speculative_tokens": 3}  # pinned: the gate flow, no tune
# The @fake connector executes nothing: script the lock and the failing one-liner.
FAILS = {"'specdec: ": {"success": False, "stderr": "specdec: ..."}}
ACQUIRED = {**FAILS, "deploy.lock 2>/dev/null": "@@specdec-lock acquired"}


@dataclass
class LiveWorld(World):
    """A world whose release pointers read differently once pyinfra executes past the lock
    (whose re-check is the first read while executing, before serve changes anything)."""

    after: release.ReleaseState | None = None
    states: list[State] = field(default_factory=list)
    executing_reads: int = 0

    def fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        if (cls is rfacts.SpecdecReleases and self.after is not None and self.states
                and self.states[0].is_executing):
            self.executing_reads += 1
            if self.executing_reads > 1:
                return self.after
        return super().fact(cls, *args, **kwargs)


def live(world: World, **kw: Any) -> LiveWorld:
    return LiveWorld(**{**world.__dict__, **kw})


def use_host(monkeypatch, fake: FakeHost) -> None:
    monkeypatch.setattr(VERIFY_MOD, "make_io", lambda conn, spec: fake)


def _api_get(url: str, timeout: float, key: str | None = None,
             ca_file: str | None = None) -> tuple[int, str]:
    """The host's API as the verifier sees it: HTTPS, the fleet CA's certificate, the key."""
    return (200, "") if key and url.startswith("https://") and ca_file else (401, "")


def deploy(monkeypatch, world: LiveWorld, data: dict[str, Any], **kw: Any):
    return run_deploy(monkeypatch, world, {**data, "fake_responses": dict(ACQUIRED)},
                      state_out=world.states, **kw)


@dataclass
class Failed:
    commands: list[str]
    failed: bool = True


def deploy_failing(monkeypatch, world: LiveWorld, data: dict[str, Any],
                   responses: dict[str, Any] | None = None) -> Failed:
    """A one-host run whose host fails: pyinfra's API then raises "No hosts remaining!"."""
    with pytest.raises(PyinfraError, match="No hosts remaining"):
        run_deploy(monkeypatch, world, {**data, "fake_responses": responses or dict(ACQUIRED)},
                   state_out=world.states)
    state = world.states[0]
    h = state.inventory.get_host("@fake/orin-1")
    assert h in state.failed_hosts
    return Failed(list(h.connector.executed_commands))


def report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "fake_orin-1.json").read_text())


def test_keep_after_serve_with_lock_around(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    after = release.ReleaseState(current=c, last_good=OLD, releases=(c, OLD))
    world = live(agx_world, after=after)
    fake = FakeHost(c, OLD, (c, OLD), {c: Behaviour(bench=FAST)})
    fake.behaviour[hp.baseline.release_id] = Behaviour(bench=PLAIN)  # type: ignore[union-attr]
    use_host(monkeypatch, fake)
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    assert "mv -T /var/lib/specdec/deploy.lock.new." in r.commands[0]
    assert "rm -rf /var/lib/specdec/deploy.lock.released." in r.commands[-1]
    rep = report(on)
    assert rep["outcome"] == "kept" and rep["run_id"] == "t1"
    assert fake.last_good == c
    assert (on / "summary.md").exists() and (on / "index.html").exists()


def test_disable_is_not_a_failure(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c, b = hp.rendered.release_id, hp.baseline.release_id  # type: ignore[union-attr]
    world = live(agx_world, after=release.ReleaseState(c, OLD, (c, OLD)))
    use_host(monkeypatch, FakeHost(c, OLD, (c, OLD), {c: Behaviour(bench=SLOW8),
                                                      b: Behaviour(bench=PLAIN)}))
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed
    assert report(on)["outcome"] == "disabled"


def test_failed_verification_fails_the_host_and_releases_the_lock(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    world = live(agx_world, after=release.ReleaseState(c, OLD, (c, OLD)))
    fake = FakeHost(c, OLD, (c, OLD), {c: Behaviour(health="crash"), OLD: Behaviour()})
    use_host(monkeypatch, fake)
    r = deploy_failing(monkeypatch, world, AGX)
    assert fake.current == OLD
    rep = report(on)
    assert rep["outcome"] == "rolled_back"
    i_unlock = next(i for i, x in enumerate(r.commands)
                    if "rm -rf /var/lib/specdec/deploy.lock.released." in x)
    assert "specdec: @fake/orin-1: rolled_back: unit:" in r.commands[i_unlock + 1]
    assert r.commands[i_unlock + 1].endswith("exit 1")
    for p in on.rglob("*"):
        assert p.is_dir() or TOKEN not in p.read_text()


def test_unchanged_rerun_changes_nothing(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    world = live(world)
    # the API answers only with the fleet's key (its proxy's 401 otherwise)
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        _api_get)

    def no_io(conn, spec):
        raise AssertionError("an unchanged host must not be verified again")

    monkeypatch.setattr(VERIFY_MOD, "make_io", no_io)
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    assert len(r.commands) == 2  # the lock, taken and released; nothing else
    assert "Success" not in r.output  # every operation reports "No changes"
    assert report(on)["outcome"] == "unchanged"


def test_verified_then_unchanged_carries_figures(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c, b = hp.rendered.release_id, hp.baseline.release_id  # type: ignore[union-attr]
    world = live(agx_world, after=release.ReleaseState(c, OLD, (c, OLD)))
    use_host(monkeypatch, FakeHost(c, OLD, (c, OLD), {c: Behaviour(bench=FAST),
                                                      b: Behaviour(bench=PLAIN)}))
    assert not deploy(monkeypatch, world, AGX).failed
    assert report(on)["outcome"] == "kept"
    monkeypatch.setenv("SPECDEC_RUN_ID", "t2")
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    world = live(world)
    # the API answers only with the fleet's key (its proxy's 401 otherwise)
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        _api_get)
    assert not deploy(monkeypatch, world, AGX).failed
    rep = report(on.parent / "t2")
    assert rep["outcome"] == "unchanged" and rep["previous_outcome"] == "kept"
    assert rep["carried_from"] == "t1" and rep["candidate"]["c1"]["throughput_tok_s"] == 40.0
    assert "| unchanged (kept) |" in (on.parent / "t2" / "summary.md").read_text()


def test_reverify_data_key_re_benchmarks(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c, b = hp.rendered.release_id, hp.baseline.release_id  # type: ignore[union-attr]
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    world = live(world)
    fake = FakeHost(c, c, (c,), {c: Behaviour(bench=FAST), b: Behaviour(bench=PLAIN)})
    use_host(monkeypatch, fake)
    r = deploy(monkeypatch, world, {**AGX, "specdec_reverify": True})
    assert not r.failed
    assert fake.benched == [c, b]
    assert report(on)["outcome"] == "kept"


def test_held_lock_refuses_before_any_change(agx_world, monkeypatch, on):
    held = ("@@specdec-lock held b001 1000\ncontrol=other-node\npid=1\nrun=r0\n"
            "token=abc\nboot=b001\nrenewed=990\nlease=900\nseen=\n")
    world = live(agx_world)
    use_host(monkeypatch, FakeHost(None, None, (), {}))
    r = deploy_failing(monkeypatch, world, AGX, {
        **FAILS, "deploy.lock 2>/dev/null": held.splitlines()})
    assert len(r.commands) == 2  # the lock attempt and the one-line failure; nothing else
    assert "is held by run r0 (pid 1 on other-node, renewed 10s ago)" in r.commands[1]
    rep = report(on)
    assert rep["outcome"] == "failed" and rep["phase"] == "lock"


def test_token_nowhere_at_full_verbosity(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    world = live(agx_world, after=release.ReleaseState(c, OLD, (c, OLD)))
    b = hp.baseline.release_id  # type: ignore[union-attr]
    use_host(monkeypatch, FakeHost(c, OLD, (c, OLD), {c: Behaviour(bench=FAST),
                                                      b: Behaviour(bench=PLAIN)}))
    r = deploy(monkeypatch, world, AGX, verbose=True)
    assert not r.failed and report(on)["outcome"] == "kept"
    assert TOKEN not in r.output
    assert not any(TOKEN in cmd for cmd in r.commands if "hf_token" not in cmd)
    for p in on.rglob("*"):
        if p.is_file():
            assert TOKEN not in p.read_text(), p


def test_fake_connector_skips_lock_and_verify_by_default(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_deploy(monkeypatch, agx_world, AGX)
    assert not any("deploy.lock" in c for c in r.commands)
    assert not r.failed


@pytest.mark.parametrize(("current", "expected"), [
    ("bbb", ["flock -w 120 /var/lib/specdec/.guard.lock sh -c 'ln -sfn releases/aaa",
             "rm -f /var/lib/specdec/pending", "systemctl daemon-reload",
             "systemctl restart specdec-engine.service"]),
    ("aaa", []),
])
def test_recover_deploy_returns_to_last_good(monkeypatch, current, expected):
    import runpy

    from pyinfra.api import Config, Inventory
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operations import run_ops
    from pyinfra.context import ctx_host, ctx_state

    from tests.deploy.harness import ROOT

    st = release.ReleaseState(current=current, last_good="aaa", releases=("bbb", "aaa"))
    monkeypatch.setattr("pyinfra.api.host.Host.get_fact", lambda self, cls, *a, **k: (
        st if cls is rfacts.SpecdecReleases else None if cls.__name__ == "File"  # no aux units
        else {"specdec-engine.service": True}))
    inv = Inventory(([("@fake/x", {"fake_delay": 0})], {}))
    state = State(inventory=inv, config=Config())
    state.cwd = str(ROOT)
    connect_all(state)
    h = inv.get_host("@fake/x")
    with ctx_state.use(state), ctx_host.use(h):
        runpy.run_path(str(ROOT / "deploys" / "recover.py"), run_name="deploy")
    run_ops(state)
    cmds = list(h.connector.executed_commands)
    assert len(cmds) == len(expected)
    for cmd, want in zip(cmds, expected, strict=True):
        assert cmd.startswith(want)


def test_bench_settings_from_environment(monkeypatch):
    from specdec.roles.common import DeployError

    monkeypatch.setenv("SPECDEC_BENCH_REQUESTS", "8")
    monkeypatch.setenv("SPECDEC_BENCH_TIMEOUT", "45")
    s = VERIFY_MOD.bench_settings()
    assert (s.requests, s.max_tokens, s.timeout_s) == (8, 48, 45.0)
    monkeypatch.setenv("SPECDEC_BENCH_BASELINE_REQUESTS", "3")
    monkeypatch.setenv("SPECDEC_BENCH_RAMP_TOKENS", "0")
    s = VERIFY_MOD.bench_settings()
    assert (s.baseline_requests, s.ramp_tokens) == (3, 0)
    monkeypatch.setenv("SPECDEC_BENCH_REQUESTS", "lots")
    with pytest.raises(DeployError, match=r"\$SPECDEC_BENCH_REQUESTS='lots'"):
        VERIFY_MOD.bench_settings()


@pytest.mark.parametrize("data", [AGX, {**AGX, "specdec_runtime": "native"}])
def test_a_converged_host_costs_one_read_and_the_lock(agx_world, monkeypatch, on, data):
    """pyinfra runs operations in lockstep, so every read of the host while executing costs the
    whole run the slowest host's round trip: on a converged, verified host the re-run reads
    the host once (every fact the deploy planned from, in one command, under the lock) and
    sends the lock's two commands; the operations are answered from that read."""
    hp = _hp(agx_world, data)
    c = hp.rendered.release_id
    world = agx_world.with_jetson(agx_world.identity.device)
    world = converged(world, hp, TOKEN)
    world.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
    world = live(world)
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        _api_get)
    r = deploy(monkeypatch, world, data)
    assert not r.failed, r.output
    assert report(on)["outcome"] == "unchanged"
    executing = [name for name, live_ in world.fact_reads if live_]
    assert executing == ["FactBatch"], executing
    assert len(r.commands) == 2, r.commands  # the lock, taken and released
    assert "deploy.lock.new." in r.commands[0] and "deploy.lock.released." in r.commands[1]
    # and in prepare each fact is read once (the deploy reads the release state in 4 places)
    prepare = [name for name, live_ in world.fact_reads if not live_]
    assert prepare.count("SpecdecReleases") == 1, prepare


def test_any_failed_operation_releases_the_lock(agx_world, monkeypatch, on):
    world = live(agx_world)
    use_host(monkeypatch, FakeHost(None, None, (), {}))
    r = deploy_failing(monkeypatch, world, AGX, {
        **ACQUIRED, "docker pull": {"success": False, "stderr": "pull failed"}})
    # the pull renews the deploy lock's lease while it runs
    i_pull = next(i for i, c in enumerate(r.commands) if "docker pull" in c)
    assert " renewed " in r.commands[i_pull] and "& renewer=$!" in r.commands[i_pull]
    assert "rm -rf /var/lib/specdec/deploy.lock" in r.commands[i_pull + 1]
    assert len(r.commands) == i_pull + 2  # nothing else ran on the failed host


@dataclass
class MovedWorld(LiveWorld):
    """Another rollout switched the host between prepare and the lock."""

    def fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is rfacts.SpecdecReleases and self.states and self.states[0].is_executing:
            return self.after
        return super().fact(cls, *args, **kwargs)


def test_release_state_moved_before_the_lock_fails_before_any_change(agx_world, monkeypatch,
                                                                     on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    world = MovedWorld(**{**agx_world.__dict__,
                          "releases": release.ReleaseState(OLD, OLD, (OLD,)),
                          "after": release.ReleaseState("0th3r0th3r00", OLD,
                                                        ("0th3r0th3r00", OLD))})
    use_host(monkeypatch, FakeHost(None, None, (), {}))
    r = deploy_failing(monkeypatch, world, AGX)
    # the lock, its release, the one-line failure: nothing else, and not serve's activation
    assert len(r.commands) == 3, r.commands
    assert "deploy.lock.new." in r.commands[0] and "deploy.lock.released." in r.commands[1]
    assert ("the release state changed after this deploy planned (current 0ld0ld0ld0ld -> "
            "0th3r0th3r00, last-good 0ld0ld0ld0ld -> 0ld0ld0ld0ld)") in r.commands[2]
    assert not any(f"releases/{c}" in x for x in r.commands)
    rep = report(on)
    assert rep["outcome"] == "failed" and rep["phase"] == "lock"


def test_unchanged_release_state_passes_the_recheck():
    from specdec.roles.lock import moved

    st = release.ReleaseState("a", "b", ("a", "b"), {"a": {"outcome": "kept"}})
    assert moved(st, release.ReleaseState("a", "b", ("b", "a"), {"a": {"outcome": "kept"}})) \
        is None
    assert moved(st, release.ReleaseState("a", "b", ("a", "b", "c"), st.decisions)) == (
        "the releases or their recorded decisions changed")


def test_a_watch_mark_re_verifies_once_and_is_cleared(agx_world, monkeypatch, on):
    """`specdec watch` marked the host (specdec_watch: {action: reverify}): the next deploy of
    the converged, verified host benchmarks and gates it again (as specdec_reverify would),
    records the mark in the report and clears it; the deploy after that has nothing to do."""
    from specdec.watch import marks

    hp = _hp(agx_world, AGX)
    c, b = hp.rendered.release_id, hp.baseline.release_id  # type: ignore[union-attr]
    monkeypatch.setattr("specdec.verify.verifier.http_get",
                        lambda url, timeout, key=None, ca_file=None: (200, ""))
    root = on.parent

    def converged_world() -> LiveWorld:
        w = converged(agx_world, hp, TOKEN)
        w.releases = release.ReleaseState(current=c, last_good=c, releases=(c,))
        return live(w)

    marks.mark(root, "@fake/orin-1", {"by": "specdec watch", "verdict": "not paying"})
    fake = FakeHost(c, c, (c,), {c: Behaviour(bench=FAST), b: Behaviour(bench=PLAIN)})
    use_host(monkeypatch, fake)
    assert not deploy(monkeypatch, converged_world(), AGX).failed
    assert fake.benched == [c, b]
    rep = report(on)
    assert rep["outcome"] == "kept" and rep["watch_mark"]["verdict"] == "not paying"
    assert marks.get(root, "@fake/orin-1") is None

    def no_io(conn, spec):
        raise AssertionError("an unchanged, unmarked host must not be verified again")

    monkeypatch.setattr(VERIFY_MOD, "make_io", no_io)
    monkeypatch.setenv("SPECDEC_RUN_ID", "t2")
    assert not deploy(monkeypatch, converged_world(), AGX).failed
    assert report(on.parent / "t2")["outcome"] == "unchanged"


@dataclass
class GrownWorld(LiveWorld):
    """Once the verify step has benchmarked, the host holds more releases than are kept (the
    tune's points): the step prunes them itself, so the next run has nothing to change."""

    fake: Any = None
    grown: release.ReleaseState | None = None

    def fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is rfacts.SpecdecReleases and self.fake is not None and self.fake.benched:
            return self.grown
        return super().fact(cls, *args, **kwargs)


def test_releases_the_verify_step_made_are_pruned_in_the_same_run(agx_world, monkeypatch, on):
    hp = _hp(agx_world, AGX)
    c = hp.rendered.release_id
    points = tuple(f"{i:012x}" for i in range(1, 7))  # newest first, after c
    fake = FakeHost(c, OLD, (c, OLD), {c: Behaviour(bench=FAST)})
    fake.behaviour[hp.baseline.release_id] = Behaviour(bench=PLAIN)  # type: ignore[union-attr]
    use_host(monkeypatch, fake)
    world = GrownWorld(**live(agx_world, after=release.ReleaseState(c, OLD, (c, OLD))).__dict__,
                       fake=fake, grown=release.ReleaseState(c, c, (c, *points, OLD)))
    r = deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    assert report(on)["outcome"] == "kept"
    # the 5 newest besides current and last-good (both c) stay: the oldest point and OLD go
    assert release.remove([points[5], OLD]) in r.commands, r.commands
