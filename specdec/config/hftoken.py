"""The Hugging Face token on the control node: one reader and one validator for every source.

The token comes from the file named by ``specdec_hf_token_file``, else ``$HF_TOKEN``, else the
file ``hf auth login`` saves (`saved_token_path`, as huggingface_hub finds it). Each way it must
be a single Hugging Face user access token, ``hf_`` followed by 20-200 letters and digits
(https://huggingface.co/docs/hub/security-tokens), surrounding whitespace (a trailing newline)
aside. Nothing else is accepted, so every token specdec handles is token-shaped and
`specdec.errors.redact` catches it anywhere. Errors never show any part of the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from specdec.config.hygiene import show
from specdec.config.rawinput import read_file_head
from specdec.errors import ConfigError

__all__ = ["MAX_FILE_BYTES", "TOKEN", "check_token", "read_token", "saved_token_path"]

TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,200}")
MAX_FILE_BYTES = 4096


def check_token(raw: str, where: str, host: str | None = None) -> str:
    """The token in ``raw`` (surrounding whitespace stripped); ``where`` names the source."""
    text = raw.strip()
    if not text:
        raise ConfigError(f"{where}: is empty (no token)", host=host)
    if any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(f"{where}: does not hold a single token (whitespace, a line break or "
                          "a control character inside)", host=host)
    if not TOKEN.fullmatch(text):
        raise ConfigError(f"{where}: does not hold a Hugging Face token (hf_ followed by 20-200 "
                          "letters and digits)", host=host)
    return text


def saved_token_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``hf auth login`` saves the token: ``$HF_TOKEN_PATH``, else ``$HF_HOME/token``,
    else ``${XDG_CACHE_HOME:-~/.cache}/huggingface/token`` (huggingface_hub 2.4.0
    constants.py:159-164 and 250-256; the same since 0.x)."""
    env = os.environ if environ is None else environ
    if env.get("HF_TOKEN_PATH"):
        return Path(env["HF_TOKEN_PATH"]).expanduser()
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(env.get("HF_HOME") or Path(cache) / "huggingface").expanduser() / "token"


def read_token(host: str | None, token_file: str | None,
               environ: Mapping[str, str] | None = None) -> str | None:
    """The validated token: from ``token_file`` when given, else ``$HF_TOKEN``, else the token
    ``hf auth login`` saved; None when there is none."""
    env = os.environ if environ is None else environ
    if token_file:
        return _from_file(host, Path(token_file), f"specdec_hf_token_file={show(token_file)}")
    raw = env.get("HF_TOKEN")
    if raw is not None and raw.strip():
        return check_token(raw, "$HF_TOKEN", host)
    saved = saved_token_path(env)
    if saved.is_file():
        return _from_file(host, saved, f"the token hf auth login saved ({show(str(saved))})")
    return None


def _from_file(host: str | None, path: Path, where: str) -> str:
    """The token in ``path``; errors name ``where``, never any part of the content."""
    try:  # without blocking: a FIFO or device given as the file is refused, not waited on
        data = read_file_head(path, MAX_FILE_BYTES)[0]
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})",
                          host=host) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: is larger than {MAX_FILE_BYTES} bytes (not a token file)",
                          host=host)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: is not UTF-8 text", host=host) from None
    return check_token(text, where, host)
