"""What the engine emulator takes from one vLLM release, read from that release's own code.

It runs INSIDE the release's contract environment (`specdec_lab.contract.installer`), as
``VENV/bin/python -I vllm_parser.py --input IN.json --output OUT.json``, beside `vllm_check`
(whose set-up and stages it reuses) and, like it, imports nothing from specdec.
`specdec_lab.contract.parsergen` writes the output to ``parsers/vllm-X.json``; the emulator
(`specdec_lab.emulator.vllm_release`) validates ``vllm serve`` arguments with nothing else.

Input: ``{"models": {repo_id: config.json}, "probes": [{"id", "argv"}], "architectures": [...]}``.
Output:

serve_options      every action of the release's ``vllm serve`` parser: option strings, dest,
                   action, nargs, const, type (its function's name) and choices
speculative_config SpeculativeConfig's fields (name -> annotation), the ``method`` Literal, the
                   pydantic ``extra`` setting
probes             each sample argv through the release's parser, EngineArgs, ModelConfig and
                   SpeculativeConfig (`vllm_check.check_case`): accepted (with what the config
                   resolved) or refused (the stage and the exception line a traceback ends with)
v1_fallback        0.9.2-0.10.x only: the V0-fallback warnings that
                   ``EngineArgs._is_v1_supported_oracle`` logs for an accepted probe (vLLM would
                   then start its V0 engine)
eagle3             per architecture: does its model class implement the EAGLE-3 interface
                   (`vllm_check.eagle3_interface`), and the model runner's refusal when it does
                   not, read from the release's source (the runner needs weights: not run here)
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_check as vc  # noqa: E402 - beside this file; -I leaves its directory off sys.path

V = vc.V
_HF_ROOT: list[str] = []


def _qualified(exc: BaseException) -> str:
    """The exception line a traceback ends with (``pydantic_core._pydantic_core.
    ValidationError: ...``), without this machine's temporary paths or object addresses."""
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    text = f"{name}: {exc}"
    for root in _HF_ROOT:
        text = text.replace(root, "<hf-home>")
    return re.sub(r"0x[0-9a-f]{6,}", "0x...", text)[:vc.MAX_ERROR]


def _type_name(fn: Any) -> str | None:
    """A parser action's ``type``: builtins by name, vLLM's wrappers as ``wrapper:inner``."""
    if fn is None:
        return None
    name = getattr(fn, "__name__", type(fn).__name__)
    if name == "loads" and getattr(fn, "__module__", "") == "json":
        return "json"
    inner = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if callable(c.cell_contents)]
    return f"{name}:{_type_name(inner[0])}" if inner else name


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def serve_options() -> list[dict[str, Any]]:
    sub = next(a for a in V["parser"]._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for a in sub.choices["serve"]._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        choices = None
        if a.choices is not None:
            choices = [_plain(c) for c in a.choices]
            if isinstance(a.choices, (set, frozenset)):
                choices.sort(key=str)
        out.append({"flags": list(a.option_strings), "dest": a.dest,
                    "action": type(a).__name__, "nargs": _plain(a.nargs),
                    "const": _plain(a.const), "type": _type_name(a.type), "choices": choices})
    return out


def speculative_config() -> dict[str, Any]:
    facts = vc.release_facts()
    sc = V["SpeculativeConfig"]
    pyd = getattr(sc, "__pydantic_fields__", None) or {}
    fields = {}
    for f in vc.dataclasses.fields(sc):
        if f.name in vc.INTERNAL_FIELDS:
            continue
        ann = pyd[f.name].annotation if f.name in pyd else f.type
        fields[f.name] = ann if isinstance(ann, str) else repr(ann).replace("typing.", "")
    return {"fields": fields, "method_literal": facts["method_literal"],
            "extra": facts["extra"]}


def _v1_fallback(argv: list[str]) -> list[str]:
    """0.9.2's oracle (vllm/engine/arg_utils.py:1306): the speculative fallbacks it logs."""
    import vllm.engine.arg_utils as au

    if not hasattr(V["AsyncEngineArgs"], "_is_v1_supported_oracle"):
        return []
    args = vc._parse(argv[1:])
    args.model = args.model_tag or args.model
    ea = V["AsyncEngineArgs"].from_cli_args(args)
    seen: list[str] = []
    real = au._raise_or_fallback

    def record(feature_name: str, recommend_to_remove: bool) -> None:
        if "peculative" in feature_name:
            msg = f"{feature_name} is not supported by the V1 Engine. Falling back to V0. "
            seen.append(msg + (f"We recommend to remove {feature_name} from your config in "
                               "favor of the V1 Engine." if recommend_to_remove else ""))

    au._raise_or_fallback = record
    try:
        ea._is_v1_supported_oracle(ea.create_model_config())
    finally:
        au._raise_or_fallback = real
    return seen


def probe(case: dict[str, Any]) -> dict[str, Any]:
    r = vc.check_case(list(case["argv"]))
    out: dict[str, Any] = {"id": case["id"], "argv": case["argv"], "ok": r["ok"]}
    if r["ok"]:
        out["spec"] = r.get("spec")
        fallback = _v1_fallback(list(case["argv"]))
        if fallback:
            out["v1_fallback"] = fallback
        return out
    error = r.get("error", "")
    if r.get("stage") == "parse":  # the argparse line `vllm serve` prints before exiting 2
        error = error.removeprefix("ValueError: ")
    out.update(stage=r.get("stage"), error=error)
    return out


def _runner_refusal() -> dict[str, Any] | None:
    """The model runner's ``raise RuntimeError("Model does not support EAGLE3 interface ...")``
    (absent in 0.9.2, which calls Llama's hook directly)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm.v1.worker.gpu_model_runner")  # read, not imported
    path = spec.origin if spec and spec.origin else ""
    if not path:
        return None
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            fn = node.exc.func
            args = node.exc.args
            msg = args[0].value if args and isinstance(args[0], ast.Constant) else None
            if isinstance(fn, ast.Name) and isinstance(msg, str) and "EAGLE3 interface" in msg:
                where = path[path.rindex("vllm/"):]
                return {"error": f"{fn.id}: {msg}", "where": f"{where}:{node.lineno}"}
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    opts = ap.parse_args(argv)
    with open(opts.input) as f:
        data = json.load(f)
    _HF_ROOT.append(vc._hub(data["models"]))
    vc._text = _qualified  # check_case's error lines, as a traceback ends
    vc._load()
    probes = [probe(c) for c in data["probes"]]  # before eagle3_interface loads model classes
    eagle3 = {a: vc.eagle3_interface(a) for a in data["architectures"]}
    for info in eagle3.values():
        if "error" in info:
            info["error"] = info["error"].split("\n")[0]
    out = {"version": V["vllm"].__version__, "serve_options": serve_options(),
           "speculative_config": speculative_config(), "probes": probes,
           "eagle3": {"interface": eagle3, "runner_refusal": _runner_refusal()}}
    with open(opts.output, "w") as f:
        json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
