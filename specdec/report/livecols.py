"""The fleet report's live columns, from the watch file when one is present (``reports/
watch.json``, written by `specdec watch`): verdict, live vs gate acceptance length, estimated
live gain, traffic served, as of when. Standard library only, no import of the report (which
imports this)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["HEADERS", "WATCH_FILE", "cells", "live_rows"]

WATCH_FILE = "watch.json"
HEADERS = ("live verdict", "live AL (gate)", "est. live gain", "traffic served", "watched")
_COLORS = {"paying": "#1a7f37", "marginal": "#9a6700", "not paying": "#cf222e",
           "favourable": "#6639ba"}


def live_rows(root: Path) -> dict[str, Mapping[str, Any]]:
    """Each host's latest watch row, by host ({} without a watch file)."""
    try:
        doc = json.loads((root / WATCH_FILE).read_text())
    except (OSError, ValueError):
        return {}
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict):
        return {}
    return {str(h): v["row"] for h, v in hosts.items()
            if isinstance(v, dict) and isinstance(v.get("row"), dict)}


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, int | float) and not isinstance(x, bool) else "-"


def cells(row: Mapping[str, Any] | None) -> list[str]:
    """The live columns of one host as escaped HTML cells' contents."""
    if not row:
        return ["-"] * len(HEADERS)
    e = html.escape
    verdict = str(row.get("verdict") or "-")
    color = _COLORS.get(verdict, "#57606a")
    gain = row.get("est_gain")
    unit = " (est.)" if row.get("hypothetical") else ""
    traffic = _num(row.get("tokens_per_s"), ".1f")
    return [f'<b style="color:{color}">{e(verdict)}</b>',
            f'{_num(row.get("live_al"), ".2f")} ({_num(row.get("gate_al"), ".2f")})',
            e(_num(gain, "+.0%") + unit),
            e(f"{traffic} tok/s" if traffic != "-" else "-"),
            e(str(row.get("as_of") or "-"))]
