"""Rollout batches, Ansible-``serial`` style: sizes as counts or percentages, the last
repeating; over deploy units so a serving group is never split; the failure rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdec.config.hygiene import show
from specdec.config.rawinput import ascii_int
from specdec.errors import RolloutError

__all__ = ["Batch", "batch_hosts", "batch_units", "exceeds", "parse_batches"]


@dataclass(frozen=True)
class Batch:
    count: int | None = None
    percent: int | None = None

    def size(self, total: int) -> int:
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, total * self.percent // 100)


def parse_batches(spec: str) -> list[Batch]:
    """``"1,25%,100%"`` → batches; a bad item is a one-line `RolloutError`."""
    items = [x.strip() for x in spec.split(",")]
    if not spec.strip() or any(not x for x in items):
        raise RolloutError(f"--batches={show(spec)}: expected a comma-separated list like "
                           "1,25%,100%")
    out: list[Batch] = []
    for item in items:
        if item.endswith("%"):
            num = ascii_int(item[:-1], 3)
            if num is None or not 1 <= num <= 100:
                raise RolloutError(f"--batches={show(spec)}: {show(item)} is not a percentage in "
                                   "1%..100%")
            out.append(Batch(percent=num))
        else:
            count = ascii_int(item)
            if count is None or count < 1:
                raise RolloutError(f"--batches={show(spec)}: {show(item)} is not a host count >= 1 "
                                   "or a percentage like 25%")
            out.append(Batch(count=count))
    return out


def batch_hosts(hosts: Sequence[str], batches: Sequence[Batch]) -> list[list[str]]:
    """Split ``hosts`` (rollout order) into batches; the last batch size repeats."""
    if not batches:
        raise RolloutError("--batches: no batches")
    out: list[list[str]] = []
    i = 0
    total = len(hosts)
    k = 0
    while i < total:
        size = batches[min(k, len(batches) - 1)].size(total)
        out.append(list(hosts[i:i + size]))
        i += size
        k += 1
    return out


def batch_units(units: Sequence[Sequence[str]], batches: Sequence[Batch]) -> list[list[str]]:
    """As `batch_hosts`, over deploy units (a Dynamo serving group's members, or one host): a
    batch takes whole units until it holds its size in hosts (at least one unit), so a group is
    never split across batches (a canary batch of 1 is a whole group when a group comes first)."""
    if not batches:
        raise RolloutError("--batches: no batches")
    total = sum(len(u) for u in units)
    out: list[list[str]] = []
    i, k = 0, 0
    while i < len(units):
        size = batches[min(k, len(batches) - 1)].size(total)
        batch: list[str] = []
        while i < len(units) and (not batch or len(batch) + len(units[i]) <= size):
            batch.extend(units[i])
            i += 1
        out.append(batch)
        k += 1
    return out


def exceeds(failed: int, size: int, max_fail_percent: float) -> bool:
    """Ansible's rule: stop when the failed share of the batch is *above* the limit."""
    return size > 0 and failed * 100.0 / size > max_fail_percent
