"""Per-host and fleet reports on the control node, under ``reports/<run-id>/``.

* ``<host>.json`` — one per host: outcome, phase, message, every measurement (value,
  threshold, time), the tune phase's curve and choice, acceptance length and
  per-position rates, the host's power mode and clocks, and two roofline figures (see
  `specdec.verify.roofline`: baseline decode as % of the bandwidth limit, speculative decode as % of
  acceptance length x that limit), written by the deploy's verify step, or by `specdec rollout`
  for hosts it never reached. Figures of an engine emulator are device time, labelled
  "emulated";
* ``summary.md`` — the fleet table;
* ``index.html`` — the same with inline SVG charts (TPOT and throughput, baseline vs
  speculation, per host; acceptance rate per draft position; the tuning curve per host).

Outcomes: ``kept`` (the gate kept speculation), ``disabled`` (the gate disabled it),
``held`` (the gate could not answer: tokens estimated; the host stays on last-good),
``not_verified`` (``specdec_verify: false``: healthy, no benchmark), ``no_speculation`` (the
plan has speculation off: healthy, nothing to gate), ``rolled_back``, ``failed``,
``unchanged`` (verified before, nothing changed), ``skipped`` (never reached),
``unreachable`` (pyinfra could not connect to it or lost it, nothing verified: a device that
dropped off; ``specdec rollout --resume RUN`` finishes it).

Nothing secret goes in: in every text written the HF token (when known) and every token-shaped
string are replaced by ``<redacted>`` (`specdec.errors.redact`).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specdec.errors import RolloutError, redact
from specdec.report import livecols
from specdec.report.cells import OUTCOME_COLORS, figures, md_cell, pct, roof
from specdec.report.groups import group_lines, groups_html
from specdec.tune.chart import tune_chart, tune_line
from specdec.verify.roofline import HOW

__all__ = [
    "OUTCOMES",
    "REPORTS_ENV",
    "RUN_ID_ENV",
    "check_run_id",
    "index_html",
    "latest_run",
    "load_reports",
    "reports_root",
    "resolve_run",
    "safe_name",
    "skipped_report",
    "summary_markdown",
    "write_fleet",
    "write_host_report",
]

OUTCOMES = ("kept", "disabled", "held", "not_verified", "no_speculation", "rolled_back",
            "failed", "unchanged", "skipped", "unreachable")
GATED = ("kept", "disabled")  # a gate decision was made
REPORTS_ENV = "SPECDEC_REPORTS_DIR"
RUN_ID_ENV = "SPECDEC_RUN_ID"
CACHE_DIR = "cache"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


def safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host).strip("._") or "host"


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.fullmatch(run_id) or run_id == CACHE_DIR:
        raise RolloutError(f"--run-id={run_id!r}: use letters, digits, '.', '_' or '-' "
                           "(at most 80, not 'cache')")
    return run_id


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


def reports_root(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get(REPORTS_ENV)
    return Path(env) if env else Path.cwd() / "reports"


def _scrub(text: str, secret: str | None) -> str:
    return redact(text, secret)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_host_report(run_dir: Path, report: Mapping[str, Any], secret: str | None = None,
                      fleet: bool = True) -> Path:
    """Write ``<host>.json`` (token scrubbed) and refresh the fleet summary and page."""
    text = _scrub(json.dumps(report, indent=2, sort_keys=True, default=str), secret) + "\n"
    path = run_dir / f"{safe_name(str(report.get('host', 'host')))}.json"
    _write_atomic(path, text)
    if fleet:
        write_fleet(run_dir, secret)
    return path


def load_reports(run_dir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not run_dir.is_dir():
        return out
    for p in sorted(run_dir.glob("*.json")):
        if p.name.endswith(".bench.json") or p.name.startswith("."):
            continue
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "host" in doc and "outcome" in doc:
            out.append(doc)
    order = doc_order(run_dir)
    out.sort(key=lambda d: (order.get(str(d["host"]), 10**6), str(d["host"])))
    return out


def doc_order(run_dir: Path) -> dict[str, int]:
    """Host order of the rollout (``hosts.json`` written by `specdec rollout`), if any."""
    try:
        hosts = json.loads((run_dir / "hosts.json").read_text())
        return {str(h): i for i, h in enumerate(hosts)}
    except (OSError, ValueError, TypeError):
        return {}


def skipped_report(host: str, run_id: str, reason: str, outcome: str = "skipped",
                   phase: str = "rollout", **extra: Any) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rep: dict[str, Any] = {
        "schema": 1, "run_id": run_id, "host": host, "outcome": outcome, "phase": phase,
        "message": reason, "started_at": now, "finished_at": now, "measurements": [],
        "events": [], "baseline": None, "candidate": None, "gate": None, "acceptance": None,
        "roofline": None,
    }
    rep.update(extra)
    return rep


# -- Markdown ----------------------------------------------------------------------------------


def summary_markdown(reports: Sequence[Mapping[str, Any]], run_id: str) -> str:
    counts: dict[str, int] = {}
    for r in reports:
        counts[str(r.get("outcome"))] = counts.get(str(r.get("outcome")), 0) + 1
    tally = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o)) or "no hosts"
    gated = sum(counts.get(o, 0) for o in GATED)
    lines = [
        f"# specdec rollout {run_id}",
        "",
        f"{len(reports)} host(s): {tally}.",
        f"Gated by the benchmark: {gated} (kept or disabled); `not_verified`: no benchmark "
        "(specdec_verify false); `no_speculation`: nothing to gate; `held`: the gate could not "
        "count tokens, last-good kept."
        + (" `unreachable`: dropped off the network, not deployed or not confirmed "
           "(`specdec rollout --resume`)." if counts.get("unreachable") else ""),
        "",
        "| host | device | power mode | method | outcome | c1 throughput gain (gate) | "
        "TPOT change (gate) | "
        "c8 gain | acceptance length | decode % of bw limit | spec % of AL x limit | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    scales = set()
    for r in reports:
        f = figures(r)
        acc = f["acceptance_length"]
        if f["emulated"] is not None:
            scales.add(f["emulated"])
        method = r.get("method") or "-"
        if r.get("draft"):
            method = f"{method} ({r['draft']}, k={r.get('num_speculative_tokens')})"
        elif r.get("num_speculative_tokens"):
            method = f"{method} (k={r.get('num_speculative_tokens')})"
        if r.get("tune"):
            method += f"; tuned: {tune_line(r.get('tune'))}"
        outcome = str(r.get("outcome"))
        if r.get("previous_outcome"):
            outcome += f" ({r['previous_outcome']})"
        device = str(r.get("device") or "-") + (" (emulated)" if f["emulated"] else "")
        lines.append("| " + " | ".join(md_cell(x) for x in (
            r.get("host"), device, f["power_mode"], method, outcome, pct(f["c1_gain"]),
            pct(f["tpot_change"]), pct(f["c8_gain"]),
            f"{acc:.2f}" if isinstance(acc, int | float) else "-",
            roof(f["roofline_base_pct"]), roof(f["roofline_spec_pct"]),
            r.get("message"),
        )) + " |")
    lines += group_lines(reports)
    lines += ["", f"Roofline: {HOW}."]
    if scales:
        lines.append(f"Emulated hosts: figures are device time (the engine emulator ran at time "
                     f"scale {', '.join(f'{x:g}' for x in sorted(scales))}; durations and rates "
                     "converted to what the device would show).")
    return "\n".join(lines) + "\n"


# -- HTML ----------------------------------------------------------------------------------------

_COLORS = {"baseline": "#8c8c8c", "speculation": "#2b7bb9"}


def _bars(title: str, unit: str, rows: Sequence[tuple[str, float | None, float | None]]) -> str:
    """Grouped horizontal bars: per host, baseline and speculation."""
    rows = [r for r in rows if r[1] is not None or r[2] is not None]
    if not rows:
        return f"<p><em>{html.escape(title)}: no measurements.</em></p>"
    vmax = max(v for r in rows for v in r[1:] if v is not None) or 1.0
    label_w, bar_w, row_h = 170, 380, 34
    h = 40 + row_h * len(rows) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 90}" '
           f'height="{h}" role="img" aria-label="{html.escape(title)}">',
           f'<text x="0" y="16" font-weight="bold">{html.escape(title)} ({html.escape(unit)})'
           '</text>']
    for i, (host, base, cand) in enumerate(rows):
        y = 32 + i * row_h
        out.append(f'<text x="0" y="{y + 18}" font-size="12">{html.escape(host)}</text>')
        for j, (arm, v) in enumerate((("baseline", base), ("speculation", cand))):
            if v is None:
                continue
            w = max(1.0, bar_w * v / vmax)
            yy = y + 4 + j * 13
            out.append(f'<rect x="{label_w}" y="{yy}" width="{w:.1f}" height="11" '
                       f'fill="{_COLORS[arm]}"><title>{arm}: {v:.2f} {html.escape(unit)}'
                       '</title></rect>')
            out.append(f'<text x="{label_w + w + 4:.1f}" y="{yy + 10}" font-size="10">'
                       f'{v:.1f}</text>')
    ly = h - 8
    out.append(f'<rect x="{label_w}" y="{ly - 9}" width="10" height="10" '
               f'fill="{_COLORS["baseline"]}"/><text x="{label_w + 14}" y="{ly}" '
               'font-size="11">baseline (speculation off)</text>')
    out.append(f'<rect x="{label_w + 190}" y="{ly - 9}" width="10" height="10" '
               f'fill="{_COLORS["speculation"]}"/><text x="{label_w + 204}" y="{ly}" '
               'font-size="11">speculation</text>')
    out.append("</svg>")
    return "\n".join(out)


def _acceptance_chart(rows: Sequence[tuple[str, Sequence[float]]]) -> str:
    rows = [r for r in rows if r[1]]
    if not rows:
        return "<p><em>Acceptance per position: no speculative measurements.</em></p>"
    npos = max(len(r[1]) for r in rows)
    cell, label_w = 46, 170
    h = 40 + 26 * len(rows) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + cell * npos + 20}" '
           f'height="{h}" role="img" aria-label="acceptance per position">',
           '<text x="0" y="16" font-weight="bold">Acceptance rate per draft position</text>']
    for p in range(npos):
        out.append(f'<text x="{label_w + p * cell + 8}" y="32" font-size="11">pos {p + 1}'
                   '</text>')
    for i, (host, rates) in enumerate(rows):
        y = 40 + i * 26
        out.append(f'<text x="0" y="{y + 16}" font-size="12">{html.escape(host)}</text>')
        for p, r in enumerate(rates):
            r = max(0.0, min(1.0, float(r)))
            bh = 20 * r
            out.append(f'<rect x="{label_w + p * cell}" y="{y + 22 - bh:.1f}" width="{cell - 6}"'
                       f' height="{bh:.1f}" fill="{_COLORS["speculation"]}"><title>'
                       f'{html.escape(host)} position {p + 1}: {r:.2f}</title></rect>')
            out.append(f'<text x="{label_w + p * cell + 2}" y="{y + 12}" font-size="9">'
                       f'{r:.2f}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _method(r: Mapping[str, Any]) -> str:
    m = str(r.get("method") or "-")
    k = r.get("num_speculative_tokens")
    if m != "none" and isinstance(k, int) and k > 0:
        m += f" k={k}"
    sched = r.get("k_by_batch") or []
    if sched:
        m += " (per batch " + ", ".join(f"{a}-{b}: {kk}" for a, b, kk in sched) + ")"
    return m + (" [tuned]" if r.get("tune") or r.get("tuned") else "")


def index_html(reports: Sequence[Mapping[str, Any]], run_id: str,
               live: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """``live``: `specdec watch`'s rows by host (its watch file); they add live columns."""
    e = html.escape
    rows = []
    tpot, thr1, thr8, acc = [], [], [], []
    for r in reports:
        f = figures(r)
        host = str(r.get("host"))
        tpot.append((host, f["base_tpot"], f["cand_tpot"]))
        thr1.append((host, f["base_c1"], f["cand_c1"]))
        thr8.append((host, f["base_c8"], f["cand_c8"]))
        acc.append((host, f["per_position"]))
        rows.append(_host_row(r, f, live))
    head = "".join(f"<th>{h}</th>" for h in (
        "host", "device", "power mode", "method", "outcome", "c1 throughput gain (gate)",
        "TPOT change (gate)", "c8 gain", "acceptance length", "decode % of bw limit",
        "spec % of AL x limit", "phase", "reason", *(livecols.HEADERS if live else ())))
    tally, gated = _tally(reports)
    tuning = _tuning(reports)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>specdec rollout {e(run_id)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px;
 font-size: 13px; text-align: left; vertical-align: top; }}
svg {{ display: block; margin: 1.5em 0; font-family: system-ui, sans-serif; }}
</style></head><body>
<h1>specdec rollout {e(run_id)}</h1>
<p>{len(reports)} host(s): {tally}. Gated by the benchmark: {gated}.</p>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
<p>Roofline: {e(HOW)}. Hosts marked (emulated): figures of the engine emulator in device
time (what the device would show).</p>
{groups_html(reports)}
<h2>Baseline vs speculation</h2>
{_bars("TPOT p50 at concurrency 1 (lower is better)", "ms", tpot)}
{_bars("Output throughput at concurrency 1", "tok/s", thr1)}
{_bars("Output throughput at concurrency 8", "tok/s", thr8)}
<h2>Acceptance</h2>
{_acceptance_chart(acc)}
{tuning}
</body></html>
"""


def _host_row(r: Mapping[str, Any], f: Mapping[str, Any],
              live: Mapping[str, Mapping[str, Any]] | None) -> str:
    """One host's table row (``f``: its `figures`), with its live cells when watched."""
    e = html.escape
    host = str(r.get("host"))
    color = OUTCOME_COLORS.get(str(r.get("outcome")), "#000")
    al = f["acceptance_length"]
    device = str(r.get("device") or "-") + (" (emulated)" if f["emulated"] else "")
    return "<tr>" + "".join(f"<td>{x}</td>" for x in (
        e(host), e(device), e(str(f["power_mode"] or "-")), e(_method(r)),
        f'<b style="color:{color}">{e(str(r.get("outcome")))}</b>'
        + (f' ({e(str(r["previous_outcome"]))})' if r.get("previous_outcome") else ""),
        e(pct(f["c1_gain"])), e(pct(f["tpot_change"])), e(pct(f["c8_gain"])),
        f"{al:.2f}" if isinstance(al, int | float) else "-",
        roof(f["roofline_base_pct"]), roof(f["roofline_spec_pct"]),
        e(str(r.get("phase") or "-")), e(str(r.get("message") or "")),
        *(livecols.cells(live.get(host)) if live else ()),
    )) + "</tr>"


def _tally(reports: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The outcomes counted (coloured, in `OUTCOMES` order) and how many the gate decided."""
    counts: dict[str, int] = {}
    for r in reports:
        counts[str(r.get("outcome"))] = counts.get(str(r.get("outcome")), 0) + 1
    tally = ", ".join(f'<b style="color:{OUTCOME_COLORS.get(o, "#000")}">{counts[o]} {o}</b>'
                      for o in OUTCOMES if counts.get(o)) or "no hosts"
    return tally, sum(counts.get(o, 0) for o in GATED)


def _tuning(reports: Sequence[Mapping[str, Any]]) -> str:
    """Each tuned host's curve (empty when no host was tuned)."""
    charts = [tune_chart(str(r.get("host")), r.get("tune")) for r in reports]
    if not any(charts):
        return ""
    return ("<h2>Tuning (num_speculative_tokens: auto)</h2>\n"
            "<p>Throughput vs the baseline as the tune phase fitted it from the points it "
            "measured on the host (dots); lines per method compared.</p>\n"
            + "\n".join(c for c in charts if c))


def write_fleet(run_dir: Path, secret: str | None = None) -> None:
    reports = load_reports(run_dir)
    run_id = run_dir.name
    _write_atomic(run_dir / "summary.md", _scrub(summary_markdown(reports, run_id), secret))
    live = livecols.live_rows(run_dir.parent)  # `specdec watch`'s file, when present
    _write_atomic(run_dir / "index.html", _scrub(index_html(reports, run_id, live), secret))


# -- runs ----------------------------------------------------------------------------------------


def _runs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and p.name != CACHE_DIR
            and not p.name.startswith(".") and any(p.glob("*.json"))]


def latest_run(root: Path) -> Path:
    runs = _runs(root)
    if not runs:
        raise RolloutError(f"no rollout reports under {root}")
    return max(runs, key=lambda p: (p.stat().st_mtime, p.name))


def resolve_run(root: Path, run_id: str | None) -> Path:
    if run_id is None:
        return latest_run(root)
    if not _RUN_ID.fullmatch(run_id) or run_id == CACHE_DIR:
        raise RolloutError(f"run {run_id!r}: not a run id")
    path = root / run_id
    if not path.is_dir() or not any(path.glob("*.json")):
        known = sorted(p.name for p in _runs(root))
        hint = f" (known: {', '.join(known[-5:])})" if known else ""
        raise RolloutError(f"run {run_id!r}: unknown run id under {root}{hint}")
    return path
