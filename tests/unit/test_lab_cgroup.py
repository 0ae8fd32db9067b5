"""Each lab host boots in a cgroup of its own (`specdec_lab.cgroup`): the boot loop moves
itself there first, and teardown removes the subtree deepest first."""

from __future__ import annotations

import subprocess
from pathlib import Path

from specdec_lab import cgroup
from specdec_lab.host import REBOOT_LOOP


def test_the_boot_loop_enters_the_hosts_cgroup_first(tmp_path: Path) -> None:
    assert REBOOT_LOOP.startswith(cgroup.ENTER)
    cg = tmp_path / "specdec-lab" / "ns-a"
    env = cgroup.prepare(cg)
    assert cg.is_dir() and env == {cgroup.ENV: str(cg)}
    # the loop writes its own pid there (a plain file here; cgroup.procs on a cgroup2 mount)
    out = subprocess.run(["/bin/sh", "-c", cgroup.ENTER + "echo $$", "loop"], env=env,
                         capture_output=True, text=True, check=True)
    assert (cg / "cgroup.procs").read_text().strip() == out.stdout.strip()
    # without the variable (no cgroup2 mount) the loop runs where it was started
    assert subprocess.run(["/bin/sh", "-c", cgroup.ENTER + "true"], env={}).returncode == 0


def test_teardown_removes_the_subtree_deepest_first(tmp_path: Path) -> None:
    cg = tmp_path / "specdec-lab" / "ns-a"
    (cg / "system.slice" / "specdec-engine.service").mkdir(parents=True)
    (cg / "init.scope").mkdir()
    assert cgroup.remove(cg) is None
    assert not cg.exists() and not (tmp_path / "specdec-lab").exists()
    assert cgroup.remove(cg) is None  # already gone
    busy = tmp_path / "specdec-lab" / "ns-b"
    busy.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("1\n")  # a cgroupfs directory with a process stays
    assert "remains" in (cgroup.remove(busy) or "")
