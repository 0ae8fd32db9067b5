"""Engine emulator: speaks vLLM's and trtllm-serve's CLI and HTTP API with a physical timing model.

No GPU is needed: a decode step costs weight bytes / memory bandwidth (plus a compute term that
grows with the batch), prefill is compute-bound, speculation adds drafter cost and accepts draft
tokens per position with seeded probabilities. Run it as::

    python3 -m specdec.emulator vllm serve MODEL [vLLM flags]
    python3 -m specdec.emulator vllm --version
    python3 -m specdec.emulator trtllm-serve MODEL [trtllm-serve flags]
    python3 -m specdec.emulator.hf download REPO          # emulated `hf download`

``argv[0]`` may also be a path ending in ``vllm`` or ``trtllm-serve`` (lab hosts install wrappers
``/usr/local/bin/vllm`` and ``/usr/local/bin/trtllm-serve`` that exec the module), and
``specdec lab engine --device ID -- vllm serve ...`` calls `run` directly.

Knobs come only from the engine's environment:

``SPECDEC_EMU_ENGINE_VERSION``
    the engine release to emulate (a lab image sets it, as the real image carries its engine);
    default: the release of the device's default catalog image. Each release refuses what it
    refuses for real (`specdec.engines`), with its own error text.
``SPECDEC_EMU_DEVICE``
    catalog device id (or the emulator-only ``h100-sxm``); default: identify this machine.
``SPECDEC_EMU_TIME_SCALE``
    wall seconds per emulated second (default 1.0; 0.05 makes everything 20x faster, ratios kept).
``SPECDEC_EMU_FAULT``
    comma-separated faults: ``crash_at_start`` (exit non-zero after a short startup log),
    ``slow_start:S`` (S extra real seconds before loading), ``hang_after:N`` (after N answered
    generation requests every connection is accepted and never answered), ``5xx_burst:START:COUNT``
    (generation requests START..START+COUNT-1, 1-based, get HTTP 500), ``slowdown:F`` (every
    engine step gets slower by the fraction F per completed request), ``oom`` (CUDA out of memory
    after loading the weights, exit non-zero).
``SPECDEC_EMU_SEED``
    integer seed for acceptance draws and generated text (default 0).
``SPECDEC_EMU_ACCEPTANCE``
    the speculation world: ``chain`` (default) or ``measured`` (acceptance that is not an exact
    chain, drafting cost concave in k: `specdec.emulator.acceptance`, a second world for testing
    the tuner's model).
``SPECDEC_EMU_RESERVED_GIB``
    memory other processes hold on the device (counts against free memory at startup).

The HF token is read only from the file named by ``HF_TOKEN_PATH`` (or ``HF_TOKEN``/``$HF_HOME``),
only to check gated repos, and is never printed.
"""

from __future__ import annotations

import os
import sys

from specdec.errors import SpecdecError

__all__ = ["engine_of", "run"]


def engine_of(prog: str) -> str | None:
    """``vllm`` / ``trtllm-serve`` (or a path ending in either) -> "vllm" | "trtllm"."""
    base = os.path.basename(prog.rstrip("/"))
    if base == "trtllm-serve" or base.endswith("trtllm-serve"):
        return "trtllm"
    if base == "vllm" or base.endswith("vllm"):
        return "vllm"
    return None


def run(argv: list[str], device: str | None = None, time_scale: float | None = None) -> int:
    """Run ``vllm ...`` or ``trtllm-serve ...`` (``argv[0]`` names the tool); the exit status.

    ``device`` and ``time_scale`` override ``SPECDEC_EMU_ENGINE_VERSION``
    the engine release to emulate (a lab image sets it, as the real image carries its engine);
    default: the release of the device's default catalog image. Each release refuses what it
    refuses for real (`specdec.engines`), with its own error text.
``SPECDEC_EMU_DEVICE`` / ``SPECDEC_EMU_TIME_SCALE``.
    Blocks while serving; returns on SIGTERM/SIGINT (0), startup failure (1) or bad flags (2).
    """
    from specdec.emulator import cli_trtllm, cli_vllm
    from specdec.emulator.runtime import StartupError, engine_version, make_context
    from specdec.emulator.server import serve
    from specdec.emulator.startup import EngineExit, config_failure

    engine = engine_of(argv[0]) if argv else None
    if engine is None:
        print("usage: python3 -m specdec.emulator {vllm,trtllm-serve} ...", file=sys.stderr)
        print(f"error: unknown engine {argv[0] if argv else ''!r} (expected vllm or "
              "trtllm-serve)", file=sys.stderr)
        return 2
    try:
        args = cli_vllm.parse_argv(argv[1:]) if engine == "vllm" else cli_trtllm.parse_argv(
            argv[1:])
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
