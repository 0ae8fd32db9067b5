"""The tune phase's response curve as an inline SVG chart (no scripts): k → throughput vs the
baseline at c=1 and c=8, one pair of lines per method compared, the measured points as dots and
the kept configuration marked."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Frame:
    """The plot area: k along x, the throughput ratio up y."""

    kmin: int
    kmax: int
    lo: float
    hi: float
    x0: int = 50
    y0: int = 48
    w: int = 380
    h: int = 170

    def x(self, k: float) -> float:
        return self.x0 + self.w * (k - self.kmin) / max(1, self.kmax - self.kmin)

    def y(self, v: float) -> float:
        return self.y0 + self.h * (self.hi - v) / (self.hi - self.lo)


def tune_chart(host: str, tune: Mapping[str, Any] | None) -> str:
    if not isinstance(tune, Mapping) or not tune.get("curves"):
        return ""
    curves: Sequence[Mapping[str, Any]] = [c for c in tune["curves"] if isinstance(c, Mapping)]
    cfg = tune.get("config") or {}
    vals = [float(p[k]) for c in curves for p in _points(c) for k in ("c1", "c8")
            if isinstance(p.get(k), int | float)]
    if not vals:
        return ""
    ks = [int(p["k"]) for c in curves for p in _points(c)]
    f = _Frame(min(ks), max(ks), min(0.8, min(vals)), max(1.2, max(vals)) * 1.05)
    out = _axes(f, host, tune)
    legend_y = f.y0 + 10
    for ci, c in enumerate(curves):
        chosen = c.get("method") == cfg.get("method") and c.get("draft") == cfg.get("draft")
        for key, color, label in _LEVELS:
            out += _curve(f, c, key, color, label, chosen, legend_y)
            legend_y += 16
        if ci == 0:
            legend_y += 4
    kept = cfg.get("k")
    if isinstance(kept, int) and f.kmin <= kept <= f.kmax:
        out.append(f'<line x1="{f.x(kept):.1f}" y1="{f.y0}" x2="{f.x(kept):.1f}" '
                   f'y2="{f.y0 + f.h}" stroke="#1a7f37" stroke-width="1.5"><title>kept</title>'
                   '</line>')
    out.append(f'<text x="{f.x0 + f.w + 12}" y="{legend_y + 8:.0f}" font-size="10">dots: '
               'measured;</text>')
    out.append(f'<text x="{f.x0 + f.w + 12}" y="{legend_y + 20:.0f}" font-size="10">green: '
               'kept k</text>')
    out.append("</svg>")
    return "\n".join(out)


def _axes(f: _Frame, host: str, tune: Mapping[str, Any]) -> list[str]:
    """The SVG's opening, the title, the 1.0 line and both axes' labels."""
    e = html.escape
    # the title on two lines, the chart as wide as the longer needs (~7 px a character at the
    # default 14 px sans font, 6 px at 12 px): an SVG text is clipped at the SVG's width
    title = f"{host}: throughput vs baseline by k"
    subtitle = f"kept: {tune_line(tune)}"
    width = max(f.x0 + f.w + 170, int(7.2 * len(title)) + 10, int(6.3 * len(subtitle)) + 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{f.y0 + f.h + 40}" role="img" aria-label="tuning curve {e(host)}">',
           f'<text x="0" y="16" font-weight="bold">{e(title)}</text>',
           f'<text x="0" y="34" font-size="12">{e(subtitle)}</text>',
           f'<line x1="{f.x0}" y1="{f.y(1.0):.1f}" x2="{f.x0 + f.w}" y2="{f.y(1.0):.1f}" '
           'stroke="#999" stroke-dasharray="2,3"/>',
           f'<text x="{f.x0 - 6}" y="{f.y(1.0) + 4:.1f}" font-size="10" text-anchor="end">1.0'
           '</text>']
    for t in (f.lo, f.hi):
        out.append(f'<text x="{f.x0 - 6}" y="{f.y(t) + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{t:.2f}</text>')
    for k in range(f.kmin, f.kmax + 1):
        out.append(f'<text x="{f.x(k):.1f}" y="{f.y0 + f.h + 16}" font-size="10" '
                   f'text-anchor="middle">{k}</text>')
    out.append(f'<text x="{f.x0 + f.w / 2:.0f}" y="{f.y0 + f.h + 32}" font-size="11" '
               'text-anchor="middle">num_speculative_tokens (k)</text>')
    return out


def _curve(f: _Frame, c: Mapping[str, Any], key: str, color: str, label: str, chosen: bool,
           legend_y: float) -> list[str]:
    """One method's line at one level (the kept method's solid), its measured points as dots,
    and its legend entry at ``legend_y``."""
    e = html.escape
    dash = "" if chosen else ' stroke-dasharray="5,4"'
    pts = _points(c)
    line = " ".join(f"{f.x(int(p['k'])):.1f},{f.y(float(p[key])):.1f}" for p in pts
                    if isinstance(p.get(key), int | float))
    out = [f'<polyline points="{line}" fill="none" stroke="{color}" '
           f'stroke-width="{2 if chosen else 1.2}"{dash}/>']
    for p in pts:
        if p.get("measured") and isinstance(p.get(key), int | float):
            out.append(f'<circle cx="{f.x(int(p["k"])):.1f}" cy="{f.y(float(p[key])):.1f}" '
                       f'r="3.5" fill="{color}"><title>{e(str(c.get("method")))} '
                       f'k={p["k"]} {label}: {float(p[key]):.2f}x (measured)</title>'
                       '</circle>')
    name = f"{c.get('method')} {label}"
    out.append(f'<line x1="{f.x0 + f.w + 12}" y1="{legend_y:.0f}" x2="{f.x0 + f.w + 32}" '
               f'y2="{legend_y:.0f}" stroke="{color}" stroke-width="2"{dash}/>'
               f'<text x="{f.x0 + f.w + 36}" y="{legend_y + 4:.0f}" font-size="11">'
               f'{e(name)}</text>')
    return out
