"""Facts that hold for a range of engine versions, each with the source it was read from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from specdec.engines.version import Version

__all__ = ["Fact", "FactTable", "first_version"]

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """``value`` holds for ``since <= version < until`` (None: unbounded)."""

    value: T
    source: str  # release + file:line in its wheel/tag, or the PR, where this was read
    since: str | None = None
    until: str | None = None
    error: str | None = None  # the release's own error text when this fact is a refusal

    def covers(self, v: Version) -> bool:
        if self.since is not None and v < Version.parse(self.since):
            return False
        return not (self.until is not None and v >= Version.parse(self.until))


@dataclass(frozen=True)
class FactTable(Generic[T]):
    """Non-overlapping facts about one capability, oldest first."""

    name: str
    facts: tuple[Fact[T], ...]
    default: Fact[T] | None = None  # for versions no fact covers (older than every fact)

    def __post_init__(self) -> None:
        for a, b in zip(self.facts, self.facts[1:], strict=False):
            if a.until is None or b.since is None or Version.parse(a.until) > Version.parse(
                    b.since):
                raise ValueError(f"{self.name}: facts overlap ({a.since}..{a.until}, "
                                 f"{b.since}..{b.until})")

    def at(self, v: Version) -> Fact[T] | None:
        for fact in self.facts:
            if fact.covers(v):
                return fact
        return self.default

    def boundaries(self) -> list[Version]:
        out = {Version.parse(x) for f in self.facts for x in (f.since, f.until) if x}
        return sorted(out)


def first_version(candidates: Sequence[Version], after: Version,
                  ok: Any) -> Version | None:
    """The first candidate newer than ``after`` for which ``ok(version)`` is true."""
    for v in candidates:
        if v > after and ok(v):
            return v
    return None
