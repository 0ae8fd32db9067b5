"""``vllm serve`` / ``vllm --version``: vLLM's argument parser and config validation."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from specdec.engines.version import Version
from specdec.engines.vllm.facts import K_ERROR, VllmFacts, method_literal, vllm_facts
from specdec_lab.emulator.profiles import ModelSpec, resolve_model_ref
from specdec_lab.emulator.runtime import ServeConfig, StartupError, emulated_version
from specdec_lab.emulator.setup import EngineSetup, spec_kind

__all__ = ["build_parser", "config_from_args", "parse_spec_config", "normalize_argv"]

KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
             "fp8_ds_mla")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


def _version_text() -> str:
    return emulated_version("vllm")


def _human_int(text: str) -> int:
    """vLLM accepts 1k (1000), 1K (1024), 1m, 1M ..."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid human-readable int value: {text!r}")
    num, unit = float(m.group(1)), m.group(2)
    mult = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2, "g": 1000**3,
            "G": 1024**3}[unit]
    return int(num * mult)


def _json_loads(text: str) -> Any:
    return json.loads(text)


_json_loads.__name__ = "loads"


def normalize_argv(argv: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser: ``--max_model_len`` means ``--max-model-len``."""
    out = []
    for a in argv:
        if a.startswith("--") and "_" in a.split("=", 1)[0]:
            key, eq, val = a.partition("=")
            a = key.replace("_", "-") + eq + val
        out.append(a)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", allow_abbrev=False,
                                description="vLLM CLI (specdec engine emulator)")
    p.add_argument("-v", "--version", action="version", version=_version_text())
    sub = p.add_subparsers(dest="subcommand", required=True)
    s = sub.add_parser("serve", allow_abbrev=False,
                       usage="vllm serve [model_tag] [options]",
                       help="Start the vLLM OpenAI Compatible API server.")
    s.add_argument("model_tag", nargs="?")
    s.add_argument("--model")
    s.add_argument("--host")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", nargs="+")
    s.add_argument("--api-key", nargs="+")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--max-model-len", type=_human_int)
    s.add_argument("--max-num-seqs", type=int)
    s.add_argument("--max-num-batched-tokens", type=_human_int)
    s.add_argument("--speculative-config", type=_json_loads)
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--kv-cache-dtype", choices=KV_DTYPES, default="auto")
    s.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=None)
    s.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=None)
    s.add_argument("--dtype", choices=DTYPES, default="auto")
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("-tp", "--tensor-parallel-size", type=int, default=1)
    s.add_argument("-pp", "--pipeline-parallel-size", type=int, default=1)
    s.add_argument("--seed", type=int)
    s.add_argument("--quantization", "-q")
    s.add_argument("--revision")
    s.add_argument("--tokenizer")
    s.add_argument("--download-dir")
    s.add_argument("--load-format", default="auto")
    s.add_argument("--generation-config", default="auto")
    s.add_argument("--block-size", type=int, choices=[1, 8, 16, 32, 64, 128])
    s.add_argument("--swap-space", type=float)
    s.add_argument("--max-logprobs", type=int)
    s.add_argument("--disable-log-requests", action="store_true")
    s.add_argument("--enable-log-requests", action="store_true")
    s.add_argument("--disable-log-stats", action="store_true")
    s.add_argument("--disable-uvicorn-access-log", action="store_true")
    s.add_argument("--uvicorn-log-level", default="info",
                   choices=["debug", "info", "warning", "error", "critical", "trace"])
    s.add_argument("--enable-prompt-tokens-details", action="store_true")
    s.add_argument("--show-hidden-metrics-for-version")
    s.add_argument("--compilation-config", "-O")
    s.add_argument("--root-path")
    s.add_argument("--chat-template")
    s.add_argument("--hf-token", nargs="?", const=True, help=argparse.SUPPRESS)
    return p


def _fail(msg: str) -> StartupError:
    return StartupError(msg, stage="config")


def _unknown_model(ref: str) -> StartupError:
    return _fail(
        f"OSError: {ref} is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a "
        "token having permission to this repo either by logging in with `hf auth login` or by "
        "passing `token=<your_token>`"
    )


def _guess_method(model: str | None, v: Version) -> str:
    """SpeculativeConfig.__post_init__'s guess when ``method`` is omitted."""
    name = (model or "").lower()
    if model is None or name in ("ngram", "[ngram]"):
        return "ngram"
    if "eagle-" in name:
        return "eagle"
    if "eagle3" in name:
        # 0.9.2-0.10.1 match "eagle3-" as EAGLE-1 (vllm/config.py:2685-2689 in 0.9.2)
        return "eagle" if v < Version.parse("0.10.2") else "eagle3"
    return "draft_model"


def _pydantic(field: str, message: str, kind: str, value: Any) -> StartupError:
    return _fail(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        f"SpeculativeConfig\n{field}\n  {message} [type={kind}, input_value={value!r}, "
        f"input_type={type(value).__name__}]")


def _value_error(message: str, cfg: dict[str, Any]) -> StartupError:
    """A ValueError raised in SpeculativeConfig's model validator, as pydantic wraps it."""
    return _fail(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        f"SpeculativeConfig\n  Value error, {message} [type=value_error, "
        f"input_value=ArgsKwargs((), {cfg!r}), input_type=ArgsKwargs]")


def _check_keys(cfg: dict[str, Any], facts: VllmFacts) -> dict[str, Any]:
    """Unknown keys: dropped silently before 0.16.0, refused from it (extra='forbid')."""
    if "tensor_parallel_size" in cfg and "tensor_parallel_size" in facts.spec_keys:
        raise _fail("ValueError: 'tensor_parallel_size' is not a valid argument in the "
                    "speculative_config. Please pass 'draft_tensor_parallel_size' instead.")
    known = facts.spec_keys - {"tensor_parallel_size"}
    unknown = [k for k in cfg if k not in known]
    if unknown and facts.unknown_keys.value == "reject":
        key = unknown[0]
        raise _pydantic(key, "Unexpected keyword argument", "unexpected_keyword_argument",
                        cfg[key])
    return {k: v for k, v in cfg.items() if k in known}


def parse_spec_config(
    raw: Any, target: ModelSpec, *, tp: int, max_model_len: int, facts: VllmFacts
) -> tuple[str, int, ModelSpec | None, dict[str, Any], list[str]]:
    """Validate ``--speculative-config`` like release ``facts.version``'s SpeculativeConfig
    (`specdec.engines.vllm.facts`). Returns (method, k, draft spec, extras, warnings); raises
    `StartupError` with that release's text."""
    warnings: list[str] = []
    if not isinstance(raw, dict):
        raise _fail(f"ValueError: --speculative-config must be a JSON object, got {raw!r}")
    cfg = _check_keys(dict(raw), facts)
    model = cfg.get("model")
    if model is not None and not isinstance(model, str):
        raise _pydantic("model", "Input should be a valid string", "string_type", model)
    method = cfg.get("method")
    if method is None:
        method = _guess_method(model, facts.version)
    literal = method_literal(facts.version)
    if method not in literal:
        allowed = ", ".join(f"'{m}'" for m in literal)
        raise _pydantic("method", f"Input should be {allowed}", "literal_error", method)
    if method.endswith("_mtp") and "mtp" in literal:
        warnings.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    state = facts.method(method)
    if state.value == "refused":
        raise _fail(state.error or f"NotImplementedError: {method}")
    if state.value == "v0":
        warnings.append(state.error or "Falling back to V0.")
    k = cfg.get("num_speculative_tokens")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
        raise _pydantic("num_speculative_tokens", "Input should be a valid integer", "int_type",
                        k)
    lookup = method in ("ngram", "ngram_gpu", "suffix")
    if model is None:
        if k is None:
            raise _fail("ValueError: num_speculative_tokens must be provided with speculative "
                        "model unless the draft model config contains an n_predict parameter.")
        if method == "mtp":
            model = target.id
        elif not lookup:
            word = "but " if facts.version >= Version.parse("0.11.0") else ""
            raise _fail(f"ValueError: num_speculative_tokens was provided {word}without "
                        "speculative model.")
    elif k is None:
        raise _fail("ValueError: A speculative model was provided, but `num_speculative_tokens` "
                    "was not provided")
    assert k is not None
    if k <= 0:
        raise _fail(K_ERROR.format(k=k))
    extras: dict[str, Any] = {}
    if method in ("ngram", "ngram_gpu"):
        extras["prompt_lookup"] = _prompt_lookup(cfg)
    dtp = cfg.get("draft_tensor_parallel_size")
    if dtp is not None and dtp not in (1, tp):
        raise _fail(f"ValueError: speculative_draft_tensor_parallel_size={dtp} cannot be other "
                    "value than 1 or target model tensor_parallel_size=" + str(tp))
    draft: ModelSpec | None = None
    if method == "mtp":
        raise _fail(
            f"ValueError: Speculative method 'mtp' needs MTP layers in the target model, but "
            f"{target.id} ({target.architecture}) has none (num_nextn_predict_layers=0).")
    if method == "eagle3":
        gate = facts.eagle3_target(target.model_type, target.architecture)
        if not gate.value and gate.error and gate.error.startswith("RuntimeError"):
            raise StartupError(gate.error, stage="load", progress=0.3)
        if not gate.value:
            raise _value_error(gate.error or "Eagle3 unsupported", raw)
    if not lookup:
        assert model is not None
        draft = _draft_spec(model, method, target, cfg, max_model_len)
        if draft.kind == "head" and draft.head_format:
            fmt = facts.head_format(draft.head_format)
            if not fmt.value:  # the release reads the head's config.json and cannot
                raise _fail((fmt.error or "ValueError: unknown head format").format(ref=model))
    kb = cfg.get("num_speculative_tokens_per_batch_size")
    if kb is not None:
        extras["k_by_batch"] = _per_batch_size(kb)
    extras["enforce_eager"] = cfg.get("enforce_eager")
    return method, int(k), draft, extras, warnings


def _prompt_lookup(cfg: dict[str, Any]) -> tuple[int, int]:
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if lo is None and hi is None:
        lo = hi = 5
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise _fail(f"ValueError: prompt_lookup_min={lo} and prompt_lookup_max={hi} must be "
                    "integers")
    if lo < 1:
        raise _fail(f"ValueError: prompt_lookup_min={lo} must be > 0")
    if hi < 1:
        raise _fail(f"ValueError: prompt_lookup_max={hi} must be > 0")
    if lo > hi:
        raise _fail(f"ValueError: prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    return lo, hi


def _draft_spec(model: str, method: str, target: ModelSpec, cfg: dict[str, Any],
                max_model_len: int) -> ModelSpec:
    draft = resolve_model_ref(model)
    if draft is None:
        raise _unknown_model(model)
    if method in ("eagle", "eagle3", "dflash") and draft.kind != "head":
        raise _fail(f"ValueError: {model} is not an EAGLE draft model: its architecture "
                    f"{draft.architecture} has no EAGLE layers (method='{method}').")
    if method == "draft_model" and draft.kind == "head":
        raise _fail(f"ValueError: {model} is an EAGLE head, not a standalone draft model; "
                    "use method 'eagle3'.")
    if method in ("medusa", "mlp_speculator") and draft.kind != "head":
        raise _fail(f"ValueError: {model} is not a {method} speculator.")
    if draft.vocab_size != target.vocab_size:
        raise _fail(
            "ValueError: Target and draft model should have the same vocabulary size. "
            f"Target model vocab_size={target.vocab_size}. Draft model "
            f"vocab_size={draft.vocab_size}. NOTE: In current version of vLLM, draft model "
            "and target model should have the same tokenizer.")
    smax = cfg.get("max_model_len")
    if smax is not None:
        if smax > draft.max_context:
            raise _fail(f"ValueError: speculative_max_model_len={smax} cannot be larger than "
                        f"draft_max_model_len={draft.max_context}")
        if smax > max_model_len:
            raise _fail(f"ValueError: speculative_max_model_len={smax} cannot be larger than "
                        f"target max_model_len={max_model_len}")
    return draft


def _per_batch_size(kb: Any) -> tuple[tuple[int, int, int], ...]:
    """0.24.0 vllm/v1/spec_decode/dynamic/utils.py:7-74 (checked when the scheduler starts)."""
    pre = "num_speculative_tokens_per_batch_size"
    if not isinstance(kb, list) or not kb:
        raise _fail(f"ValueError: {pre} must be a non-empty list of (range_start, range_end, "
                    "num_speculative_tokens) entries.")
    rows = []
    for r in kb:
        if not isinstance(r, list | tuple) or len(r) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in r):
            raise _fail(f"ValueError: Each {pre} entry must be a 3-item sequence")
        a, b, k = r
        if a < 1 or b < 1:
            raise _fail(f"ValueError: Batch-size range ({a}, {b}) must be positive.")
        if a > b:
            raise _fail(f"ValueError: Batch-size range start must be <= end for ({a}, {b})")
        if k < 0:
            raise _fail(f"ValueError: {pre} values must be >= 0.")
        rows.append((a, b, k))
    rows.sort()
    for (_, b1, _), (a2, _, _) in zip(rows, rows[1:], strict=False):
        if a2 <= b1:
            raise _fail("ValueError: Batch-size ranges must be non-overlapping and sorted.")
    if rows[0][0] != 1:
        raise _fail("ValueError: The first batch-size range must start at 1 so every runtime "
                    "batch size has a defined schedule.")
    return tuple(rows)


def _mask(args: argparse.Namespace, defaults: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in vars(args).items():
        if k == "subcommand" or getattr(defaults, k, None) == v:
            continue
        if k in ("api_key", "hf_token"):
            v = "******"
        out[k] = v
    return out


def config_from_args(args: argparse.Namespace, *, seed: int, device_id: str,
                     device: Any, version: str) -> ServeConfig:
    """Parsed ``vllm serve`` arguments -> `ServeConfig` for vLLM ``version`` (raises
    `StartupError`)."""
    facts = vllm_facts(version)
    ref = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
    target = resolve_model_ref(ref)
    if target is None:
        raise _unknown_model(ref)
    util = args.gpu_memory_utilization
    if not 0 < util <= 1:
        raise _fail(
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
            "gpu_memory_utilization\n  Input should be less than or equal to 1 "
            f"[type=less_than_equal, input_value={util}, input_type=float]"
            if util > 1 else
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
            "gpu_memory_utilization\n  Input should be greater than 0 "
            f"[type=greater_than, input_value={util}, input_type=float]")
    if args.tensor_parallel_size < 1 or args.pipeline_parallel_size < 1:
        raise _fail("ValueError: tensor_parallel_size and pipeline_parallel_size must be >= 1")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if world > 1:
        raise _fail(f"ValueError: Tensor parallel size ({world}) cannot be larger than the "
                    "number of available GPUs (1).")
    max_len = args.max_model_len or target.max_context
    if max_len > target.max_context:
        raise _fail(
            f"ValueError: User-specified max_model_len ({max_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={target.max_context} or "
            "model_max_length=None in model's config.json). To allow overriding this maximum, "
            "set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN "
            "must be used with extreme caution. If the model uses relative position encoding "
            "(RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses "
            "absolute position encoding, positions exceeding derived_max_model_len will cause a "
            "CUDA array out-of-bounds error.")
    big = device.memory_gib >= 70
    max_seqs = args.max_num_seqs or (1024 if big else 256)
    batched = args.max_num_batched_tokens or (8192 if big else 2048)
    if max_seqs < 1:
        raise _fail(f"ValueError: max_num_seqs ({max_seqs}) must be >= 1")
    method, k, draft = "none", 0, None
    extras: dict[str, Any] = {}
    warnings: list[str] = []
    spec_log = None
    if args.speculative_config is not None:
        method, k, draft, extras, warnings = parse_spec_config(
            args.speculative_config, target, tp=args.tensor_parallel_size, max_model_len=max_len,
            facts=facts)
        spec_log = {"method": method, "model": draft.id if draft else None,
                    "num_spec_tokens": k}
    if batched < max_len and args.enable_chunked_prefill is False:
        raise _fail(
            f"ValueError: max_num_batched_tokens ({batched}) is smaller than max_model_len "
            f"({max_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.")
    prefix = args.enable_prefix_caching if args.enable_prefix_caching is not None else True
    setup = EngineSetup(
        device=device, target=target, method=method, k=k, draft=draft, max_num_seqs=max_seqs,
        max_model_len=max_len, max_num_batched_tokens=batched,
        enforce_eager=bool(args.enforce_eager),
        kv_cache_dtype=args.kv_cache_dtype,
        weight_scale=2.0 if args.dtype in ("float", "float32") else 1.0,
        prefix_caching=prefix, seed=seed if seed else (args.seed or 0),
        k_by_batch=extras.get("k_by_batch", ()),
    )
    if spec_kind(method) == "none":
        setup = setup.without_speculation()
    gen_default = args.generation_config == "auto"
    env_keys = os.environ.get("VLLM_API_KEY")
    keys = tuple(args.api_key or ()) or ((env_keys,) if env_keys else ())
    temp_default = 0.6 if gen_default and target.tokenizer in ("llama3", "qwen3") else 1.0
    top_p_default = (0.9 if target.tokenizer == "llama3" else 0.95) if temp_default < 1 else 1.0
    defaults = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore
    return ServeConfig(
        engine="vllm", model_ref=ref,
        served_model_names=tuple(args.served_model_name or (ref,)), setup=setup,
        host=args.host if args.host else "0.0.0.0", port=args.port,
        draft_ref=(args.speculative_config or {}).get("model") if draft else None,
        api_keys=keys, gpu_memory_utilization=util, default_temperature=temp_default,
        default_top_p=top_p_default,
        generation_config_log=(
            f"Using default chat sampling params from model: {{'temperature': {temp_default}, "
            f"'top_p': {top_p_default}}}" if gen_default and temp_default < 1 else None),
        non_default_args=_mask(args, defaults.parse_args([])),
        spec_log=spec_log, warnings=tuple(warnings), tp=args.tensor_parallel_size,
        engine_version=str(facts.version),
    )


def parse_argv(argv: list[str]) -> argparse.Namespace:
    """Parse ``vllm ...`` (argv without the program name); exits 0/2 like argparse."""
    return build_parser().parse_args(normalize_argv(argv))


if __name__ == "__main__":  # pragma: no cover
    print(parse_argv(sys.argv[1:]))
