"""``vllm serve``'s argument parser, built from one release's own option list
(`vllm_release.VllmRelease.options`): its option strings, nargs, choices and value types.

The options the emulator models (`MODELLED`) take the emulator's defaults; every other option
the release accepts is refused by name as one the emulator does not emulate, so a lab test can
tell the emulator's limits from the release's refusals (which are argparse's own messages).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from specdec_lab.emulator.vllm_release import Option, VllmRelease

__all__ = ["MODELLED", "human_int", "serve_parser"]

# dest -> the emulator's default (what its `config_from_args` reads or shows as non-default)
MODELLED: dict[str, Any] = {
    "model": None, "host": None, "port": 8000, "served_model_name": None, "api_key": None,
    "gpu_memory_utilization": 0.9, "max_model_len": None, "max_num_seqs": None,
    "max_num_batched_tokens": None, "speculative_config": None, "enforce_eager": False,
    "kv_cache_dtype": "auto", "enable_prefix_caching": None, "enable_chunked_prefill": None,
    "dtype": "auto", "trust_remote_code": False, "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1, "seed": None, "quantization": None, "revision": None,
    "tokenizer": None, "download_dir": None, "load_format": "auto",
    "generation_config": "auto", "block_size": None, "swap_space": None, "max_logprobs": None,
    "disable_log_requests": False, "enable_log_requests": False, "disable_log_stats": False,
    "disable_uvicorn_access_log": False, "uvicorn_log_level": "info",
    "enable_prompt_tokens_details": False, "show_hidden_metrics_for_version": None,
    "compilation_config": None, "root_path": None, "chat_template": None, "hf_token": None,
}


def human_int(text: str) -> int:
    """vLLM's human_readable_int: 1k (1000), 1K (1024), 1m, 1M ..."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid human-readable int value: {text!r}")
    num, unit = float(m.group(1)), m.group(2)
    mult = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2, "g": 1000**3,
            "G": 1024**3}[unit]
    return int(num * mult)


def human_int_or_auto(text: str) -> int:
    """0.14.0+ --max-model-len: also ``-1`` / ``auto`` (-1: the model's own)."""
    return -1 if text.strip() == "-1" or text.strip().lower() == "auto" else human_int(text)


_BASE: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, "human_readable_int": human_int,
    "human_readable_int_or_auto": human_int_or_auto, "json": json.loads}


def _converter(name: str | None) -> Callable[[str], Any] | None:
    """A value type by the release's name for it (``_optional_type:int`` ...); argparse names
    the function in its "invalid <name> value" message, so it keeps the release's name."""
    if name is None:
        return None
    outer, _, inner = name.partition(":")
    if inner:
        base = _converter(inner)
        optional = outer == "_optional_type"  # vllm's optional_type: "" and "None" are None
        assert base is not None

        def fn(val: str) -> Any:
            return None if optional and val in ("", "None") else base(val)
    else:
        real = _BASE.get(outer, str)

        def fn(val: str) -> Any:
            return real(val)
        outer = "loads" if outer == "json" else outer
    fn.__name__ = outer
    return fn


class _Toggle(argparse.Action):
    """BooleanOptionalAction / vLLM's EnableDisableAction: the first flag sets True, the
    others (``--no-x``, ``--disable-x``) False."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        kw.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string == self.option_strings[0])


class _NotEmulated(argparse.Action):
    """An option the release accepts and the emulator does not model."""

    version = ""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: the specdec engine emulator does not emulate this "
                     f"option (vLLM {self.version} accepts it)")


_TOGGLES = ("BooleanOptionalAction", "EnableDisableAction")
_FLAGS = {"_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
          "_CountAction": "count"}


def _add(s: argparse.ArgumentParser, o: Option, version: str) -> None:
    if not o.flags:  # the positional model_tag
        s.add_argument(o.dest, nargs="?")
        return
    toggle = o.action in _TOGGLES or (o.nargs == 0 and len(o.flags) > 1)
    if o.dest not in MODELLED:
        cls = type("NotEmulated", (_NotEmulated,), {"version": version})
        nargs = 0 if toggle or o.action in _FLAGS else o.nargs
        s.add_argument(*o.flags, dest=o.dest, action=cls, nargs=nargs,
                       help=argparse.SUPPRESS)
        return
    kw: dict[str, Any] = {"dest": o.dest, "default": MODELLED[o.dest]}
    if toggle:
        s.add_argument(*o.flags, action=_Toggle, **kw)
    elif o.action in _FLAGS:
        s.add_argument(*o.flags, action=_FLAGS[o.action], **kw)
    else:
        if o.action == "_AppendAction":
            kw["action"] = "append"
        elif o.nargs == "?" and o.const is not None:
            kw["const"] = o.const
        if o.nargs is not None:
            kw["nargs"] = o.nargs
        if o.choices is not None:
            kw["choices"] = list(o.choices)
        convert = _converter(o.type)
        if convert is not None:
            kw["type"] = convert
        s.add_argument(*o.flags, **kw)


def serve_parser(rel: VllmRelease, version_text: str) -> argparse.ArgumentParser:
    """The ``vllm`` parser with release ``rel``'s ``serve`` subcommand."""
    p = argparse.ArgumentParser(prog="vllm", allow_abbrev=False,
                                description="vLLM CLI (specdec engine emulator)")
    p.add_argument("-v", "--version", action="version", version=version_text)
    sub = p.add_subparsers(dest="subcommand", required=True)
    s = sub.add_parser("serve", allow_abbrev=False, usage="vllm serve [model_tag] [options]",
                       help="Start the vLLM OpenAI Compatible API server.")
    for o in rel.options:
        _add(s, o, str(rel.version))
    return p
