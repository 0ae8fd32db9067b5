"""The gate and tune sections' results file: one JSON line per finished unit of work (a gate
run, a truth block, a tuner run, a sweep block, the idle check), tagged with the commit, the
configuration and the seed. A rerun with the same file skips what is done; the report is
printed from the file alone (pure, apart from reading and appending the file)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

DEFAULT = Path("/var/cache/specdec-lab/realbench/results.jsonl")
KINDS = ("idle", "gate", "truth", "tune", "sweep")


@dataclass
class Results:
    """The records of one results file (``path`` None: in memory only, for tests)."""

    path: Path | None
    records: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def load(path: Path | None) -> Results:
        """Every complete line of ``path`` (a line cut short by a killed run is skipped)."""
        out = Results(path)
        if path is None or not path.exists():
            return out
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") in KINDS:
                out.records.append(rec)
        return out

    def append(self, rec: Mapping[str, Any]) -> dict[str, Any]:
        """Add one finished unit (written and flushed before this returns)."""
        if rec.get("kind") not in KINDS or "config" not in rec or "index" not in rec:
            raise ValueError(f"a record needs kind ({'/'.join(KINDS)}), config and index: "
                             f"{sorted(rec)}")
        if self.has(str(rec["kind"]), str(rec["config"]), int(rec["index"])):
            raise ValueError(f"already recorded: {rec['kind']} {rec['config']} #{rec['index']}")
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **rec}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps(out, separators=(",", ":")) + "\n"
            with open(self.path, "a+b") as f:
                # after a line a killed run cut short: a line of its own, not glued to it
                f.write((("\n" if _cut(f) else "") + line).encode())
                f.flush()
        self.records.append(out)
        return out

    def of(self, kind: str, config: str | None = None) -> list[dict[str, Any]]:
        """The records of ``kind`` (and ``config``), in index order."""
        got = [r for r in self.records if r["kind"] == kind
               and (config is None or r["config"] == config)]
        return sorted(got, key=lambda r: int(r["index"]))

    def has(self, kind: str, config: str, index: int) -> bool:
        return any(int(r["index"]) == index for r in self.of(kind, config))

    def next_index(self, kind: str, config: str) -> int:
        """The first index not recorded yet (what a resumed run does next)."""
        done = {int(r["index"]) for r in self.of(kind, config)}
        i = 0
        while i in done:
            i += 1
        return i

    def count(self, kind: str, config: str) -> int:
        return len(self.of(kind, config))


def _cut(f: BinaryIO) -> bool:
    """Whether the file ends inside a line."""
    end = f.seek(0, 2)
    if not end:
        return False
    f.seek(end - 1)
    return f.read(1) != b"\n"


def tally(records: Iterable[Mapping[str, Any]], key: str) -> str:
    """How many records have each value of ``key``, e.g. ``disable (19), keep (1)``."""
    n: dict[str, int] = {}
    for r in records:
        n[str(r.get(key))] = n.get(str(r.get(key)), 0) + 1
    return ", ".join(f"{k} ({v})" for k, v in sorted(n.items()))


def tags(records: Iterable[Mapping[str, Any]]) -> str:
    """Which commits and seeds a figure rests on, e.g. ``commits abc1234 (12), seeds 7 (12)``."""
    recs = list(records)
    if not recs:
        return "no records"
    return f"commits {tally(recs, 'commit')}; seeds {tally(recs, 'seed')}"


def obs_of(result: Mapping[str, Any], level: int) -> list[list[Any]]:
    """A bench result's successful requests at ``level`` as ``[category, output tokens,
    end-to-end s, TPOT s or None]`` (what the truth and the sweep are computed from)."""
    lvl = (result.get("concurrency") or {}).get(str(level)) or {}
    out: list[list[Any]] = []
    for r in lvl.get("requests") or []:
        if not isinstance(r, Mapping) or r.get("error") is not None:
            continue
        tok, e2e, tpot = r.get("output_tokens"), r.get("e2el_ms"), r.get("tpot_ms")
        if not tok or not e2e:
            continue
        out.append([str(r.get("category") or "all"), float(tok), float(e2e) / 1000,
                    float(tpot) / 1000 if tpot else None])
    return out


def arms_obs(results: Mapping[str, Mapping[str, Any]], levels: Sequence[int]
             ) -> dict[str, dict[str, list[list[Any]]]]:
    """``{arm: {level: obs}}`` of one block's bench results (``{arm: result}``)."""
    return {arm: {str(c): obs_of(res, c) for c in levels} for arm, res in results.items()}
