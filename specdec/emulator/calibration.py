"""Published device decode rates, and what the emulator's timing model gives for each.

Every figure is batch-1 decode (tokens per second of one sequence) measured on a real device,
with its source. `emulated_tok_s` runs the emulator's own `TimingModel` for the same device,
power mode, engine and weights: one decode step at the figure's context (prompt + half the
output). ``tests/unit/test_calibration.py`` holds every figure within `TOLERANCE`;
``python3 benchmarks/calibration.py`` prints the table.

How the comparison is made:

* The engine's bandwidth efficiency is the catalog's (devices.yaml ``bandwidth_efficiency``),
  fitted on these figures: vLLM on Orin on the AGX Orin rows, vLLM and TRT-LLM on DGX Spark on
  their rows. Per-step CPU and launch overheads are the emulator's family constants.
* Orin Nano has no published vLLM figure (NVIDIA's Jetson AI Lab lists none; found only MLC,
  llama.cpp and TensorRT Edge-LLM). Its rows are NVIDIA's MLC figures, compared with the same
  device model (bandwidth per power mode, Nano overheads) at an MLC efficiency fitted on one of
  them (`REFERENCE_ENGINES`); the other three test the device model, above all that bandwidth
  follows the power mode (the original Nano at 15W vs the Nano Super).
* Power modes: stated by the source where it does; else "assumed" (NVIDIA benchmarks run at
  the top mode) or "inferred" (from the figures, with the reason).
* Weights: the catalog checkpoint's decode bytes, or ``decode_gb`` (computed the same way as
  the catalog's, see models.yaml) for a format no catalog checkpoint has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specdec.catalog import load_catalog
from specdec.emulator.profiles import device_profile, model_spec
from specdec.emulator.timing import StepLoad, TimingModel
from specdec.errors import ConfigError

__all__ = ["FIGURES", "REFERENCE_ENGINES", "TOLERANCE", "Figure", "emulated_tok_s"]

TOLERANCE = 0.15

# Jetson AI Lab benchmarks: NVIDIA-AI-IOT/jetson-ai-lab src/data/benchmarks.json. The current
# version (@0d6baca4) states isl 2048 / osl 128 and "Unless otherwise specified, all models
# utilize W4A16 quantization for Orin"; the first (@87101337, 2025-12-18) had Llama-3.1-8B and
# Qwen3-8B (RedHatAI ...quantized.w4a16 per src/content/models/*.md) under "Benchmarks on
# Jetson running vLLM".
_AILAB = "NVIDIA Jetson AI Lab benchmarks.json (NVIDIA-AI-IOT/jetson-ai-lab src/data) @"
_NX_INFERRED = ("inferred: not published; both NX rows cost 52 ms per extra 2.2 GB of weights "
                "(42 GB/s), which only a 2133 MHz EMC ceiling (10W) gives at the AGX "
                "efficiency (benchmarks/calibration.py shows the MAXN_SUPER figures)")
_MLC = ("NVIDIA Jetson AI Lab benchmarks (NVIDIA-AI-IOT/jetson-ai-lab "
        "public/archive/benchmarks.html @58a02042), 'Jetson Orin Nano (original)' vs "
        "'Jetson Orin Nano Super', MLC INT4 (jetson-containers packages/llm/mlc/benchmarks.sh)")
_SPARK_BLOG = ("NVIDIA Technical Blog 'How NVIDIA DGX Spark's Performance Enables Intensive AI "
               "Tasks' (batch 1, ISL 2048, OSL 128; quoted table)")


@dataclass(frozen=True)
class Figure:
    device: str  # catalog device
    power_mode: str | None  # nvpmodel mode name (None: no nvpmodel, DGX Spark)
    mode_basis: str  # "published", "assumed: ...", "inferred: ..."
    engine: str  # what the source ran: vllm, trtllm or a REFERENCE_ENGINES key
    model: str  # catalog model
    precision: str
    tok_s: float  # published batch-1 decode rate
    isl: int  # prompt tokens (context of the decode steps, with half the output)
    osl: int
    source: str
    decode_gb: float | None = None  # bytes per decode step, when no catalog checkpoint has them


@dataclass(frozen=True)
class ReferenceEngine:
    bw_eff: float
    basis: str


# Engines the emulator does not emulate, for devices with no published vLLM / TRT-LLM figure.
REFERENCE_ENGINES = {
    "mlc": ReferenceEngine(0.79, "fitted on the original Orin Nano's Llama-3.1-8B row (14.0)"),
}

_ASSUMED_MAXN = "assumed: not published; NVIDIA benchmarks run at MAXN with jetson_clocks"
# MLC q4f16_ft: 4-bit linear layers and LM head (per-channel scales), embedding not read.
_MLC_L8 = round((6.979 + 0.525) * 0.5, 2)  # Llama-3.1-8B: 3.75 GB
_MLC_L3 = round((2.819 + 0.394) * 0.5, 2)  # Llama-3.2-3B, tied LM head: 1.61 GB

FIGURES: tuple[Figure, ...] = (
    Figure("agx-orin-64gb", "MAXN", _ASSUMED_MAXN, "vllm", "RedHatAI/Qwen3-8B-quantized.w4a16",
           "W4A16", 30.0, 2048, 128, _AILAB + "0d6baca4 (Qwen 3 8B, agx_orin_64gb)"),
    Figure("agx-orin-64gb", "MAXN", _ASSUMED_MAXN, "vllm", "RedHatAI/Qwen3-8B-quantized.w4a16",
           "W4A16", 26.53, 2048, 128, _AILAB + "87101337 (qwen3-8b, orin)"),
    Figure("agx-orin-64gb", "MAXN", _ASSUMED_MAXN, "vllm", "RedHatAI/Qwen3-4B-quantized.w4a16",
           "W4A16", 50.0, 2048, 128, _AILAB + "0d6baca4 (Qwen 3 4B, agx_orin_64gb)"),
    Figure("agx-orin-64gb", "MAXN", _ASSUMED_MAXN, "vllm",
           "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "W4A16", 28.14, 2048, 128,
           _AILAB + "87101337 (llama-3-1-8b, orin)"),
    Figure("orin-nx-16gb", "10W", _NX_INFERRED, "vllm", "RedHatAI/Qwen3-8B-quantized.w4a16",
           "W4A16", 9.0, 2048, 128, _AILAB + "0d6baca4 (Qwen 3 8B, orin_nx_16gb)"),
    Figure("orin-nx-16gb", "10W", _NX_INFERRED, "vllm", "RedHatAI/Qwen3-4B-quantized.w4a16",
           "W4A16", 17.0, 2048, 128, _AILAB + "0d6baca4 (Qwen 3 4B, orin_nx_16gb)"),
    Figure("orin-nano-8gb", "15W", "published: the original Orin Nano's top mode (pre-super)",
           "mlc", "meta-llama/Llama-3.1-8B-Instruct", "INT4 (MLC q4f16_ft)", 14.0, 16, 128,
           _MLC, decode_gb=_MLC_L8),
    Figure("orin-nano-8gb", "MAXN_SUPER", "published: Orin Nano Super", "mlc",
           "meta-llama/Llama-3.1-8B-Instruct", "INT4 (MLC q4f16_ft)", 19.14, 16, 128, _MLC,
           decode_gb=_MLC_L8),
    Figure("orin-nano-8gb", "15W", "published: the original Orin Nano's top mode (pre-super)",
           "mlc", "meta-llama/Llama-3.2-3B-Instruct", "INT4 (MLC q4f16_ft)", 27.7, 16, 128,
           _MLC, decode_gb=_MLC_L3),
    Figure("orin-nano-8gb", "MAXN_SUPER", "published: Orin Nano Super", "mlc",
           "meta-llama/Llama-3.2-3B-Instruct", "INT4 (MLC q4f16_ft)", 43.07, 16, 128, _MLC,
           decode_gb=_MLC_L3),
    Figure("dgx-spark", None, "published: no power modes", "trtllm",
           "nvidia/Llama-3.1-8B-Instruct-FP4", "NVFP4", 38.65, 2048, 128, _SPARK_BLOG),
    Figure("dgx-spark", None, "published: no power modes", "trtllm", "Qwen/Qwen3-14B",
           "NVFP4", 22.71, 2048, 128, _SPARK_BLOG + "; NVFP4 weights: 13.21B linear x 0.5625 B "
           "+ 16-bit LM head = 8.99 GB", decode_gb=8.99),
    Figure("dgx-spark", None, "published: no power modes", "vllm", "Qwen/Qwen3-8B", "BF16",
           13.1, 256, 256, "https://www.lyb.re/writing/2026-03-10-dgx-spark-vllm (vLLM on DGX "
           "Spark: 'Qwen3-8B was better at 13.1 tok/s'; context not stated, short assumed)"),
)


def emulated_tok_s(fig: Figure) -> float:
    """The emulator's batch-1 decode rate for ``fig`` (same timing model as the engines)."""
    cat = load_catalog()
    dev = cat.device(fig.device)
    ref = REFERENCE_ENGINES.get(fig.engine)
    if ref is None and fig.engine not in dev.engines:
        raise ConfigError(f"figure engine {fig.engine!r} runs neither in the emulator nor as "
                          "a reference engine")
    if fig.power_mode is not None and dev.mode_bandwidth_gbs(fig.power_mode) is None:
        raise ConfigError(f"{fig.device} has no power mode {fig.power_mode!r} in the catalog")
    profile = device_profile(fig.device, engine=None if ref else fig.engine,
                             power_mode=fig.power_mode)
    if ref is not None:
        profile = dataclasses.replace(profile, bw_eff=ref.bw_eff)
    spec = model_spec(fig.model)
    if spec is None:
        raise ConfigError(f"figure model {fig.model!r} is not in the catalog")
    if fig.decode_gb is not None:
        spec = dataclasses.replace(spec, decode_bytes=fig.decode_gb * 1e9)
    timing = TimingModel(device=profile, target=spec,
                         kv_bytes_per_token=spec.kv_bytes_per_token,
                         overlap_scheduler=fig.engine == "trtllm")
    step = timing.step_time(StepLoad(decode_seqs=1, kv_tokens=fig.isl + fig.osl // 2))
    return 1.0 / step.total_s
