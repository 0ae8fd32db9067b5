"""Canonical text of a case, the per-domain collector and a deterministic parallel map."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any


def _norm(o: Any) -> Any:
    """Plain JSON values: dict keys as strings (mixed int/str keys sort), dataclasses as dicts,
    floats JSON cannot carry as their repr (every other float json writes as its repr: bit for
    bit), anything else as its repr."""
    if o is None or isinstance(o, str | int | bool):
        return o
    if isinstance(o, float):
        return o if math.isfinite(o) else f"float:{o!r}"
    if isinstance(o, dict):
        return {str(k): _norm(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_norm(v) for v in o]
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return _norm(dataclasses.asdict(o))
    if isinstance(o, set | frozenset):
        return sorted((_norm(v) for v in o), key=repr)
    if isinstance(o, bytes):
        return o.decode("utf-8", "backslashreplace")
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def canon(obj: Any) -> str:
    """One line of canonical JSON (sorted keys, no spaces, exact floats)."""
    return json.dumps(_norm(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def error(exc: BaseException) -> dict[str, str]:
    """An error as a case's outcome: its class and first line (no traceback, no addresses)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return {"error": type(exc).__name__, "message": text}


class Domain:
    """The canonical lines of one domain, in case order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.errors = 0

    def add(self, case: str, outcome: dict[str, Any]) -> None:
        self.lines.append(canon({"case": case, **outcome}))
        self.errors += int("error" in outcome)

    def extend(self, lines: Iterable[tuple[str, bool]]) -> None:
        for line, failed in lines:
            self.lines.append(line)
            self.errors += int(failed)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode() + b"\n")
        return h.hexdigest()

    def summary(self) -> str:
        return f"{self.name:<12} cases={len(self.lines)}  errors={self.errors}  " \
               f"sha256={self.digest}"

    def dump(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{self.name}.jsonl").write_text("".join(x + "\n" for x in self.lines))


def line(case: str, outcome: dict[str, Any]) -> tuple[str, bool]:
    """A case's canonical line and whether it is an error (for workers)."""
    return canon({"case": case, **outcome}), "error" in outcome


def pmap(fn: Callable[[Sequence[Any]], list[Any]], items: Sequence[Any], jobs: int,
         chunk: int = 400) -> list[Any]:
    """``fn`` over contiguous chunks of ``items`` in ``jobs`` forked processes; the results
    concatenated in item order (deterministic whatever the scheduling)."""
    chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
    if jobs <= 1 or len(chunks) <= 1:
        return [x for c in chunks for x in fn(c)]
    with ProcessPoolExecutor(jobs, mp_context=get_context("fork")) as ex:
        return [x for part in ex.map(fn, chunks) for x in part]


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))
