"""The on-host client's errors: `BenchError` (exit 1), `ConfigError` (bad arguments, exit 2)
and `StreamError` (one request failed; recorded with its kind, not raised out of a level)."""

from __future__ import annotations


class BenchError(Exception):
    pass


class ConfigError(BenchError):
    pass


class StreamError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _one_line(exc):
    s = str(exc).strip()
    return (s.splitlines()[0] if s else type(exc).__name__)[:160]
