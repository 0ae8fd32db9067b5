"""The watch file, ``reports/watch.json``: per host the latest row (what the table and the JSON
show), the verdict's history and the samples of its sliding window, so that ``specdec watch
--once`` run from a timer builds its window across runs. Written atomically under a lock; the
fleet report reads the rows (`specdec.report.livecols`)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdec.report.livecols import WATCH_FILE
from specdec.watch.window import Sample

__all__ = ["WATCH_FILE", "load", "locked", "sample_from", "sample_to", "save"]

SCHEMA = 1


def sample_to(s: Sample) -> dict[str, Any]:
    return {"t": s.t, "wall_s": s.wall_s, "device_s": s.device_s, "counts": s.counts,
            "has_steps": s.has_steps, "busy": {str(b): v for b, v in s.busy.items()},
            "waiting": s.waiting, "frontend": s.frontend, "restart": s.restart,
            "deploying": s.deploying, "missed": s.missed, "ok": s.ok}


def sample_from(d: Any) -> Sample | None:
    if not isinstance(d, dict):
        return None
    try:
        return Sample(t=float(d["t"]), wall_s=float(d["wall_s"]), device_s=float(d["device_s"]),
                      counts={str(k): float(v) for k, v in (d.get("counts") or {}).items()},
                      has_steps=bool(d.get("has_steps")),
                      busy={int(k): float(v) for k, v in (d.get("busy") or {}).items()},
                      waiting=None if d.get("waiting") is None else float(d["waiting"]),
                      frontend={str(k): float(v) for k, v in (d.get("frontend") or {}).items()},
                      restart=bool(d.get("restart")), deploying=bool(d.get("deploying")),
                      missed=int(d.get("missed") or 0), ok=bool(d.get("ok", True)))
    except (KeyError, TypeError, ValueError):
        return None


def load(root: Path) -> dict[str, Any]:
    try:
        doc = json.loads((root / WATCH_FILE).read_text())
    except (OSError, ValueError):
        return {"schema": SCHEMA, "hosts": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), dict):
        return {"schema": SCHEMA, "hosts": {}}
    return doc


def save(root: Path, doc: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / WATCH_FILE
    tmp = path.with_name(f".{WATCH_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**doc, "schema": SCHEMA}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """One writer of the watch file at a time (a timer's ``--once`` beside a running watch)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{WATCH_FILE}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
