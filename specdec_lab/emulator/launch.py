"""Running one engine from its command line: which engine ``argv[0]`` names, and `run`."""

from __future__ import annotations

import os
import sys

from specdec.errors import SpecdecError
from specdec_lab.emulator import cli_trtllm, cli_vllm
from specdec_lab.emulator.runtime import (
    StartupError,
    engine_version,
    make_context,
    resolve_device,
)
from specdec_lab.emulator.server import serve
from specdec_lab.emulator.startup import EngineExit, config_failure

__all__ = ["engine_of", "run"]


def engine_of(prog: str) -> str | None:
    """``vllm`` / ``trtllm-serve`` (or a path ending in either) -> "vllm" | "trtllm"."""
    base = os.path.basename(prog.rstrip("/"))
    if base == "trtllm-serve" or base.endswith("trtllm-serve"):
        return "trtllm"
    if base == "vllm" or base.endswith("vllm"):
        return "vllm"
    return None


def _parse_release(device: str | None) -> str | None:
    """The vLLM release whose parser reads the command line (None: the emulator's default;
    a bad device knob is reported after parsing)."""
    try:
        return engine_version("vllm", resolve_device(device))
    except (SpecdecError, ValueError):
        return None


def run(argv: list[str], device: str | None = None, time_scale: float | None = None) -> int:
    """Run ``vllm ...`` or ``trtllm-serve ...`` (``argv[0]`` names the tool); the exit status.

    ``device`` and ``time_scale`` override ``SPECDEC_EMU_DEVICE`` / ``SPECDEC_EMU_TIME_SCALE``.
    Blocks while serving; returns on SIGTERM/SIGINT (0), startup failure (1) or bad flags (2).
    """
    engine = engine_of(argv[0]) if argv else None
    if engine is None:
        print("usage: python3 -m specdec_lab.emulator {vllm,trtllm-serve} ...", file=sys.stderr)
        print(f"error: unknown engine {argv[0] if argv else ''!r} (expected vllm or "
              "trtllm-serve)", file=sys.stderr)
        return 2
    try:
        args = (cli_vllm.parse_argv(argv[1:], _parse_release(device)) if engine == "vllm"
                else cli_trtllm.parse_argv(argv[1:]))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        ctx = make_context(engine, device, time_scale)
    except SpecdecError as exc:
        print(f"specdec emulator: error: {exc}", file=sys.stderr)
        return 1
    try:
        version = engine_version(engine, ctx.device)
        if engine == "vllm":
            cfg = cli_vllm.config_from_args(args, seed=ctx.seed, device_id=ctx.device.id,
                                            device=ctx.device, version=version)
        else:
            cfg = cli_trtllm.config_from_args(args, seed=ctx.seed, device=ctx.device,
                                              version=version)
    except StartupError as exc:
        if engine == "vllm":
            ctx.log.info(f"vLLM API server version {version}", where="api_server.py:1839")
        return config_failure(ctx, engine, exc.root).code
    except SpecdecError as exc:
        print(f"specdec emulator: error: {exc}", file=sys.stderr)
        return 1
    try:
        return serve(cfg, ctx)
    except EngineExit as exc:
        return exc.code
