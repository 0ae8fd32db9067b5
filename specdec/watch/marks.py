"""Hosts `specdec watch` marked for re-verification (``specdec_watch: {action: reverify}``), on
the control node: ``cache/<host>/reverify.json`` of the inventory's state directory
(`specdec.config.state`). Nothing changes on the host: the next
deploy to a marked host verifies it again as ``specdec_reverify: true`` would (the benchmark, the
tune and the gate, behind the release guard), and a verified outcome clears the mark
(``roles/verify.py``). ``specdec rollout --marked`` limits a rollout to the marked hosts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specdec.report.fleet import CACHE_DIR, safe_name

__all__ = ["MARK", "clear", "get", "mark", "marked"]

MARK = "reverify.json"


def _path(root: Path, host: str) -> Path:
    return root / CACHE_DIR / safe_name(host) / MARK


def mark(root: Path, host: str, detail: Mapping[str, Any]) -> Path:
    """Mark ``host`` (atomically; an existing mark is kept as it was: the first reason wins)."""
    path = _path(root, host)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{MARK}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"host": host, **detail}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def get(root: Path, host: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(_path(root, host).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else {"host": host}


def clear(root: Path, host: str) -> bool:
    try:
        _path(root, host).unlink()
    except FileNotFoundError:
        return False
    return True


def marked(root: Path, hosts: Iterable[str]) -> list[str]:
    return [h for h in hosts if _path(root, h).is_file()]
