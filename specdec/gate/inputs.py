"""Reading the gate's inputs: a policy file and bench results, checked with one-line errors."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specdec.config.yamlfile import read_yaml
from specdec.errors import GateError
from specdec.plan.types import GatePolicy

__all__ = ["check_policy", "check_result", "load_policy", "load_result", "same_setup",
           "tokens_estimated"]

Result = Mapping[str, Any]


def load_policy(path: str | Path | None) -> GatePolicy:
    """GatePolicy from a YAML/JSON mapping of its fields (None: the default policy)."""
    if path is None:
        return GatePolicy()
    data = read_yaml(path, "policy", GateError)
    if not isinstance(data, dict):
        raise GateError(f"policy {path}: expected a mapping of GatePolicy fields")
    fields = {f.name: f for f in dataclasses.fields(GatePolicy)}
    for key, value in data.items():
        if key not in fields:
            raise GateError(f"policy {path}: unknown field {key!r} "
                            f"(known: {', '.join(sorted(fields))})")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise GateError(f"policy {path}: field {key!r} must be a number, got {value!r}")
        if fields[key].type in (int, "int") and not float(value).is_integer():
            raise GateError(f"policy {path}: field {key!r} must be an integer, got {value!r}")
    kw: dict[str, Any] = {k: (int(v) if fields[k].type in (int, "int") else float(v))
                          for k, v in data.items()}
    pol = GatePolicy(**kw)
    check_policy(pol, str(path))
    return pol


def check_policy(pol: GatePolicy, where: str) -> None:
    if not 0.5 <= pol.confidence < 1.0:
        raise GateError(f"policy {where}: field 'confidence' must be in [0.5, 1), "
                        f"got {pol.confidence}")
    if pol.max_rounds < 1:
        raise GateError(f"policy {where}: field 'max_rounds' must be >= 1, got {pol.max_rounds}")
    if not 0.5 <= pol.disable_confidence < 1.0:
        raise GateError(f"policy {where}: field 'disable_confidence' must be in [0.5, 1), "
                        f"got {pol.disable_confidence}")
    if not 1.0 <= pol.max_scale <= 8.0:
        raise GateError(f"policy {where}: field 'max_scale' must be in [1, 8], "
                        f"got {pol.max_scale}")
    if pol.keep_concurrency < 1 or pol.guard_concurrency < 1:
        raise GateError(f"policy {where}: concurrency levels must be >= 1")
    if not 0.0 <= pol.max_regression_c8 < 1.0:
        raise GateError(f"policy {where}: field 'max_regression_c8' must be in [0, 1), "
                        f"got {pol.max_regression_c8}")
    if not 0.0 <= pol.indifference < 0.5:
        raise GateError(f"policy {where}: field 'indifference' must be in [0, 0.5), "
                        f"got {pol.indifference}")
    for name in ("run_noise", "request_noise"):
        if not 0.0 <= getattr(pol, name) < 1.0:
            raise GateError(f"policy {where}: field {name!r} must be in [0, 1), "
                            f"got {getattr(pol, name)}")


def check_result(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise GateError(f"{where}: expected a bench result object")
    levels = data.get("concurrency")
    if not isinstance(levels, dict) or not levels:
        raise GateError(f"{where}: missing field 'concurrency' (not a specdec bench result?)")
    for name, lvl in levels.items():
        if not isinstance(lvl, dict):
            raise GateError(f"{where}: field concurrency.{name} must be an object")
        for key in ("throughput_tok_s", "tpot_ms_p50"):
            v = lvl.get(key)
            if v is not None and (not isinstance(v, int | float) or isinstance(v, bool)):
                raise GateError(f"{where}: field concurrency.{name}.{key} must be a number, "
                                f"got {v!r}")
        reqs = lvl.get("requests")
        if reqs is not None and (not isinstance(reqs, list)
                                 or not all(isinstance(r, dict) for r in reqs)):
            raise GateError(f"{where}: field concurrency.{name}.requests must be a list of "
                            "objects")
    return data


def load_result(path: str | Path) -> dict[str, Any] | list[dict[str, Any]]:
    """A bench result (object) or several rounds of one arm (a list of results)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GateError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if isinstance(data, list):
        if not data:
            raise GateError(f"{path}: empty list of results")
        return [check_result(d, f"{path}[{i}]") for i, d in enumerate(data)]
    return check_result(data, str(path))



def tokens_estimated(results: Sequence[Result]) -> list[str]:
    """Where token counts were estimated (no usage, no tokenizer): one line per level."""
    out = []
    for i, r in enumerate(results):
        for name, lvl in (r.get("concurrency") or {}).items():
            n = lvl.get("tokens_estimated") if isinstance(lvl, Mapping) else None
            if isinstance(n, int) and n > 0:
                out.append(f"result {i} concurrency {name}: {n} responses")
    return out



def same_setup(bases: Sequence[Result], cands: Sequence[Result]) -> list[str]:
    """Refuse arms measured differently; return warnings for softer differences."""
    warnings: list[str] = []

    def conf(r: Result) -> Mapping[str, Any]:
        c = r.get("config")
        return c if isinstance(c, Mapping) else {}

    for key in ("max_tokens", "endpoint"):
        vals = {json.dumps(conf(r).get(key)) for r in [*bases, *cands]}
        if len(vals) > 1:
            raise GateError(f"baseline and candidate were measured with different {key} "
                            f"({', '.join(sorted(vals))}); rerun with the same settings")
    # (request counts may differ: the gate measures fewer baseline requests by design)
    if {json.dumps(r.get("prompts")) for r in bases} != {json.dumps(r.get("prompts"))
                                                         for r in cands}:
        warnings.append("baseline and candidate differ in prompts")
    for r in [*bases, *cands]:
        for w in r.get("warnings") or []:
            warnings.append(f"bench: {w}")
    return warnings
