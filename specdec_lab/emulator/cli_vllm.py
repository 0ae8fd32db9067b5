"""``vllm serve`` / ``vllm --version``: vLLM's argument parser and config validation.

What the emulated vLLM accepts comes from the release it emulates (`vllm_release`: the parser
data generated from that release's own code): its ``serve`` options (`vllm_flags`) and its
SpeculativeConfig (`vllm_spec`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from specdec_lab.emulator.profiles import resolve_model_ref
from specdec_lab.emulator.runtime import ServeConfig, StartupError, emulated_version
from specdec_lab.emulator.setup import EngineSetup, spec_kind
from specdec_lab.emulator.vllm_flags import MODELLED, serve_parser
from specdec_lab.emulator.vllm_release import VllmRelease, pinned, release
from specdec_lab.emulator.vllm_spec import parse_spec_config, unknown_model

__all__ = ["build_parser", "config_from_args", "parse_spec_config", "normalize_argv",
           "parse_argv"]


def _version(version: str | None) -> str:
    """The release to parse for: ``version``, else the one this process emulates."""
    if version:
        return version
    text = emulated_version("vllm")
    return pinned()[-1] if text.startswith("unknown") else text


def normalize_argv(argv: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser: ``--max_model_len`` means ``--max-model-len``."""
    out = []
    for a in argv:
        if a.startswith("--") and "_" in a.split("=", 1)[0]:
            key, eq, val = a.partition("=")
            a = key.replace("_", "-") + eq + val
        out.append(a)
    return out


def build_parser(version: str | None = None) -> argparse.ArgumentParser:
    """The ``vllm`` parser of release ``version`` (default: the emulated one)."""
    return serve_parser(release(_version(version)), emulated_version("vllm"))


def _fail(msg: str) -> StartupError:
    return StartupError(msg, stage="config")


def _max_len(rel: VllmRelease, max_len: int, derived: int) -> None:
    """ModelConfig's refusal of a --max-model-len above the model's (probe max-model-len)."""
    if max_len > derived:
        text = rel.refusal("max-model-len", (("(999999)", f"({max_len})"),
                                             ("=131072", f"={derived}")))
        if text is not None:
            raise _fail(text)


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
    rel = release(version)
    given_args = args
    # an option this release lacks (e.g. --swap-space from 0.19.0) reads as the default
    args = argparse.Namespace(**{**MODELLED, "model_tag": None, **vars(args)})
    ref = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
    target = resolve_model_ref(ref)
    if target is None:
        raise unknown_model(ref)
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
    max_len = args.max_model_len if args.max_model_len not in (None, -1) else target.max_context
    _max_len(rel, max_len, target.max_context)
    big = device.memory_gib >= 70
    max_seqs = args.max_num_seqs or (1024 if big else 256)
    batched = args.max_num_batched_tokens or (8192 if big else 2048)
    if max_seqs < 1:
        raise _fail(f"ValueError: max_num_seqs ({max_seqs}) must be >= 1")
    method, k, draft = "none", 0, None
    extras: dict[str, Any] = {}
    warnings: list[str] = [rel.note] if rel.note else []
    spec_log = None
    if args.speculative_config is not None:
        method, k, draft, extras, spec_warnings = parse_spec_config(
            args.speculative_config, target, tp=args.tensor_parallel_size, max_model_len=max_len,
            rel=rel)
        warnings += spec_warnings
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
    given = [args.api_key] if isinstance(args.api_key, str) else args.api_key  # nargs=None: 0.9.2
    keys = tuple(given or ()) or ((env_keys,) if env_keys else ())
    temp_default = 0.6 if gen_default and target.tokenizer in ("llama3", "qwen3") else 1.0
    top_p_default = (0.9 if target.tokenizer == "llama3" else 0.95) if temp_default < 1 else 1.0
    defaults = build_parser(version)._subparsers._group_actions[0].choices["serve"]  # type: ignore
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
        non_default_args=_mask(given_args, defaults.parse_args([])),
        spec_log=spec_log, warnings=tuple(warnings), tp=args.tensor_parallel_size,
        engine_version=str(rel.version),
    )


def parse_argv(argv: list[str], version: str | None = None) -> argparse.Namespace:
    """Parse ``vllm ...`` (argv without the program name) as release ``version`` (default:
    the emulated one) parses it; exits 0/2 like argparse."""
    return build_parser(version).parse_args(normalize_argv(argv))


if __name__ == "__main__":  # pragma: no cover
    print(parse_argv(sys.argv[1:]))
