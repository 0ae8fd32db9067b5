"""What runs on a host, from the release's own ``plan.json`` (``/var/lib/specdec/current``): the
plan it was rendered from, read back (checked: the host's files are input like any other)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from specdec.engines.registry import ENGINES
from specdec.errors import ConfigError
from specdec.plan.types import DynamoPlan, FitReport, GatePolicy, Plan, Socket

__all__ = ["plan_from_json", "time_scale"]


def _tuples(x: Any) -> Any:
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def _build(cls: Any, d: Any, what: str) -> Any:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{what}: not an object")
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            kw[f.name] = _tuples(d[f.name])
    try:
        return cls(**kw)
    except TypeError as exc:
        raise ConfigError(f"{what}: {' '.join(str(exc).split())}") from None


def plan_from_json(doc: Any, host: str) -> Plan:
    """The `Plan` of a release's ``plan.json`` (`ConfigError` naming what is wrong)."""
    what = f"{host}: /var/lib/specdec/current/plan.json"
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{what}: not a plan")
    d = dict(doc)
    d.pop("speculative", None)
    d["gate"] = _build(GatePolicy, d.get("gate") or {}, f"{what}: gate")
    d["fit"] = _build(FitReport, d.get("fit"), f"{what}: fit")
    if d.get("dynamo") is not None:
        d["dynamo"] = _build(DynamoPlan, d["dynamo"], f"{what}: dynamo")
    if isinstance(d.get("sockets"), list):
        d["sockets"] = [_build(Socket, s, f"{what}: sockets") for s in d["sockets"]]
    plan: Plan = _build(Plan, d, what)
    port = plan.port
    if plan.engine not in ENGINES:
        raise ConfigError(f"{what}: engine={plan.engine!r} is not one specdec knows")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"{what}: port={port!r} is not a port")
    if not isinstance(plan.method, str) or not isinstance(plan.num_speculative_tokens, int):
        raise ConfigError(f"{what}: method or num_speculative_tokens malformed")
    return plan


def time_scale(plan: Plan) -> float | None:
    """The lab emulator's time scale from the release's environment (``SPECDEC_EMU_TIME_SCALE``),
    for engines whose servers cannot be asked (a Dynamo worker's system server)."""
    try:
        v = float(dict(plan.env).get("SPECDEC_EMU_TIME_SCALE", ""))
    except (TypeError, ValueError):
        return None
    return v if 0 < v < 1e6 else None
