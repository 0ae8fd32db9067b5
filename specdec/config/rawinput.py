"""Raw input read safely: numbers in text (no '²', no 5000 digits), option values that must not
be empty, and the small files the operator names (no FIFO, no device) (issue 29)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import Any

from specdec.errors import ConfigError

__all__ = ["ascii_int", "check_options_given", "read_file_head"]


def ascii_int(text: str, digits: int = 9) -> int | None:
    """``text`` as a non-negative integer when it is 1..``digits`` ASCII digits, else None:
    ``str.isdigit`` is true for '²' and other digits ``int`` refuses, and ``int`` refuses a
    string of more than 4300 digits."""
    if not 0 < len(text) <= digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def check_options_given(args: Any, names: Sequence[str]) -> None:
    """Command-line options whose empty value would read as not given: ``--shard ''`` once
    rolled out every host."""
    for name in names:
        if getattr(args, name, None) == "":
            raise ConfigError(f"--{name.replace('_', '-')}='': must not be empty")


def read_file_head(path: str | os.PathLike[str], limit: int,
                   follow: bool = True) -> tuple[bytes, os.stat_result]:
    """At most ``limit`` + 1 bytes of a regular file, and its status. Opened without blocking
    and checked before the read: a FIFO hung the reader, a device never ends; either is an
    `OSError` ("not a regular file"), as an unreadable file is. ``follow``: a symlink is
    followed (else refused, O_NOFOLLOW)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(os.path.expanduser(path), flags)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return fh.read(limit + 1), st
