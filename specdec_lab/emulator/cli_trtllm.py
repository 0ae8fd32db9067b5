"""``trtllm-serve MODEL [options]``: TRT-LLM's click CLI and ``--extra_llm_api_options`` YAML.

Usage errors print click's format and exit 2; configuration errors (the YAML, the speculative
config) raise `StartupError` with TRT-LLM's wording (pydantic ``extra_forbidden`` for unknown keys).

No TensorRT-LLM release runs here (its PyPI package is a download stub) and no tagged source is
read, so unlike the emulated vLLM (`vllm_release`) this validates with specdec's own schema facts
(`specdec.engines.trtllm.facts`, the same tables `specdec_lab.contract.trtllm_schema` checks the
rendered engine.yaml against): a wrong belief there cannot fail a lab test.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

import yaml

from specdec.engines.trtllm.facts import (  # specdec's beliefs: no real parser (docstring)
    CUDA_GRAPH_KEYS,
    KV_CACHE_KEYS,
    TIKTOKEN_FILES,
    TIKTOKEN_OFFLINE_ERROR,
    TOP_KEYS,
    TrtllmFacts,
    check_head,
    trtllm_facts,
)
from specdec_lab.emulator.profiles import DeviceProfile, ModelSpec, resolve_model_ref
from specdec_lab.emulator.runtime import ServeConfig, StartupError, emulated_version
from specdec_lab.emulator.setup import EngineSetup

__all__ = [
    "DECODING_TYPES",
    "build_parser",
    "check_tiktoken",
    "config_from_args",
    "parse_argv",
    "parse_extra_options",
    "parse_spec_config",
    "schedule_ranges",
]

# decoding_type -> vLLM method spelling used by the core
DECODING_TYPES = {"Eagle": "eagle3", "Eagle3": "eagle3", "DraftTarget": "draft_model",
                  "NGram": "ngram", "MTP": "mtp"}
_CONFIG_CLASS = {"Eagle": "EagleDecodingConfig", "Eagle3": "Eagle3DecodingConfig",
                 "DraftTarget": "DraftTargetDecodingConfig", "NGram": "NGramDecodingConfig",
                 "MTP": "MTPDecodingConfig"}
_KV_DTYPES = ("auto", "fp8", "nvfp4", "float16", "bfloat16")
_BACKENDS = ("pytorch", "tensorrt", "_autodeploy")


class ClickStyleParser(argparse.ArgumentParser):
    """argparse with click's usage-error format (``Error: ...``, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            opt = message.split(": ", 1)[1].split()[0]
            message = (f"No such option: {opt}" if opt.startswith("-") else
                       f"Got unexpected extra argument ({opt})")
        elif "the following arguments are required: model" in message:
            message = "Missing argument 'MODEL'."
        elif message.startswith("argument "):
            opt, _, rest = message[len("argument "):].partition(": ")
            opt = opt.split("/")[-1]
            if rest.startswith("invalid choice: "):
                bad = rest.split("'")[1] if "'" in rest else rest
                choices = ", ".join(f"'{c}'" for c in _BACKENDS)
                message = f"Invalid value for '{opt}': '{bad}' is not one of {choices}."
            elif rest.startswith("invalid int value: "):
                message = f"Invalid value for '{opt}': {rest[19:]} is not a valid integer."
            elif rest.startswith("invalid float value: "):
                message = f"Invalid value for '{opt}': {rest[21:]} is not a valid float."
            elif rest.startswith("expected one argument"):
                message = f"Option '{opt}' requires an argument."
            else:
                message = f"Invalid value for '{opt}': {rest}"
        sys.stderr.write("Usage: trtllm-serve serve [OPTIONS] MODEL\n"
                         "Try 'trtllm-serve serve --help' for help.\n\n"
                         f"Error: {message}\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = ClickStyleParser(prog="trtllm-serve serve", allow_abbrev=False,
                         description="Running an OpenAI API compatible server (emulated).")
    p.add_argument("model")
    p.add_argument("--tokenizer")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=_BACKENDS, default="pytorch")
    p.add_argument("--log_level", default="info",
                   choices=["internal_error", "error", "warning", "info", "verbose", "debug",
                            "trace"])
    p.add_argument("--max_beam_width", type=int, default=1)
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--max_num_tokens", type=int)
    p.add_argument("--max_seq_len", type=int)
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--ep_size", type=int)
    p.add_argument("--cluster_size", type=int)
    p.add_argument("--gpus_per_node", type=int)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", type=float)
    p.add_argument("--num_postprocess_workers", type=int, default=0)
    p.add_argument("--trust_remote_code", action="store_true")
    p.add_argument("--extra_llm_api_options", "--config", dest="extra_llm_api_options")
    p.add_argument("--reasoning_parser")
    p.add_argument("--tool_parser")
    p.add_argument("--metadata_server_config_file")
    p.add_argument("--server_role")
    p.add_argument("--fail_fast_on_attention_window_too_large", action="store_true")
    p.add_argument("--enable_chunked_prefill", action="store_true")
    p.add_argument("--media_io_kwargs")
    p.add_argument("--served_model_name")
    return p


def parse_argv(argv: list[str]) -> argparse.Namespace:
    """``trtllm-serve [serve] MODEL [options]`` (without the program name); exits 2 on misuse."""
    if argv and argv[0] == "serve":
        argv = argv[1:]
    if argv and argv[0] in ("--version", "-v"):
        print(f"trtllm-serve, version {emulated_version('trtllm')}")
        sys.exit(0)
    return build_parser().parse_args(argv)


def _fail(msg: str) -> StartupError:
    return StartupError(msg, stage="config")


def _extra(model: str, key: str, value: Any) -> StartupError:
    return _fail(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                 f"{model}\n{key}\n  Extra inputs are not permitted [type=extra_forbidden, "
                 f"input_value={value!r}, input_type={type(value).__name__}]")


def _type_error(model: str, key: str, value: Any, kind: str) -> StartupError:
    tname = {"int": "int_type", "float": "float_type", "bool": "bool_type",
             "dict": "dict_type"}[kind]
    desc = {"int": "a valid integer", "float": "a valid number", "bool": "a valid boolean",
            "dict": "a valid dictionary"}[kind]
    return _fail(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                 f"{model}\n{key}\n  Input should be {desc} [type={tname}, "
                 f"input_value={value!r}, input_type={type(value).__name__}]")


def _get_int(model: str, d: dict[str, Any], key: str, minimum: int = 0) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _type_error(model, key, v, "int")
    if v < minimum:
        raise _fail(f"ValueError: {key} must be >= {minimum}, got {v}")
    return v


def parse_extra_options(path: str) -> dict[str, Any]:
    """Read and structurally validate the ``--extra_llm_api_options`` YAML."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise _fail(f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'") from None
    except OSError as exc:
        raise _fail(f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}: '{path}'") from None
    except yaml.YAMLError as exc:
        raise _fail(f"yaml.{type(exc).__name__}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(f"ValueError: {path} must hold a YAML mapping, got {type(data).__name__}")
    for key, value in data.items():
        if key not in TOP_KEYS:
            raise _extra("TorchLlmArgs", str(key), value)
    for sect, keys, name in (("kv_cache_config", KV_CACHE_KEYS, "KvCacheConfig"),
                             ("cuda_graph_config", CUDA_GRAPH_KEYS, "CudaGraphConfig")):
        sub = data.get(sect)
        if sub is None:
            continue
        if not isinstance(sub, dict):
            raise _type_error("TorchLlmArgs", sect, sub, "dict")
        for key, value in sub.items():
            if key not in keys:
                raise _extra(name, f"{sect}.{key}", value)
    for key in ("disable_overlap_scheduler", "enable_iter_perf_stats", "enable_chunked_prefill",
                "return_perf_metrics", "print_iter_log"):
        v = data.get(key)
        if v is not None and not isinstance(v, bool):
            raise _type_error("TorchLlmArgs", key, v, "bool")
    kv = data.get("kv_cache_config") or {}
    frac = kv.get("free_gpu_memory_fraction")
    if frac is not None and (isinstance(frac, bool) or not isinstance(frac, int | float)
                             or not 0 < frac <= 1):
        raise _fail("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                    "KvCacheConfig\nfree_gpu_memory_fraction\n  Value error, "
                    f"kv_cache_config.free_gpu_memory_fraction must be a float between 0 and 1, "
                    f"got {frac!r}")
    dtype = kv.get("dtype")
    if dtype is not None and dtype not in _KV_DTYPES:
        raise _fail(f"ValueError: kv_cache_config.dtype={dtype!r} is not one of "
                    f"{', '.join(_KV_DTYPES)}")
    return data


def parse_spec_config(raw: Any, target: ModelSpec, facts: TrtllmFacts
                      ) -> tuple[str, int, ModelSpec | None, str | None, dict[str, Any]]:
    """Validate ``speculative_config`` like release ``facts.version``
    (`specdec.engines.trtllm.facts`): (method, max_draft_len, draft, draft ref, extras)."""
    if not isinstance(raw, dict):
        raise _type_error("TorchLlmArgs", "speculative_config", raw, "dict")
    dt = raw.get("decoding_type")
    if dt not in facts.accepted.value:
        raise _fail(f"ValueError: Invalid decoding type: {dt}")
    if dt not in DECODING_TYPES:
        raise _fail(f"NotImplementedError: decoding_type {dt} is not supported by the "
                    "PyTorch backend on this platform")
    cls = _CONFIG_CLASS[dt]
    allowed = facts.spec_keys(dt)
    for key, value in raw.items():
        if key not in allowed:
            if dt == "Eagle" and facts.head_local_dir.value:
                # EagleDecodingConfig.__init__ sets each kwarg with setattr (1.2 line)
                raise _fail(f'ValueError: "{cls}" object has no field "{key}"')
            raise _extra(cls, str(key), value)
    method = DECODING_TYPES[dt]
    k = _get_int(cls, raw, "max_draft_len", minimum=0)
    ref = raw.get("speculative_model") or raw.get("speculative_model_dir")
    if ref is not None and not isinstance(ref, str):
        raise _fail(f"ValueError: speculative_model_dir must be a path or repo id, got {ref!r}")
    extras: dict[str, Any] = {"max_concurrency": _get_int(cls, raw, "max_concurrency", 1)}
    if dt in ("Eagle", "Eagle3"):
        if k is None:
            raise _fail("AssertionError: max_draft_len is required for Eagle")
        if ref is None:
            raise _fail("AssertionError: Path to EAGLE3 weights must be specified.")
    elif dt == "DraftTarget":
        if ref is None:
            raise _fail("AssertionError: Path to draft model must be specified.")
        if k is None:
            raise _fail("TypeError: '>' not supported between instances of 'NoneType' and 'int'")
    elif dt == "NGram":
        n = _get_int(cls, raw, "max_matching_ngram_size", minimum=0) or 0
        if not k or n <= 0:
            # BaseLlmArgs.validate_speculative_config: max_draft_len > 0 and
            # max_matching_ngram_size > 0 (its default, 0, fails)
            raise _fail("AssertionError")
        extras["max_matching_ngram_size"] = n
    else:  # MTP
        n = _get_int(cls, raw, "num_nextn_predict_layers", minimum=1) or 1
        raise _fail(f"ValueError: MTP decoding needs {n} MTP layer(s) in the target checkpoint, "
                    f"but {target.id} ({target.architecture}) has num_nextn_predict_layers=0")
    if k == 0:
        raise _fail("AssertionError")
    assert k is not None
    if raw.get("draft_len_schedule") is not None:
        extras["draft_len_schedule"] = _schedule(cls, raw["draft_len_schedule"], k,
                                                 extras["max_concurrency"])
    draft = _draft(ref, method, target, facts) if ref is not None else None
    return method, k, draft, ref, extras


def _schedule(cls: str, raw: Any, k: int, max_concurrency: int | None) -> dict[int, int]:
    """``draft_len_schedule`` as the release's DecodingBaseConfig validates it (llm_args.py
    validate_draft_len_schedule_and_sort and the max_concurrency check, `specdec.engines.trtllm.
    facts.DRAFT_LEN_SCHEDULE`): {batch-size upper bound: draft length}, sorted."""
    if not isinstance(raw, dict) or not all(
            isinstance(x, int) and not isinstance(x, bool) for kv in raw.items() for x in kv):
        raise _type_error(cls, "draft_len_schedule", raw, "dict")
    for batch, length in raw.items():
        if batch < 1:
            raise _fail(f"ValueError: draft_len_schedule: batch size threshold must be >= 1, "
                        f"got {batch}")
        if length < 0:
            raise _fail(f"ValueError: draft_len_schedule: draft length must be >= 0, got "
                        f"{length}")
    first = min(raw)
    if raw[first] != k:
        raise _fail(f"ValueError: draft_len_schedule[{first}] must equal max_draft_len because "
                    f"it is the smallest batch-size key. Got schedule[{first}]={raw[first]}, "
                    f"but max_draft_len={k}.")
    for batch, length in raw.items():
        if length > k:
            raise _fail("ValueError: draft_len_schedule: all draft lengths must be <= "
                        f"max_draft_len. Got draft_len={length} for batch_size={batch}, but "
                        f"max_draft_len={k}.")
    if max_concurrency is not None:
        raise _fail("ValueError: max_concurrency and draft_len_schedule are mutually exclusive. "
                    "Use max_concurrency for a simple speculation cutoff, or draft_len_schedule "
                    "for dynamic draft-length control.")
    return dict(sorted(raw.items()))


def schedule_ranges(sched: dict[int, int], max_batch: int) -> tuple[tuple[int, int, int], ...]:
    """Upper-bound keys as inclusive ranges up to ``max_batch``; above the largest key, 0 (PR
    #10860: "33+: use runtime_draft_len=0")."""
    out, lo = [], 1
    for bound, length in sched.items():
        if lo <= min(bound, max_batch):
            out.append((lo, min(bound, max_batch), length))
        lo = bound + 1
    if lo <= max_batch:
        out.append((lo, max_batch, 0))
    return tuple(out)


def _draft(ref: str, method: str, target: ModelSpec, facts: TrtllmFacts) -> ModelSpec:
    import os

    if facts.head_local_dir.value and not os.path.isdir(ref):
        # Before PR #10099 the PyTorch backend loads the draft from a path; a Hub id is not one
        # (the exact exception of the 1.2 line is not in our sources: this is the loader's
        # open of <dir>/config.json failing).
        raise StartupError(f"FileNotFoundError: [Errno 2] No such file or directory: "
                           f"'{ref}/config.json' (TensorRT-LLM {facts.version} needs "
                           "speculative_model_dir to be a local directory)", stage="load",
                           progress=0.3)
    draft = resolve_model_ref(ref)
    if draft is None:
        raise _fail(f"OSError: {ref} is not a local folder and is not a valid model "
                    "identifier listed on 'https://huggingface.co/models'")
    if method == "eagle3" and draft.kind != "head":
        raise _fail(f"ValueError: {ref} is not an EAGLE-3 draft checkpoint (architecture "
                    f"{draft.architecture}); use decoding_type: DraftTarget for a draft model")
    if method == "draft_model" and draft.kind == "head":
        raise _fail(f"ValueError: {ref} is an EAGLE head; use decoding_type: Eagle")
    if draft.kind == "head" and draft.head_format:
        fmt = check_head(facts.version, draft.head_format, ref)
        if not fmt.ok:  # ModelConfig.from_pretrained(<head dir>) -> transformers' AutoConfig
            raise StartupError(fmt.reason, stage="load", progress=0.3)
    if draft.vocab_size != target.vocab_size:
        raise _fail(f"ValueError: The draft model vocab size ({draft.vocab_size}) must "
                    f"match the target model vocab size ({target.vocab_size})")
    return draft


def check_tiktoken(target: ModelSpec) -> None:
    """gpt-oss loads its harmony encoding (openai/harmony v0.0.4): from $TIKTOKEN_ENCODINGS_BASE
    when set, else by downloading it, which fails on an air-gapped host (the lab's hosts are).
    The sha256 check is not emulated (the deploy checks it when it fetches the file)."""
    import os

    if target.tokenizer != "o200k_harmony":
        return
    base = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if not base:
        raise StartupError(f"openai_harmony.HarmonyError: {TIKTOKEN_OFFLINE_ERROR}",
                           stage="load", progress=0.1)
    name = next(iter(TIKTOKEN_FILES))
    path = os.path.join(base, name)
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise StartupError(f"openai_harmony.HarmonyError: error downloading or loading vocab "
                           f"file: No such file or directory (os error 2): {path}",
                           stage="load", progress=0.1)


def config_from_args(args: argparse.Namespace, *, seed: int,
                     device: DeviceProfile, version: str) -> ServeConfig:
    """Parsed ``trtllm-serve`` arguments (+ the YAML) -> `ServeConfig` for TensorRT-LLM
    ``version`` (raises StartupError)."""
    facts = trtllm_facts(version)
    ref = args.model
    target = resolve_model_ref(ref)
    if target is None:
        raise _fail(f"OSError: {ref} is not a local folder and is not a valid model identifier "
                    "listed on 'https://huggingface.co/models'")
    check_tiktoken(target)
    if "trtllm" not in device.engines:
        raise _fail(f"RuntimeError: [TensorRT-LLM][ERROR] Assertion failed: Unsupported SM "
                    f"version {device.capability[0]}{device.capability[1]} ({device.gpu_name}); "
                    "this TensorRT-LLM build does not support this device")
    world = args.tp_size * args.pp_size
    if world < 1:
        raise _fail("ValueError: tp_size and pp_size must be >= 1")
    if world > 1:
        raise _fail(f"RuntimeError: tp_size * pp_size ({world}) exceeds the number of "
                    "available GPUs (1)")
    extra = parse_extra_options(args.extra_llm_api_options) if args.extra_llm_api_options else {}
    warnings: list[str] = []
    if args.backend != "pytorch":
        warnings.append(f"backend {args.backend!r} is emulated with the PyTorch backend's timing")

    def pick(key: str, cli: Any, default: Any) -> Any:
        v = extra.get(key)
        return v if v is not None else (cli if cli is not None else default)

    max_batch = pick("max_batch_size", args.max_batch_size, 2048)
    max_tokens = pick("max_num_tokens", args.max_num_tokens, 8192)
    max_len = pick("max_seq_len", args.max_seq_len, target.max_context)
    for key, val in (("max_batch_size", max_batch), ("max_num_tokens", max_tokens),
                     ("max_seq_len", max_len)):
        if isinstance(val, bool) or not isinstance(val, int):
            raise _type_error("TorchLlmArgs", key, val, "int")
        if val < 1:
            raise _fail(f"ValueError: {key} must be positive, got {val}")
    if max_len > target.max_context:
        raise _fail(f"ValueError: max_seq_len ({max_len}) is larger than the model's "
                    f"max_position_embeddings ({target.max_context})")
    kv = extra.get("kv_cache_config") or {}
    frac = kv.get("free_gpu_memory_fraction")
    if frac is None:
        frac = args.kv_cache_free_gpu_memory_fraction
    if frac is None:
        frac = 0.9
    if not 0 < frac <= 1:
        raise _fail(f"ValueError: kv_cache_free_gpu_memory_fraction must be in (0, 1], got "
                    f"{frac}")
    method, k, draft, draft_ref = "none", 0, None, None
    sx: dict[str, Any] = {}
    spec_log = None
    if extra.get("speculative_config") is not None:
        method, k, draft, draft_ref, sx = parse_spec_config(extra["speculative_config"], target,
                                                            facts)
        spec_log = {"decoding_type": extra["speculative_config"]["decoding_type"],
                    "max_draft_len": k, "speculative_model": draft_ref}
    matched_draft = draft
    trained_for = (None, target.id, target.base_model)
    if method == "eagle3" and draft is not None and draft.head_target not in trained_for:
        warnings.append(f"EAGLE-3 head {draft.id} was trained for {draft.head_target}, not "
                        f"{target.id}")
    setup = EngineSetup(
        device=device, target=target, method=method, k=k, draft=matched_draft,
        max_num_seqs=max_batch, max_model_len=max_len, max_num_batched_tokens=max_tokens,
        kv_cache_dtype=str(kv.get("dtype") or "auto"),
        prefix_caching=bool(kv.get("enable_block_reuse", True)), seed=seed,
        overlap_scheduler=not bool(extra.get("disable_overlap_scheduler", False)),
        max_concurrency=sx.get("max_concurrency"),
        k_by_batch=schedule_ranges(sx["draft_len_schedule"], max_batch)
        if "draft_len_schedule" in sx else (),
    )
    if method == "none":
        setup = setup.without_speculation()
    name = args.served_model_name or ref
    return ServeConfig(
        engine="trtllm", model_ref=ref, served_model_names=(name,), setup=setup,
        host=args.host, port=args.port, draft_ref=draft_ref, kv_free_fraction=float(frac),
        iter_perf_stats=bool(extra.get("enable_iter_perf_stats", False)),
        default_temperature=1.0, spec_log=spec_log, warnings=tuple(warnings),
        non_default_args={k2: v for k2, v in vars(args).items() if v is not None},
        engine_version=str(facts.version),
    )
