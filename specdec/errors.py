"""Named errors of the specdec library.

    SpecdecError
     ├── ConfigError      bad inventory, group data, catalog or CLI input
     ├── IdentifyError    hardware that is not a supported device
     ├── PlanError        a plan that cannot work (does not fit, unsupported combination)
     ├── RenderError      a plan that cannot be turned into files
     ├── BenchError       a benchmark that could not measure
     ├── GateError        malformed benchmark results or policy given to the gate
     └── RolloutError     a rollout that was refused or stopped
    Problems (a ConfigError): every problem of one run's input, one line each

(The lab adds its own, `specdec_lab.errors.LabError`.)

Every message is a single line meant for a human, with token-shaped strings redacted; the CLI
prints it and exits with the class's `exit_code` (2: bad input, refused before any host was
touched).

The redaction lives here too (`redact`, `one_line`), for every other text shown or written:
events, reports, logs. A Hugging Face user access token is ``hf_`` followed by letters and
digits (https://huggingface.co/docs/hub/security-tokens); `specdec.config.hftoken` accepts
nothing else, so every token specdec handles is caught by `TOKEN_SHAPED`; so is every API key
(``sdk_`` and letters and digits, `specdec.config.apikey`). Redact *before* truncating:
a cut token is no longer token-shaped. (This module stays dependency-free: the engine emulator
image ships it.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "REDACTED",
    "TOKEN_SHAPED",
    "one_line",
    "redact",
    "SpecdecError",
    "ConfigError",
    "IdentifyError",
    "PlanError",
    "RenderError",
    "BenchError",
    "GateError",
    "RolloutError",
    "Problems",
]

REDACTED = "<redacted>"
TOKEN_SHAPED = re.compile(r"(?:hf|sdk)_[A-Za-z0-9]{20,}")  # HF tokens; specdec API keys


def redact(text: str, secret: str | None = None) -> str:
    """``text`` with every token-shaped string (and ``secret``, when given) replaced."""
    if secret:
        text = text.replace(secret, REDACTED)
    return TOKEN_SHAPED.sub(REDACTED, text)


def one_line(text: str) -> str:
    """Redacted, on one line: every `str.splitlines` break becomes a space."""
    return " ".join(redact(text).splitlines())


class SpecdecError(Exception):
    """Base class: a one-line, user-facing failure."""

    exit_code = 1

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(one_line(f"{host}: {message}" if host else message))


class ConfigError(SpecdecError):
    exit_code = 2


class IdentifyError(SpecdecError):
    pass


class PlanError(SpecdecError):
    exit_code = 2


class RenderError(SpecdecError):
    pass


class BenchError(SpecdecError):
    pass


class GateError(SpecdecError):
    exit_code = 2


class RolloutError(SpecdecError):
    exit_code = 2


class Problems(ConfigError):
    """Every problem one run found in its input, one line each (per host), so that a run with
    three mistakes is fixed in one go: ``str`` is the lines joined by newlines."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = tuple(dict.fromkeys(one_line(line) for line in lines if line))
        super().__init__("\n".join(self.lines))

    def __str__(self) -> str:
        return "\n".join(self.lines)

    @classmethod
    def raise_if_any(cls, errors: Sequence[SpecdecError | str]) -> None:
        """Raise the errors as one `Problems` (one alone: as itself)."""
        if len(errors) == 1 and isinstance(errors[0], SpecdecError):
            raise errors[0]
        if errors:
            raise cls([line for e in errors for line in _lines(e)])


def _lines(error: SpecdecError | str) -> tuple[str, ...]:
    if isinstance(error, Problems):
        return error.lines
    return (str(error),)
