"""One fleet rolled out by N control nodes (``specdec rollout --shard I/N``).

**Mapping.** Every shard computes the same global plan from the same inventory: the deploy
units in inventory order (a serving group is one unit, never split) and, when ``--batches``
has more than one item, the global canary: the first batch of that order. A unit belongs to
shard ``sha256(name) mod N`` (a group by its group name, any other host by its name), so a
host's shard does not depend on the inventory's order or size; the canary's units go to the
shard of its first unit, which runs the canary alone. Shard I then batches its own units with
the rest of ``--batches``.

**Shared through the fleet store** (`specdec.fleet.store`, keys under ``runs/<run-id>/``):
``meta`` (the global plan's digest: every shard must agree), ``canary`` (the verdict; the other
shards wait for it before their first batch, and skip everything when it failed), ``budget``
(hosts done, failed, unreachable across shards: after each batch the *fleet-wide* shares are
held to ``--max-fail-percent`` / ``--max-unreachable-percent``), ``stop`` (set by the shard
that exceeded a budget; every shard stops before its next batch), ``claims/<host>`` (a host is
deployed by the shard that claimed it, never twice). The tune cache is fleet state: entries
live under ``tune/`` and are pulled into the control node's tune cache before each batch and
pushed after it (the first entry for a key wins).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specdec.config.hygiene import show
from specdec.config.rawinput import ascii_int
from specdec.errors import RolloutError
from specdec.fleet.batches import Batch, batch_units
from specdec.fleet.store import FleetStore, update_json
from specdec.plan.groups import Group

__all__ = ["Coordinator", "Shard", "ShardCoordinator", "parse_shard", "shard_batches",
           "shard_units",
           "unit_shard"]


_TUNE_KEY = re.compile(r"tune/[0-9a-f]{6,64}\.json")


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    i_text, sep, n_text = text.partition("/")
    i, n = ascii_int(i_text), ascii_int(n_text)
    if not sep or i is None or n is None or not 1 <= i <= n <= 1024:
        raise RolloutError(f"--shard={show(text)}: expected I/N with 1 <= I <= N <= 1024 "
                           "(e.g. 1/2)")
    return Shard(i, n)


def _unit_name(unit: Sequence[str], groups: dict[str, Group]) -> str:
    g = groups.get(unit[0])
    return f"group:{g.name}" if g is not None else unit[0]


def unit_shard(unit: Sequence[str], groups: dict[str, Group], count: int) -> int:
    """The 1-based shard of a deploy unit: stable for its name."""
    digest = hashlib.sha256(_unit_name(unit, groups).encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def shard_batches(order: Sequence[Sequence[str]], groups: dict[str, Group], shard: Shard,
                  batches: Sequence[Batch], canary: bool) -> tuple[list[list[str]], bool, bool]:
    """This shard's batches, whether it runs the global canary, and whether there is one
    (``canary``: the run has one; a resume has none, its canary ran before)."""
    glob = batch_units(order, batches) if canary and len(batches) > 1 else []
    first = glob[0] if glob else []
    mine, runs_canary = shard_units(order, first, groups, shard)
    rest = [u for u in mine if u[0] not in set(first)]
    later = batch_units(rest, batches[1:] if first else batches) if rest else []
    return ([list(first)] if runs_canary else []) + later, runs_canary, bool(first)


def shard_units(order: Sequence[Sequence[str]], canary: Sequence[str],
                groups: dict[str, Group], shard: Shard) -> tuple[list[list[str]], bool]:
    """This shard's units (canary units first when it runs the canary) and whether it runs
    the canary."""
    canary_set = set(canary)
    runs_canary = bool(canary) and unit_shard(order[0], groups, shard.count) == shard.index
    mine = [list(u) for u in order if u[0] not in canary_set
            and unit_shard(u, groups, shard.count) == shard.index]
    if runs_canary:
        mine = [list(u) for u in order if u[0] in canary_set] + mine
    return mine, runs_canary


class Coordinator:
    """A single control node: nothing shared, every batch runs."""

    @property
    def label(self) -> str:
        return ""

    def before_batch(self, k: int, batch: list[str]) -> tuple[list[str], str | None]:
        return batch, None

    def after_batch(self, k: int, batch: list[str], failed: int, unreachable: int,
                    canary_failed: bool) -> str | None:
        return None


def _exceeds(part: int, whole: int, limit: float) -> bool:
    return whole > 0 and part * 100.0 / whole > limit


@dataclass
class ShardCoordinator(Coordinator):
    store: FleetStore
    run_id: str
    shard: Shard
    runs_canary: bool
    has_canary: bool
    digest: str  # of the global plan: every shard must agree
    tune_dir: Path
    max_fail_percent: float
    max_unreachable_percent: float
    canary_timeout: float = 6 * 3600.0
    poll: float = 2.0
    say: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    claimed_elsewhere: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.shard.label

    def _k(self, name: str) -> str:
        return f"runs/{self.run_id}/{name}"

    def register(self) -> None:
        meta = json.dumps({"digest": self.digest, "shards": self.shard.count}, sort_keys=True)
        if not self.store.create(self._k("meta"), meta):
            have = self.store.get(self._k("meta"))
            if have != meta:
                raise RolloutError(f"--shard={self.shard.label}: run {self.run_id!r} in the "
                                   f"fleet store {self.store.describe()} was started with "
                                   f"another inventory, --limit, --batches or shard count "
                                   f"({have}); every shard must be given the same")

    # -- tune cache ---------------------------------------------------------------------

    def pull_tune(self) -> None:
        """The store's tune entries into the control node's cache. A key is a file name here,
        and the store anyone with access to it writes: only ``tune/<hex id>.json`` (the names
        `push_tune` gives) is taken; any other is skipped with a line."""
        for key, text in self.store.list("tune").items():
            if not _TUNE_KEY.fullmatch(key):
                self.say(f"fleet store {self.store.describe()}: ignored {show(key)} (not a "
                         "tune cache entry name)")
                continue
            path = self.tune_dir / key.split("/")[-1]
            try:
                if path.read_text() == text:
                    continue
            except OSError:
                pass
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            tmp.replace(path)

    def push_tune(self) -> None:
        if not self.tune_dir.is_dir():
            return
        for path in sorted(self.tune_dir.glob("*.json")):
            self.store.create(f"tune/{path.name}", path.read_text())

    # -- batches ------------------------------------------------------------------------

    def _stopped(self) -> str | None:
        return self.store.get(self._k("stop"))

    def _wait_canary(self) -> str | None:
        deadline = self.clock() + self.canary_timeout
        said = False
        while True:
            verdict = self.store.get(self._k("canary"))
            if verdict is not None:
                doc = json.loads(verdict)
                if doc.get("ok"):
                    return None
                return f"the canary failed on shard {doc.get('shard')}: {doc.get('why')}"
            stop = self._stopped()
            if stop:
                return stop
            if self.clock() > deadline:
                raise RolloutError(f"shard {self.shard.label}: no canary verdict in the fleet "
                                   f"store after {self.canary_timeout:g}s")
            if not said:
                self.say(f"specdec rollout {self.run_id} [shard {self.shard.label}]: waiting "
                         "for the canary's verdict")
                said = True
            self.sleep(self.poll)

    def before_batch(self, k: int, batch: list[str]) -> tuple[list[str], str | None]:
        stop = self._stopped()
        if stop:
            return [], stop
        if k == 1 and self.has_canary and not self.runs_canary:
            why = self._wait_canary()
            if why:
                return [], why
        mine = []
        for h in batch:
            if self.store.create(self._k(f"claims/{h}"), self.shard.label) or \
                    self.store.get(self._k(f"claims/{h}")) == self.shard.label:
                mine.append(h)
            else:
                self.claimed_elsewhere[h] = self.store.get(self._k(f"claims/{h}")) or "?"
                self.say(f"specdec rollout [shard {self.shard.label}]: {h} is claimed by "
                         f"shard {self.claimed_elsewhere[h]}; not deployed here")
        self.pull_tune()
        return mine, None

    def after_batch(self, k: int, batch: list[str], failed: int, unreachable: int,
                    canary_failed: bool) -> str | None:
        self.push_tune()
        if k == 1 and self.runs_canary:
            why = f"{failed} failed, {unreachable} unreachable of {len(batch)}"
            self.store.put(self._k("canary"), json.dumps(
                {"ok": not canary_failed, "shard": self.shard.label, "hosts": batch,
                 "why": why}, sort_keys=True))
        total = update_json(self.store, self._k("budget"), lambda v: {
            "done": (v or {}).get("done", 0) + len(batch),
            "failed": (v or {}).get("failed", 0) + failed,
            "unreachable": (v or {}).get("unreachable", 0) + unreachable})
        stop = None
        if k == 1 and self.runs_canary and canary_failed:
            stop = f"the canary failed on shard {self.shard.label} ({why})"
        elif _exceeds(total["failed"], total["done"], self.max_fail_percent):
            stop = (f"fleet-wide {total['failed']}/{total['done']} hosts failed (more than "
                    f"--max-fail-percent {self.max_fail_percent:g}%)")
        elif _exceeds(total["unreachable"], total["done"], self.max_unreachable_percent):
            stop = (f"fleet-wide {total['unreachable']}/{total['done']} hosts unreachable (more "
                    f"than --max-unreachable-percent {self.max_unreachable_percent:g}%)")
        if stop:
            self.store.create(self._k("stop"), f"stopped by shard {self.shard.label}: {stop}")
            return self._stopped()
        return None
