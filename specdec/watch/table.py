"""The watch's table for a person: one line per host and per serving group, device figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["age", "table"]

COLUMNS = ("host", "decision (age)", "gate AL", "live AL", "gate c1 gain", "est. live gain",
           "traffic served", "verdict", "status / notes")


def age(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    s = max(0.0, float(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.1f}{unit}"
    return f"{s:.0f}s"


def _n(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, int | float) and not isinstance(x, bool) else "-"


def _cells(r: Mapping[str, Any]) -> list[str]:
    w = r.get("window") or {}
    gain = _n(r.get("est_gain"), "+.0%")
    lo, hi = (r.get("est_gain_ci") or [None, None])[:2]
    if gain != "-" and lo is not None and hi is not None:
        gain += f" [{lo:+.0%}..{hi:+.0%}]"
    if r.get("hypothetical") and gain != "-":
        gain += " if on"
    traffic = "-"
    if isinstance(r.get("tokens_per_s"), int | float):
        traffic = f"{r['tokens_per_s']:.0f} tok/s, batch {_n(w.get('mean_batch'), '.1f')}"
    notes = [str(r.get("status"))] if r.get("status") not in (None, "ok") else []
    if r.get("marked"):
        notes.append("marked for reverify")
    notes += [str(n) for n in r.get("notes") or []]
    verdict = str(r.get("verdict") or "-")
    decision = f"{r.get('decision') or '-'} ({age(r.get('decision_age_s'))})"
    return [str(r.get("host")), decision, _n(r.get("gate_al"), ".2f"),
            _n(r.get("live_al"), ".2f"), _n(r.get("gate_gain_c1"), "+.0%"), gain, traffic,
            verdict, "; ".join(notes) or "ok"]


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    body = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(row[i]) for row in body) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
                     + "  " + row[-1])
    scales = sorted({float(x) for r in rows
                     if isinstance(x := (r.get("device_time") or {}).get("time_scale"),
                                   int | float)})
    if scales:
        lines.append(f"(emulated hosts: device time; the emulator ran at time scale "
                     f"{', '.join(f'{x:g}' for x in scales)})")
    return "\n".join(lines) + "\n"
