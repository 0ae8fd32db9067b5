"""specdec.host.release: the shell it builds, run for real against a temporary state directory."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from specdec.host import layout, release


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("specdec.host.layout.STATE_DIR", str(tmp_path))
    monkeypatch.setattr("specdec.host.layout.CURRENT", str(tmp_path / "current"))
    monkeypatch.setattr("specdec.host.layout.LAST_GOOD", str(tmp_path / "last-good"))
    monkeypatch.setattr("specdec.host.layout.RELEASES_DIR", str(tmp_path / "releases"))
    return tmp_path


def sh(cmd: str) -> list[str]:
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30,
                         check=True)
    return out.stdout.splitlines()


def make_releases(state_dir: Path, ids: list[str]) -> None:
    """Create releases oldest first (distinct mtimes)."""
    now = time.time()
    for i, rid in enumerate(ids):
        d = state_dir / "releases" / rid
        d.mkdir(parents=True)
        os.utime(d, (now - 100 + i, now - 100 + i))


def test_activate_is_atomic_switch(state_dir):
    make_releases(state_dir, ["aaa", "bbb"])
    assert release.activate("aaa") == (
        f"flock -w 120 {state_dir}/.guard.lock sh -c 'ln -sfn releases/aaa "
        f"{state_dir}/current.activate.tmp && "
        f"mv -T {state_dir}/current.activate.tmp {state_dir}/current'"
    )
    sh(release.activate("aaa"))
    assert os.readlink(state_dir / "current") == "releases/aaa"
    sh(release.activate("bbb"))  # replaces the link, not a link inside the old target
    assert os.readlink(state_dir / "current") == "releases/bbb"
    assert not (state_dir / "releases" / "aaa" / "bbb").exists()
    assert not (state_dir / "current.activate.tmp").exists()
    sh(release.switch(layout.LAST_GOOD, "aaa", "mark"))
    assert os.readlink(state_dir / "last-good") == "releases/aaa"


def test_read_state_roundtrip(state_dir):
    assert release.parse_state(sh(release.read_state())) == release.ReleaseState()
    make_releases(state_dir, ["old", "mid", "new"])
    (state_dir / "releases" / "new" / "decision.json").write_text(
        json.dumps({"outcome": "disabled", "active": "old"}, indent=2))
    sh(release.activate("new"))
    sh(release.switch(layout.LAST_GOOD, "old", "mark"))
    st = release.parse_state(sh(release.read_state()))
    assert st.current == "new" and st.last_good == "old"
    assert st.releases[0] == "new" and set(st.releases) == {"old", "mid", "new"}
    assert st.decisions == {"new": {"outcome": "disabled", "active": "old"}}


def test_prune_keeps_the_newest_and_the_protected(state_dir):
    ids = [f"r{i}" for i in range(9)]  # r8 newest
    make_releases(state_dir, ids)
    newest_first = list(reversed(ids))
    doomed = release.to_prune(newest_first, 5, ["r0", None])
    assert doomed == ["r3", "r2", "r1"]
    sh(release.remove(doomed))
    left = sorted(p.name for p in (state_dir / "releases").iterdir())
    assert left == ["r0", "r4", "r5", "r6", "r7", "r8"]


def test_bad_ids_rejected():
    for bad in ("../etc", "a b", "", "x;rm -rf /"):
        with pytest.raises(ValueError):
            release.activate(bad)


def test_desired_release_ignores_malformed_decision():
    st = release.ReleaseState(decisions={"c": {"outcome": "disabled", "active": "../x"}})
    assert release.desired_release("c", st) == "c"
    st = release.ReleaseState(decisions={"c": {"outcome": "kept", "active": "b"}})
    assert release.desired_release("c", st) == "c"
