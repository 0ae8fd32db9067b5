"""The deploy lock under contention: N concurrent takeovers of one stale lock, for real.

Each trial plants a stale lock in a fresh directory, starts N ``sh`` processes running the real
`specdec.host.lock.takeover_command`, releases them at once through a FIFO, and counts the winners:
exactly one, every time, and the lock on disk is that winner's. Two kinds of stale lock: one
whose ``info`` names its holder, and one without ``info`` (a taker that died mid-way), which
the takers must adopt first. Each kind runs ``SPECDEC_RACE_TRIALS`` trials (default 400) both
under ``flock`` (the production command) and with the bare rename protocol (no ``flock``: what
keeps it correct on its own). ``SPECDEC_RACE_TAKERS`` (default 4) sets N; the counts are
printed (``-s``). The takeover of an older ``main`` (check, ``rm -rf``, ``mkdir``) had 118
double winners in 400 trials of 4 under this same harness, and the takeover of a lock without
``info`` before adoption (check it is old, rename it away) had 45 in 400 without ``flock``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specdec.host import lock

TRIALS = int(os.environ.get("SPECDEC_RACE_TRIALS", "400"))
TAKERS = int(os.environ.get("SPECDEC_RACE_TAKERS", "4"))
STALE = lock.LockInfo("gone-node", 1, "dead-run", "deadbeefdeadbeef", "0" * 32, "0" * 8, 1, 900)


def _trial(root: Path, serialize: bool, with_info: bool) -> tuple[int, bool]:
    """One race: (number of winners, whether the lock on disk is the single winner's)."""
    d = root / "state"
    (d / "deploy.lock").mkdir(parents=True)
    if with_info:
        (d / "deploy.lock" / "info").write_text(STALE.to_text())
    else:  # what a taker that died after claiming the info leaves
        (d / "deploy.lock" / "claim.0123456789abcdef").write_text(STALE.to_text())
    gate = root / "go"
    os.mkfifo(gate)
    takers = [lock.new_lock(f"r{i}") for i in range(TAKERS)]
    stale = STALE if with_info else None
    # `: < go` blocks in open() until the FIFO has a writer: every taker starts together.
    procs = [subprocess.Popen(
        ["sh", "-c", f": < {gate}; " + lock.takeover_command(stale, t, str(d), serialize)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for t in takers]
    time.sleep(0.02)
    fd = os.open(gate, os.O_WRONLY)
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        os.close(fd)
    won = [t for t, out in zip(takers, outs, strict=True)
           if lock.parse_acquire(out.splitlines()).acquired]
    on_disk = (d / "deploy.lock" / "info").read_text() if (d / "deploy.lock").is_dir() else ""
    consistent = len(won) == 1 and f"token={won[0].token}" in on_disk and not [
        p for p in d.iterdir() if p.name not in ("deploy.lock", lock.FLOCK_FILE)]
    shutil.rmtree(root)
    return len(won), consistent


@pytest.mark.parametrize("with_info", [True, False], ids=["info", "no-info"])
@pytest.mark.parametrize("serialize", [True, False], ids=["flock+rename", "rename-only"])
def test_concurrent_takeovers_have_exactly_one_winner(tmp_path: Path, serialize: bool,
                                                      with_info: bool) -> None:
    trials = TRIALS
    winners: dict[int, int] = {}
    inconsistent = 0
    # two trials at a time (each its own directory and takers): the machine's two cores
    with ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda i: _trial(tmp_path / str(i), serialize, with_info),
                        range(trials))
        for n, ok in done:
            winners[n] = winners.get(n, 0) + 1
            inconsistent += not ok
    double = sum(c for n, c in winners.items() if n > 1)
    print(f"\nlock race ({'flock+rename' if serialize else 'rename-only'}, "
          f"{'info' if with_info else 'no info'}): {trials} trials x "
          f"{TAKERS} concurrent takeovers: winners per trial {dict(sorted(winners.items()))}; "
          f"double winners: {double}; no winner: {winners.get(0, 0)}")
    assert double == 0
    assert winners == {1: trials} and inconsistent == 0
