"""``specdec report --merge``: the reports of one run's shards (one directory per control
node) as one run: every host once, in the rollout's order, with its summary and page."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from specdec.errors import RolloutError
from specdec.report.fleet import doc_order, load_reports, safe_name, write_fleet

__all__ = ["merge_runs"]

_NOT_DONE = ("skipped",)


def merge_runs(parts: Sequence[Path], out: Path) -> list[str]:
    """Copy each host's report from ``parts`` into ``out``; refuse a host that two parts
    deployed (a report other than ``skipped`` in both). Returns the hosts, in order."""
    if len(parts) < 2:
        raise RolloutError("--merge: give the run directories of at least two shards")
    chosen: dict[str, tuple[Path, dict[str, object]]] = {}
    order: dict[str, int] = {}
    for part in parts:
        if not part.is_dir():
            raise RolloutError(f"--merge: {part} is not a run directory")
        for h, i in doc_order(part).items():
            order.setdefault(h, i)
        for rep in load_reports(part):
            host = str(rep["host"])
            have = chosen.get(host)
            if have is not None and rep.get("outcome") not in _NOT_DONE and \
                    have[1].get("outcome") not in _NOT_DONE:
                raise RolloutError(f"--merge: host {host} was deployed by two shards ({have[0]} "
                                   f"and {part}); a host is done once")
            if have is None or have[1].get("outcome") in _NOT_DONE:
                chosen[host] = (part, rep)
    out.mkdir(parents=True, exist_ok=True)
    hosts = sorted(chosen, key=lambda h: (order.get(h, 10**6), h))
    for h in hosts:
        part, _ = chosen[h]
        shutil.copyfile(part / f"{safe_name(h)}.json", out / f"{safe_name(h)}.json")
    (out / "hosts.json").write_text(json.dumps(hosts) + "\n")
    write_fleet(out)
    return hosts
