"""The tune phase's response curve as an inline SVG chart (no scripts): k → throughput vs the
baseline at c=1 and c=8, one pair of lines per method compared, the measured points as dots and
the kept configuration marked."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["tune_chart", "tune_line"]

_LEVELS = (("c1", "#2b7bb9", "c=1"), ("c8", "#b95a2b", "c=8"))


def tune_line(tune: Mapping[str, Any] | None) -> str:
    """One line: the kept configuration, points measured, time."""
    if not isinstance(tune, Mapping) or not isinstance(tune.get("config"), Mapping):
        return "-"
    cfg = tune["config"]
    pts = ", ".join(f"{p.get('method')} k={p.get('k')}" for p in tune.get("measured") or [])
    sched = "".join(f" {a}-{b}:{k}" for a, b, k in cfg.get("k_by_batch") or [])
    return (f"{cfg.get('method')} k={cfg.get('k')}{' per batch' + sched if sched else ''} "
            f"(measured {pts}; {tune.get('wall_seconds', 0):.0f} s)")


def _points(curve: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [p for p in curve.get("points") or [] if isinstance(p, Mapping)]


def tune_chart(host: str, tune: Mapping[str, Any] | None) -> str:
    if not isinstance(tune, Mapping) or not tune.get("curves"):
        return ""
    e = html.escape
    curves: Sequence[Mapping[str, Any]] = [c for c in tune["curves"] if isinstance(c, Mapping)]
    cfg = tune.get("config") or {}
    vals = [float(p[k]) for c in curves for p in _points(c) for k in ("c1", "c8")
            if isinstance(p.get(k), int | float)]
    if not vals:
        return ""
    ks = [int(p["k"]) for c in curves for p in _points(c)]
    kmin, kmax = min(ks), max(ks)
    lo, hi = min(0.8, min(vals)), max(1.2, max(vals)) * 1.05
    x0, y0, w, h = 50, 48, 380, 170
    # the title on two lines, the chart as wide as the longer needs (~7 px a character at the
    # default 14 px sans font, 6 px at 12 px): an SVG text is clipped at the SVG's width
    title = f"{host}: throughput vs baseline by k"
    subtitle = f"kept: {tune_line(tune)}"
    width = max(x0 + w + 170, int(7.2 * len(title)) + 10, int(6.3 * len(subtitle)) + 10)

    def x(k: float) -> float:
        return x0 + w * (k - kmin) / max(1, kmax - kmin)

    def y(v: float) -> float:
        return y0 + h * (hi - v) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{y0 + h + 40}" role="img" aria-label="tuning curve {e(host)}">',
           f'<text x="0" y="16" font-weight="bold">{e(title)}</text>',
           f'<text x="0" y="34" font-size="12">{e(subtitle)}</text>',
           f'<line x1="{x0}" y1="{y(1.0):.1f}" x2="{x0 + w}" y2="{y(1.0):.1f}" stroke="#999" '
           'stroke-dasharray="2,3"/>',
           f'<text x="{x0 - 6}" y="{y(1.0) + 4:.1f}" font-size="10" text-anchor="end">1.0'
           '</text>']
    for t in (lo, hi):
        out.append(f'<text x="{x0 - 6}" y="{y(t) + 4:.1f}" font-size="10" text-anchor="end">'
                   f'{t:.2f}</text>')
    for k in range(kmin, kmax + 1):
        out.append(f'<text x="{x(k):.1f}" y="{y0 + h + 16}" font-size="10" '
                   f'text-anchor="middle">{k}</text>')
    out.append(f'<text x="{x0 + w / 2:.0f}" y="{y0 + h + 32}" font-size="11" '
               'text-anchor="middle">num_speculative_tokens (k)</text>')
    legend_y = y0 + 10
    for ci, c in enumerate(curves):
        chosen = c.get("method") == cfg.get("method") and c.get("draft") == cfg.get("draft")
        dash = "" if chosen else ' stroke-dasharray="5,4"'
        pts = _points(c)
        for key, color, label in _LEVELS:
            line = " ".join(f"{x(int(p['k'])):.1f},{y(float(p[key])):.1f}" for p in pts
                            if isinstance(p.get(key), int | float))
            out.append(f'<polyline points="{line}" fill="none" stroke="{color}" '
                       f'stroke-width="{2 if chosen else 1.2}"{dash}/>')
            for p in pts:
                if p.get("measured") and isinstance(p.get(key), int | float):
                    out.append(f'<circle cx="{x(int(p["k"])):.1f}" cy="{y(float(p[key])):.1f}" '
                               f'r="3.5" fill="{color}"><title>{e(str(c.get("method")))} '
                               f'k={p["k"]} {label}: {float(p[key]):.2f}x (measured)</title>'
                               '</circle>')
            name = f"{c.get('method')} {label}"
            out.append(f'<line x1="{x0 + w + 12}" y1="{legend_y:.0f}" x2="{x0 + w + 32}" '
                       f'y2="{legend_y:.0f}" stroke="{color}" stroke-width="2"{dash}/>'
                       f'<text x="{x0 + w + 36}" y="{legend_y + 4:.0f}" font-size="11">'
                       f'{e(name)}</text>')
            legend_y += 16
        if ci == 0:
            legend_y += 4
    kept = cfg.get("k")
    if isinstance(kept, int) and kmin <= kept <= kmax:
        out.append(f'<line x1="{x(kept):.1f}" y1="{y0}" x2="{x(kept):.1f}" y2="{y0 + h}" '
                   'stroke="#1a7f37" stroke-width="1.5"><title>kept</title></line>')
    out.append(f'<text x="{x0 + w + 12}" y="{legend_y + 8:.0f}" font-size="10">dots: measured;'
               '</text>')
    out.append(f'<text x="{x0 + w + 12}" y="{legend_y + 20:.0f}" font-size="10">green: kept k'
               '</text>')
    out.append("</svg>")
    return "\n".join(out)
