"""Named errors of the specdec library.

    SpecdecError
     ├── ConfigError      bad inventory, group data, catalog or CLI input
     ├── IdentifyError    hardware that is not a supported device
     ├── PlanError        a plan that cannot work (does not fit, unsupported combination)
     ├── RenderError      a plan that cannot be turned into files
     ├── BenchError       a benchmark that could not measure
     ├── GateError        malformed benchmark results or policy given to the gate
     └── RolloutError     a rollout that was refused or stopped

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
    pass


class RolloutError(SpecdecError):
    exit_code = 2
