"""Fault injection: parse ``SPECDEC_EMU_FAULT`` (see the package docstring for the list)."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.errors import ConfigError

__all__ = ["FAULT_NAMES", "Faults", "parse_faults"]

FAULT_NAMES = ("crash_at_start", "slow_start", "hang_after", "5xx_burst", "slowdown", "oom")


@dataclass(frozen=True)
class Faults:
    crash_at_start: bool = False
    slow_start_s: float = 0.0  # extra startup delay, real (unscaled) seconds
    hang_after: int | None = None  # completed requests before the engine wedges
    burst_start: int = 0  # 1-based number of the first generation request answered with 500
    burst_count: int = 0
    slowdown: float = 0.0  # each step slower by this fraction per completed request
    oom: bool = False

    def is_5xx(self, request_number: int) -> bool:
        return self.burst_count > 0 and (
            self.burst_start <= request_number < self.burst_start + self.burst_count)

    def step_factor(self, completed: int) -> float:
        return 1.0 + self.slowdown * completed

    def hung(self, completed: int) -> bool:
        return self.hang_after is not None and completed >= self.hang_after


def _num(spec: str, value: str, kind: type[int] | type[float], minimum: float) -> float:
    try:
        x = kind(value)
    except ValueError:
        raise ConfigError(f"SPECDEC_EMU_FAULT={spec!r}: {value!r} is not a number") from None
    if x < minimum:
        raise ConfigError(f"SPECDEC_EMU_FAULT={spec!r}: {value!r} must be >= {minimum:g}")
    return x


def parse_faults(text: str | None) -> Faults:
    """``crash_at_start,slow_start:5,hang_after:3,5xx_burst:4:2,slowdown:0.05,oom``."""
    if not text or not text.strip():
        return Faults()
    kw: dict[str, object] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, *args = item.split(":")
        want = {"crash_at_start": 0, "oom": 0, "slow_start": 1, "hang_after": 1,
                "slowdown": 1, "5xx_burst": 2}.get(name)
        if want is None:
            raise ConfigError(f"SPECDEC_EMU_FAULT={text!r}: unknown fault {name!r} "
                              f"(known: {', '.join(FAULT_NAMES)})")
        if len(args) != want:
            raise ConfigError(f"SPECDEC_EMU_FAULT={text!r}: {name} takes {want} argument(s)")
        if name == "crash_at_start":
            kw["crash_at_start"] = True
        elif name == "oom":
            kw["oom"] = True
        elif name == "slow_start":
            kw["slow_start_s"] = _num(text, args[0], float, 0)
        elif name == "hang_after":
            kw["hang_after"] = int(_num(text, args[0], int, 0))
        elif name == "slowdown":
            kw["slowdown"] = _num(text, args[0], float, 0)
        else:
            kw["burst_start"] = int(_num(text, args[0], int, 1))
            kw["burst_count"] = int(_num(text, args[1], int, 0))
    return Faults(**kw)  # type: ignore[arg-type]
