"""Dynamo serving groups in the fleet report: a row per group (its frontend, each member with
its role and outcome, the figures measured through the frontend), in Markdown and HTML."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.report_format import OUTCOME_COLORS, figures, md_cell, pct

__all__ = ["group_lines", "groups", "groups_html"]


def groups(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Dynamo serving groups in these reports: name, frontend URL, members with their role and
    outcome, the group's outcome and figures (measured through the frontend)."""
    out: dict[str, dict[str, Any]] = {}
    for r in reports:
        g = r.get("group")
        if not isinstance(g, Mapping) or not g.get("name"):
            continue
        row = out.setdefault(str(g["name"]), {
            "name": str(g["name"]), "url": g.get("url"), "frontend": g.get("frontend"),
            "outcome": g.get("outcome") or r.get("outcome"), "members": [],
            "failed_member": g.get("failed_member"), "figures": figures(r),
            "message": r.get("message"),
        })
        row["members"].append((str(r.get("host")), str(g.get("role") or "worker"),
                               str(r.get("outcome"))))
    return list(out.values())


def group_lines(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = groups(reports)
    if not rows:
        return []
    lines = ["", "## Serving groups (NVIDIA Dynamo)", "",
             "Each group is verified, kept, disabled or rolled back as one, through its "
             "frontend.", "",
             "| group | frontend | members | outcome | c1 throughput gain | TPOT change | c8 gain "
             "| acceptance length | reason |", "|---|---|---|---|---|---|---|---|---|"]
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
    rows = groups(reports)
    if not rows:
        return ""
    e = html.escape
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
    head = "".join(f"<th>{h}</th>" for h in ("group", "frontend", "members", "outcome",
                                              "c1 throughput gain", "TPOT change", "c8 gain",
                                              "reason"))
    return (f"<h2>Serving groups (NVIDIA Dynamo)</h2><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")

