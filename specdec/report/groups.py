"""Serving groups in the fleet report: a row per group, one table per kind of group."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.engines.registry import ENGINES
from specdec.report.cells import OUTCOME_COLORS, figures, md_cell, pct

__all__ = ["group_kind", "group_lines", "groups", "groups_html"]

# A group's kind when its report names none (``group.kind``): its members' engine's; a group
# report without an engine is from the first engine that served groups.
DEFAULT_KIND = next(e.group_kind for e in ENGINES.values() if e.serves_groups)


def group_kind(report: Mapping[str, Any]) -> str:
    """What the group of a member's report is (the heading of its table)."""
    g = report.get("group")
    if isinstance(g, Mapping) and g.get("kind"):
        return str(g["kind"])
    engine = report.get("engine")
    if not engine:
        return DEFAULT_KIND
    found = ENGINES.get(str(engine))
    return found.group_kind if found is not None and found.group_kind else str(engine)


def groups(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The serving groups in these reports: name, kind, endpoint URL, members with their role
    and outcome, the group's outcome and figures (measured through its endpoint)."""
    out: dict[str, dict[str, Any]] = {}
    for r in reports:
        g = r.get("group")
        if not isinstance(g, Mapping) or not g.get("name"):
            continue
        row = out.setdefault(str(g["name"]), {
            "name": str(g["name"]), "kind": group_kind(r), "url": g.get("url"),
            "frontend": g.get("frontend"), "outcome": g.get("outcome") or r.get("outcome"),
            "members": [], "failed_member": g.get("failed_member"), "figures": figures(r),
            "message": r.get("message"),
        })
        row["members"].append((str(r.get("host")), str(g.get("role") or "worker"),
                               str(r.get("outcome"))))
    return list(out.values())


def _by_kind(reports: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in groups(reports):
        out.setdefault(row["kind"], []).append(row)
    return out


def group_lines(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """The Markdown sections of the fleet summary (none without groups)."""
    lines: list[str] = []
    for kind, rows in _by_kind(reports).items():
        lines += ["", f"## Serving groups ({kind})", "",
                  "Each group is verified, kept, disabled or rolled back as one, through its "
                  "frontend.", "",
                  "| group | frontend | members | outcome | c1 throughput gain | TPOT change "
                  "| c8 gain | acceptance length | reason |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for g in rows:
            f = g["figures"]
            acc = f["acceptance_length"]
            members = "; ".join(f"{h} ({role}): {out}" for h, role, out in g["members"])
            lines.append("| " + " | ".join(md_cell(x) for x in (
                g["name"], g["url"], members, g["outcome"], pct(f["c1_gain"]),
                pct(f["tpot_change"]), pct(f["c8_gain"]),
                f"{acc:.2f}" if isinstance(acc, int | float) else "-", g["message"],
            )) + " |")
    return lines


def groups_html(reports: Sequence[Mapping[str, Any]]) -> str:
    """The HTML sections of the fleet page ("" without groups)."""
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("group", "frontend", "members", "outcome",
                                              "c1 throughput gain", "TPOT change", "c8 gain",
                                              "reason"))
    sections = []
    for kind, rows in _by_kind(reports).items():
        body = []
        for g in rows:
            f = g["figures"]
            color = OUTCOME_COLORS.get(str(g["outcome"]), "#000")
            members = "<br>".join(e(f"{h} ({role}): {out}") for h, role, out in g["members"])
            body.append("<tr>" + "".join(f"<td>{x}</td>" for x in (
                e(g["name"]), e(str(g["url"] or "-")), members,
                f'<b style="color:{color}">{e(str(g["outcome"]))}</b>', e(pct(f["c1_gain"])),
                e(pct(f["tpot_change"])), e(pct(f["c8_gain"])), e(str(g["message"] or "")),
            )) + "</tr>")
        sections.append(f"<h2>Serving groups ({e(kind)})</h2><table><thead><tr>{head}</tr>"
                        f"</thead><tbody>{''.join(body)}</tbody></table>")
    return "\n".join(sections)
