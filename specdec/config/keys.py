"""Reading one ``specdec_*`` key of a host's data: typed, checked by `specdec.config.hygiene`, and a
one-line `ConfigError` naming host, key and value (secret-looking values redacted)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from typing import Any

from specdec.config import hygiene
from specdec.config.hygiene import show
from specdec.errors import REDACTED, ConfigError

__all__ = ["SECRET_MARKERS", "KeyReader", "closest", "did_you_mean", "key_text"]

# An engine env key containing one of these is a secret and belongs in /etc/specdec/hf_token.
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")


def closest(value: str, choices: Collection[str]) -> str | None:
    """The one of ``choices`` closest to ``value`` (case ignored), if any is close."""
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def did_you_mean(value: str, choices: Collection[str], prefix: str = "") -> str:
    """``"; did you mean X?"`` (``prefix`` + the closest of ``choices``), else ``""``."""
    close = closest(value, choices)
    return f"; did you mean {prefix}{close}?" if close else ""


def key_text(key: Any) -> str:
    return key if isinstance(key, str) and _KEY.fullmatch(key) else show(key)


class KeyReader:
    """The keys of one host's data; ``known``: every key specdec reads (others that look
    secret are shown redacted)."""

    def __init__(self, host: str, data: Mapping[str, Any], known: Collection[str]) -> None:
        self.host = host
        self.data = data
        self.known = known

    def shown(self, key: Any, value: Any) -> str:
        """``key=value`` for an error message, with anything secret-looking redacted."""
        secret = (isinstance(key, str) and key not in self.known
                  and any(m in key.upper() for m in SECRET_MARKERS))
        return f"{key_text(key)}={REDACTED if secret else show(value)}"

    def fail(self, key: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{self.shown(key, value)}: {why}", host=self.host)

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def str_(self, key: str, choices: tuple[str, ...] | None = None,
             max_len: int = hygiene.MAX_TEXT) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        hygiene.check_text(self.host, key, value, max_len)
        if choices is not None and value not in choices:
            raise self.fail(key, value, f"must be one of {', '.join(choices)}"
                            + did_you_mean(value, choices))
        return value

    def repo_id(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else hygiene.check_repo_id(self.host, key, value)

    def int_(self, key: str, lo: int, hi: int) -> int | None:
        value = self.get(key)
        return None if value is None else hygiene.check_int(self.host, key, value, lo, hi)

    def float_(self, key: str, hi: float) -> float | None:
        """A finite number in (0, hi]."""
        value = self.get(key)
        return None if value is None else hygiene.check_number(self.host, key, value, 0, hi)

    def bool_(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be true or false")
        return value
