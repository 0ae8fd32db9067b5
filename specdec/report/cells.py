"""What the fleet report's tables share: a host report's figures, how their cells are written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OUTCOME_COLORS", "figures", "md_cell", "pct", "roof"]

OUTCOME_COLORS = {"kept": "#1a7f37", "disabled": "#9a6700", "held": "#bc4c00",
                  "not_verified": "#6639ba", "no_speculation": "#57606a",
                  "rolled_back": "#cf222e", "failed": "#cf222e", "unchanged": "#57606a",
                  "skipped": "#57606a", "unreachable": "#8250df"}


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _ratio(cand: Any, base: Any) -> float | None:
    if isinstance(cand, int | float) and isinstance(base, int | float) and base > 0:
        return float(cand) / float(base) - 1.0
    return None


def _gate_ratio(rep: Mapping[str, Any], key: str) -> float | None:
    """The gate's own estimate (`specdec.gate.decide.Decision.figures`): the figure its reason
    names."""
    r = _get(rep, "gate", "figures", key)
    return float(r) - 1.0 if isinstance(r, int | float) else None


def _either(gate: float | None, plain: float | None) -> float | None:
    return gate if gate is not None else plain


def figures(rep: Mapping[str, Any]) -> dict[str, Any]:
    """Headline numbers of one host report (None where not measured). The gains are the gate's
    estimates (stratified by prompt category, robust step times: the figures its reason
    quotes); a host without a gate decision shows the plain ratio of the arms' level figures."""
    b, c = rep.get("baseline"), rep.get("candidate")
    return {
        "c1_gain": _either(_gate_ratio(rep, "throughput_ratio_c1"), _ratio(
            _get(c, "c1", "throughput_tok_s"), _get(b, "c1", "throughput_tok_s"))),
        "tpot_change": _either(_gate_ratio(rep, "tpot_p50_ratio_c1"), _ratio(
            _get(c, "c1", "tpot_ms_p50"), _get(b, "c1", "tpot_ms_p50"))),
        "c8_gain": _either(_gate_ratio(rep, "throughput_ratio_c8"), _ratio(
            _get(c, "c8", "throughput_tok_s"), _get(b, "c8", "throughput_tok_s"))),
        "acceptance_length": _get(rep, "acceptance", "length"),
        "per_position": _get(rep, "acceptance", "per_position") or [],
        "base_tpot": _get(b, "c1", "tpot_ms_p50"),
        "cand_tpot": _get(c, "c1", "tpot_ms_p50"),
        "base_c1": _get(b, "c1", "throughput_tok_s"),
        "cand_c1": _get(c, "c1", "throughput_tok_s"),
        "base_c8": _get(b, "c8", "throughput_tok_s"),
        "cand_c8": _get(c, "c8", "throughput_tok_s"),
        "roofline_base_pct": _get(rep, "roofline", "baseline_pct"),
        "roofline_spec_pct": _get(rep, "roofline", "speculative_pct"),
        "power_mode": _get(rep, "power", "power_mode") or _get(rep, "roofline", "power_mode"),
        "emulated": _emulated(rep),
    }


def _emulated(rep: Mapping[str, Any]) -> float | None:
    """The time scale when the host's figures come from an engine emulator (device time)."""
    for arm in ("baseline", "candidate"):
        scale = _get(rep, arm, "device_time", "time_scale")
        if isinstance(scale, int | float):
            return float(scale)
    return None


def roof(x: Any) -> str:
    return f"{x:.0f}%" if isinstance(x, int | float) else "-"


def pct(x: Any) -> str:
    return f"{x:+.1%}" if isinstance(x, int | float) else "-"


def md_cell(text: Any) -> str:
    s = " ".join(str(text if text is not None else "-").split())
    return s.replace("|", "\\|") or "-"
