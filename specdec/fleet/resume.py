"""``specdec rollout --resume RUN``: what a run left to do.

A run's directory holds ``hosts.json`` (its hosts in rollout order), ``run.json`` (the
parameters it was started with: batches, budgets, ``--data``, ``--limit``, shard count) and a
report per host it reached. The hosts to resume are those whose report is not a converged
outcome (`specdec.fleet.rollout.CONVERGED`), or that have none; the resumed run keeps the run id and
writes its reports over the old ones, each keeping the earlier attempts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdec.errors import RolloutError
from specdec.report.fleet import load_reports

__all__ = ["load_params", "resume_round", "to_resume"]

CONVERGED = ("kept", "disabled", "not_verified", "no_speculation", "unchanged")


def load_params(run_dir: Path) -> dict[str, Any]:
    """``run.json`` of a run (empty for a run started before it existed)."""
    try:
        doc = json.loads((run_dir / "run.json").read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RolloutError(f"--resume: {run_dir / 'run.json'} is unreadable ({exc})") from None
    if not isinstance(doc, dict):
        raise RolloutError(f"--resume: {run_dir / 'run.json'} is not a JSON object")
    return doc


def to_resume(run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The run's hosts in order, and the outcome of each that did not converge (``missing``
    for a host without a report)."""
    try:
        hosts = [str(h) for h in json.loads((run_dir / "hosts.json").read_text())]
    except (OSError, ValueError, TypeError):
        raise RolloutError(f"--resume: {run_dir} has no readable hosts.json (not a run of "
                           "specdec rollout)") from None
    outcomes = {str(r["host"]): str(r.get("outcome")) for r in load_reports(run_dir)}
    left = {h: outcomes.get(h, "missing") for h in hosts
            if outcomes.get(h) not in CONVERGED}
    return hosts, left


def resume_round(run_dir: Path, hosts: list[str]) -> int:
    """How many times these hosts were resumed already, plus one: names this resume in a
    fleet store shared by shards (each shard counts the same)."""
    reps = {str(r["host"]): r for r in load_reports(run_dir)}
    return 1 + max((len(reps[h].get("attempts") or []) for h in hosts if h in reps), default=0)
