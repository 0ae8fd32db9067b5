"""Can a release run a speculative method for a target? The answer's types, and the search for
the first later release that can (each engine's facts module holds its own check)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specdec.engines.ranges import first_version
from specdec.engines.version import Version

__all__ = ["Check", "Support", "Target", "with_first_ok"]


@dataclass(frozen=True)
class Target:
    """What the engines check about a target model (its config.json)."""

    id: str
    architecture: str  # config.json "architectures"[0], e.g. Qwen3ForCausalLM
    model_type: str  # config.json "model_type", e.g. qwen3
    platform: str = ""  # the device's platform when it changes the answer ("cpu": a CPU build)


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str  # why not (the release's own error text where it has one), or a caveat
    source: str
    first_ok: Version | None = None  # the first later release that can (when not ok)
    caveat: str | None = None  # ok, but worth a note (e.g. runs on the V0 engine)


Check = Callable[[Version, str, Target], Support]
OFF = Support(True, "", "speculation off")


def with_first_ok(check: Check, releases: Sequence[Version], version: Version, method: str,
                  target: Target) -> Support:
    """``check``'s answer ("none" always runs); when not ok, with the first later release among
    ``releases`` that can."""
    if method == "none":
        return OFF
    result = check(version, method, target)
    if result.ok:
        return result
    first = first_version(releases, version, lambda v: check(v, method, target).ok)
    return replace(result, first_ok=first)
