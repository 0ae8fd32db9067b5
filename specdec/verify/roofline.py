"""Roofline figures of a verification: two plain percentages, each at most 100% when healthy.

* bandwidth limit (tok/s) = peak DRAM bandwidth in the host's power mode / bytes one decode step
  reads (the weights, less the input embedding table of which a step reads one row; an MoE
  reads its active experts);
* baseline decode = 1000 / TPOT p50 at concurrency 1, as a percent of that limit;
* speculative decode = 1000 / TPOT p50 at concurrency 1 with speculation, as a percent of
  acceptance length x the limit (a step reads the weights once and yields that many tokens).

Figures from an engine emulator are in device time (the bench converts them; see
`specdec.bench.device_time`); an unlabelled emulator result is scaled here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["HOW", "roofline_figures"]

HOW = ("decode tok/s = 1000 / TPOT p50 at concurrency 1; limit = peak bandwidth in the power "
       "mode / bytes a decode step reads; baseline % = decode / limit; speculative % = decode / "
       "(acceptance length x limit)")


def _decode_tok_s(arm: Mapping[str, Any] | None, level: str) -> float | None:
    tpot = ((arm or {}).get(level) or {}).get("tpot_ms_p50")
    return 1000.0 / tpot if isinstance(tpot, int | float) and tpot > 0 else None


def roofline_figures(report: Mapping[str, Any], *, bandwidth_gbs: float, decode_bytes: int,
                     level: str = "c1", time_scale: float = 1.0,
                     bandwidth_source: str = "", power_mode: str | None = None
                     ) -> dict[str, Any] | None:
    """The roofline block of a host report (None without a bandwidth or a size)."""
    if bandwidth_gbs <= 0 or decode_bytes <= 0:
        return None
    limit = bandwidth_gbs * 1e9 / decode_bytes
    out: dict[str, Any] = {
        "how": HOW, "bandwidth_gbs": bandwidth_gbs, "bandwidth_source": bandwidth_source,
        "power_mode": power_mode, "decode_bytes": decode_bytes, "limit_tok_s": round(limit, 3),
    }
    length = (report.get("acceptance") or {}).get("length")
    for arm, key in (("baseline", "baseline"), ("candidate", "speculative")):
        summ = report.get(arm)
        rate = _decode_tok_s(summ, level)
        if rate is None:
            continue
        if not (summ or {}).get("device_time") and time_scale != 1.0:
            rate *= time_scale  # wall-clock figures of an emulator running faster than the device
        out[f"{key}_decode_tok_s"] = round(rate, 3)
        if key == "baseline":
            out["baseline_pct"] = round(100.0 * rate / limit, 1)
        elif isinstance(length, int | float) and length > 0:
            out["acceptance_length"] = length
            out["speculative_pct"] = round(100.0 * rate / (length * limit), 1)
    return out
