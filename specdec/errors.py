"""Named errors of the specdec library.

    SpecdecError
     ├── ConfigError      bad inventory, group data, catalog or CLI input
     ├── IdentifyError    hardware that is not a supported device
     ├── PlanError        a plan that cannot work (does not fit, unsupported combination)
     ├── RenderError      a plan that cannot be turned into files
     ├── BenchError       a benchmark that could not measure
     ├── GateError        malformed benchmark results or policy given to the gate
     ├── LabError         the lab fleet cannot be brought up / down
     └── RolloutError     a rollout that was refused or stopped

Every message is a single line meant for a human; the CLI prints it and exits non-zero.
"""

from __future__ import annotations

__all__ = [
    "SpecdecError",
    "ConfigError",
    "IdentifyError",
    "PlanError",
    "RenderError",
    "BenchError",
    "GateError",
    "LabError",
    "RolloutError",
]


class SpecdecError(Exception):
    """Base class: a one-line, user-facing failure."""

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(f"{host}: {message}" if host else message)


class ConfigError(SpecdecError):
    pass


class IdentifyError(SpecdecError):
    pass


class PlanError(SpecdecError):
    pass


class RenderError(SpecdecError):
    pass


class BenchError(SpecdecError):
    pass


class GateError(SpecdecError):
    pass


class LabError(SpecdecError):
    pass


class RolloutError(SpecdecError):
    pass
