"""The vLLM contract checker: ``vllm serve`` argv lists judged by one vLLM release's own code.

It runs INSIDE that release's virtual environment (`specdec_lab.contract.installer`), as
``VENV/bin/python -I vllm_check.py --input IN.json --output OUT.json``, and imports nothing from
specdec: every verdict comes from the release. On this CPU-only machine vLLM's CPU platform is
made the current platform before anything else of vLLM is imported.

Input: ``{"models": {repo_id: config.json}, "cases": [{"id", "argv"}], "architectures": [...]}``.
Each model's config.json goes into a throw-away Hugging Face cache (``HF_HUB_OFFLINE=1``), so the
release resolves exactly the repo ids the argv names, offline. Per case, in order, as
``vllm serve`` runs them (vllm/entrypoints/cli/main.py, serve.py, engine/arg_utils.py):

parse            the ``vllm`` parser with the ``serve`` subcommand (``make_arg_parser``)
validate         ``ServeSubcommand.validate`` (``validate_parsed_serve_args``)
engine_args      ``AsyncEngineArgs.from_cli_args``
model_config     ``create_model_config()``: the target's config.json, ``--max-model-len`` ...
speculative      ``create_speculative_config(target, ParallelConfig)``: ``SpeculativeConfig``
                 with the draft's config.json, the method literal, every architecture gate

``create_engine_config()`` is not run: on vLLM's CPU platform it follows CPU-only rules (0.11.0
falls back to its V0 engine for gpt-oss there and then refuses EAGLE with chunked prefill), which
say nothing about the GPU the argv is for.

Output: the release's version, its SpeculativeConfig facts (fields, method literal, pydantic
``extra``) and finished reasons (``FinishReason``: one ``vllm:request_success`` child each), one
result per case and, per architecture, whether its model class implements the EAGLE-3 interface
the model runner requires.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
import typing
from typing import Any

# Set up by `_load` (vLLM must not be imported before the environment and platform are set).
V: dict[str, Any] = {}
MAX_ERROR = 4000
# SpeculativeConfig fields the engine fills itself (not --speculative-config keys).
INTERNAL_FIELDS = ("target_model_config", "target_parallel_config", "draft_model_config",
                   "draft_parallel_config", "enable_chunked_prefill", "disable_log_stats")


def _hub(models: dict[str, dict[str, Any]]) -> str:
    """A Hugging Face cache holding each model's config.json (models--org--name/refs/main +
    snapshots/<sha>/config.json, as huggingface_hub lays it out); the environment points at it."""
    root = tempfile.mkdtemp(prefix="specdec-contract-hf-")
    hub = os.path.join(root, "hub")
    for repo, cfg in models.items():
        sha = hashlib.sha1(repo.encode()).hexdigest()
        d = os.path.join(hub, "models--" + repo.replace("/", "--"))
        os.makedirs(os.path.join(d, "refs"))
        os.makedirs(os.path.join(d, "snapshots", sha))
        with open(os.path.join(d, "refs", "main"), "w") as f:
            f.write(sha)
        with open(os.path.join(d, "snapshots", sha, "config.json"), "w") as f:
            json.dump(cfg, f)
    os.environ.update({
        "HF_HOME": root, "HF_HUB_CACHE": hub, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_LOGGING_LEVEL": "ERROR",
    })
    for name in ("HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_TOKEN", "VLLM_USE_V1"):
        os.environ.pop(name, None)
    return root


def _load() -> None:
    """Import the release's CLI and config classes on vLLM's CPU platform."""
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # no GPU here; set before the rest imports

    import vllm
    import vllm.entrypoints.cli.serve as serve
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:  # 0.12+
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.config import ParallelConfig, SpeculativeConfig
    from vllm.model_executor.models import registry
    from vllm.v1.engine import FinishReason

    # ModelRegistry inspects each architecture in a fresh `python -c` (10-20 s each here); run
    # the same function in this process instead.
    if hasattr(registry, "_run_in_subprocess"):
        registry._run_in_subprocess = lambda fn: fn()
    V.update(vllm=vllm, serve=serve, AsyncEngineArgs=AsyncEngineArgs,
             Parser=FlexibleArgumentParser, ParallelConfig=ParallelConfig,
             SpeculativeConfig=SpeculativeConfig, registry=registry, FinishReason=FinishReason)
    # The `vllm` parser with only `serve` registered, as vllm/entrypoints/cli/main.py builds it
    # (ServeSubcommand.subparser_init calls make_arg_parser); built once, it is slow.
    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    sub = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    for cmd in serve.cmd_init():
        cmd.subparser_init(sub).set_defaults(dispatch_function=cmd.cmd)
        cmds[cmd.name] = cmd
    V.update(parser=parser, cmds=cmds)


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR]


def _literals(tp: Any) -> list[str]:
    """The string values of a (nested, Optional-wrapped) Literal annotation, in order."""
    if isinstance(tp, str):
        return []
    out: list[str] = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out += [a for a in _literals(arg) if a not in out]
    return out


def release_facts() -> dict[str, Any]:
    sc = V["SpeculativeConfig"]
    fields = [f.name for f in dataclasses.fields(sc)]
    annotation: Any = None
    pyd = getattr(sc, "__pydantic_fields__", None)
    if pyd and "method" in pyd:
        annotation = pyd["method"].annotation
    if annotation is None or not _literals(annotation):
        annotation = typing.get_type_hints(sc).get("method")
    config = getattr(sc, "__pydantic_config__", None) or {}
    return {
        "spec_fields": sorted(f for f in fields if f not in INTERNAL_FIELDS),
        "internal_fields": sorted(f for f in fields if f in INTERNAL_FIELDS),
        "method_literal": _literals(annotation),
        "extra": config.get("extra"),
        "finish_reasons": [str(r) for r in V["FinishReason"]],
    }


def _spec_summary(sc: Any) -> dict[str, Any] | None:
    if sc is None:
        return None
    out = {}
    for k in ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
              "prompt_lookup_min", "prompt_lookup_max"):
        v = getattr(sc, k, None)
        out[k] = v if isinstance(v, (int, str, type(None))) else str(v)
    return out


def _parse(words: list[str]) -> Any:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return V["parser"].parse_args(words)
    except SystemExit as exc:  # argparse's error(): the message is the last stderr line
        lines = [x for x in err.getvalue().splitlines() if x.strip()]
        raise ValueError(lines[-1] if lines else f"argparse exit {exc.code}") from None


def check_case(argv: list[str]) -> dict[str, Any]:
    res: dict[str, Any] = {"ok": False, "stages": []}
    stage = "parse"

    def ran(name: str) -> None:
        res["stages"].append(name)

    try:
        if not argv or os.path.basename(argv[0]) != "vllm":
            raise ValueError(f"not a vllm command line: {argv[:2]}")
        args = _parse(argv[1:])
        if args.subparser != "serve":
            raise ValueError("not `vllm serve`")
        ran(stage)
        stage = "validate"
        V["cmds"]["serve"].validate(args)
        ran(stage)
        stage = "engine_args"
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag  # as ServeSubcommand.cmd does
        ea = V["AsyncEngineArgs"].from_cli_args(args)
        ran(stage)
        stage = "model_config"
        mc = ea.create_model_config()
        ran(stage)
        stage = "speculative"
        pc = V["ParallelConfig"](tensor_parallel_size=ea.tensor_parallel_size,
                                 pipeline_parallel_size=ea.pipeline_parallel_size,
                                 data_parallel_size=ea.data_parallel_size)
        sc = _create_speculative(ea, mc, pc)
        res["spec"] = _spec_summary(sc)
        ran(stage)
    except Exception as exc:
        res.update(stage=stage, error=_text(exc))
        if stage == "parse" and not isinstance(exc, ValueError):
            res["trace"] = traceback.format_exc(limit=4)
        return res
    res["ok"] = True
    return res


def _create_speculative(ea: Any, mc: Any, pc: Any) -> Any:
    """``create_speculative_config`` with the keyword arguments this release takes."""
    import inspect

    kw = {"target_model_config": mc, "target_parallel_config": pc,
          "enable_chunked_prefill": ea.enable_chunked_prefill,
          "disable_log_stats": ea.disable_log_stats}
    params = inspect.signature(ea.create_speculative_config).parameters
    return ea.create_speculative_config(**{k: v for k, v in kw.items() if k in params})


def eagle3_interface(arch: str) -> dict[str, Any]:
    """Whether the target class implements what the model runner requires for EAGLE-3:
    ``supports_eagle3(model)`` (0.11+ gpu_model_runner.py), before that the Llama-only
    ``get_eagle3_aux_hidden_state_layers`` it calls directly (0.9.2 gpu_model_runner.py:1798)."""
    reg = V["registry"].ModelRegistry.models.get(arch)
    if reg is None:
        return {"registered": False, "eagle3": False}
    try:
        cls = reg.load_model_cls()
    except Exception as exc:
        return {"registered": True, "eagle3": False, "error": _text(exc)}
    try:
        from vllm.model_executor.models.interfaces import supports_eagle3
    except ImportError:
        supports_eagle3 = None
    if supports_eagle3 is None:
        ok = hasattr(cls, "get_eagle3_aux_hidden_state_layers")
        return {"registered": True, "eagle3": ok, "via": "get_eagle3_aux_hidden_state_layers"}
    return {"registered": True, "eagle3": bool(supports_eagle3(cls)), "via": "supports_eagle3"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", help="cases JSON (see the module docstring)")
    ap.add_argument("--output", help="results JSON")
    ap.add_argument("--probe", action="store_true", help="only import the release and exit")
    opts = ap.parse_args(argv)
    data: dict[str, Any] = {"models": {}, "cases": [], "architectures": []}
    if opts.input:
        with open(opts.input) as f:
            data = json.load(f)
    _hub(data.get("models", {}))
    t0 = time.monotonic()
    _load()
    import_s = time.monotonic() - t0
    if opts.probe:
        print(f"vllm {V['vllm'].__version__}: imported in {import_s:.1f} s")
        return 0
    t1 = time.monotonic()
    results = []
    for case in data["cases"]:
        t = time.monotonic()
        try:
            r = check_case(list(case["argv"]))
        except BaseException as exc:  # a bug here, not a verdict of the release
            r = {"ok": False, "stage": "checker", "error": _text(exc),
                 "trace": traceback.format_exc(limit=6)}
        results.append({"id": case["id"], **r, "s": round(time.monotonic() - t, 3)})
    interfaces = {a: eagle3_interface(a) for a in data.get("architectures", [])}
    out = {"version": V["vllm"].__version__, "import_s": round(import_s, 2),
           "check_s": round(time.monotonic() - t1, 2), "facts": release_facts(),
           "results": results, "eagle3_interface": interfaces}
    text = json.dumps(out, indent=1, default=str)
    if opts.output:
        with open(opts.output, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
