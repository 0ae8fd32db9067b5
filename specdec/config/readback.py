"""What the control node reads back (a host's benchmark result, a tune cache entry, a report of
an earlier run) is input like host data: checked before anything uses it.

`parse_json` reads at most `MAX_BYTES` and refuses NaN and infinities (Python's json takes
them); `check_tree` walks a decoded document: at most `MAX_DEPTH` levels and `MAX_ITEMS`
values, every number finite, every string one line without control or format characters
(`specdec.config.hygiene.bad_char`), not token-shaped and at most `MAX_STRING` long, every key a
string. A failure is a `ValueError` naming the field, one line; the callers turn it into
their own error (`specdec.errors.BenchError`) or ignore the document with one line.
"""

from __future__ import annotations

import json
import math
from typing import Any

from specdec.config.hygiene import bad_char, show
from specdec.errors import redact

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_ITEMS", "MAX_STRING", "check_tree", "parse_json"]

MAX_BYTES = 16 * 2**20
MAX_DEPTH = 12
MAX_ITEMS = 500_000
MAX_STRING = 4096


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def parse_json(text: str | bytes, where: str) -> Any:
    """The document in ``text``, or `ValueError` (too big, not JSON, NaN or infinity)."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"{where}: larger than {MAX_BYTES} bytes")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise ValueError(f"{where}: not valid JSON ({str(exc).splitlines()[0]})") from None


def check_tree(doc: Any, where: str) -> Any:
    """``doc`` when every value in it passes (see the module doc); else `ValueError`."""
    seen = 0
    stack: list[tuple[Any, str, int]] = [(doc, where, 0)]
    while stack:
        value, path, depth = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise ValueError(f"{where}: more than {MAX_ITEMS} values")
        if depth > MAX_DEPTH:
            raise ValueError(f"{path}: nested deeper than {MAX_DEPTH}")
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError(f"{path}={value!r}: not a finite number")
        elif isinstance(value, str):
            _check_string(value, path)
        elif isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise ValueError(f"{path}: key {show(k)} is not a string")
                _check_string(k, f"{path} key")
                stack.append((v, f"{path}.{k}", depth + 1))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        else:
            raise ValueError(f"{path}: {type(value).__name__} is not a JSON value")
    return doc


def _check_string(text: str, path: str) -> None:
    if len(text) > MAX_STRING:
        raise ValueError(f"{path}: a string of {len(text)} characters (at most {MAX_STRING})")
    if (c := bad_char(text)) is not None:
        raise ValueError(f"{path}={show(text)}: contains a line break or control character "
                         f"({c})")
    if redact(text) != text:
        raise ValueError(f"{path}: holds a token-shaped string")
