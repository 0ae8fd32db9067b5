"""Reverify marks on the control node and ``specdec rollout --marked``."""

from __future__ import annotations

from pathlib import Path

from specdec.cli import main
from specdec.fleet import rollout as ro
from specdec.watch import marks
from tests.unit.test_rollout import FakePyinfra


def test_first_mark_wins_and_clears(tmp_path: Path) -> None:
    p = marks.mark(tmp_path, "orin-nano-01", {"verdict": "not paying", "since": "t1"})
    marks.mark(tmp_path, "orin-nano-01", {"verdict": "not paying", "since": "t2"})
    assert p == tmp_path / "cache" / "orin-nano-01" / "reverify.json"
    assert marks.get(tmp_path, "orin-nano-01")["since"] == "t1"  # type: ignore[index]
    assert marks.marked(tmp_path, ["agx-orin-01", "orin-nano-01"]) == ["orin-nano-01"]
    assert marks.clear(tmp_path, "orin-nano-01") and not marks.clear(tmp_path, "orin-nano-01")


def test_rollout_marked_limits_to_the_marked_hosts(tmp_path, capsys, monkeypatch) -> None:
    marks.mark(tmp_path, "orin-nano-02", {"verdict": "not paying"})
    fake = FakePyinfra({})
    real = ro.run_rollout
    monkeypatch.setattr(ro, "run_rollout", lambda plan, **kw: real(plan, fake, say=print, **kw))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path / "r"),
               "--state", str(tmp_path), "--run-id", "m1", "--marked"])
    assert rc == 0
    assert [c[c.index("--limit") + 1] for c in fake.calls] == ["orin-nano-02"]
    assert "marked by specdec watch: orin-nano-02" in capsys.readouterr().out
    # the state is the inventory's, wherever the reports go: the same from another directory
    assert fake.envs[0]["SPECDEC_INVENTORY_STATE"] == str(tmp_path.resolve())


def test_rollout_marked_without_marks_is_refused(tmp_path, capsys) -> None:
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), "--marked"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--marked: no host" in err[0]
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), "--marked",
               "--limit", "orin-nano-01"])
    assert rc == 2 and "--marked and --limit" in capsys.readouterr().err
