"""The catalog's types: devices, modules, refused hardware, quantizations, models, EAGLE heads
and the catalog itself, with the constants they are checked against (`specdec.catalog.parse`
fills them from the YAML files)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec.catalog.images import Image, parse_image_ref
from specdec.engines.version import Version
from specdec.errors import ConfigError

ENGINES = ("vllm", "trtllm", "dynamo")  # dynamo: NVIDIA Dynamo with its vLLM worker
RUNTIMES = ("docker", "native")
# vLLM's spelling of speculative methods (SpeculativeConfig.method), plus "none".
METHODS = (
    "none", "eagle3", "eagle", "draft_model", "ngram", "ngram_gpu", "mtp",
    "medusa", "mlp_speculator", "suffix", "dflash",
)
GIB = 1024**3
# config.json of the catalog's model families: "architectures"[0] and "model_type" (what the
# engines check EAGLE-3 targets against). A model entry may give its own (MoE variants).
FAMILY_CONFIG = {
    "llama3": ("LlamaForCausalLM", "llama"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "o200k_harmony": ("GptOssForCausalLM", "gpt_oss"),
    "smollm2": ("LlamaForCausalLM", "llama"),
}
# config.json "vocab_size" of each family (meta-llama/Llama-3.1-8B-Instruct and the Llama 3.2
# models: 128256; every Qwen3 dense model: 151936; openai/gpt-oss-120b: 201088;
# HuggingFaceTB/SmolLM2-135M-Instruct: 49152).
FAMILY_VOCAB = {"llama3": 128256, "qwen3": 151936, "o200k_harmony": 201088, "smollm2": 49152}
PLATFORMS = ("l4t", "sbsa", "cpu")  # Jetson Orin, DGX Spark, an x86-64 host's CPU
# Bytes per weight (and KV element) of a served dtype; catalog sizes are at 16 bits.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Device:
    id: str
    family: str
    model_string: str
    module_ids: tuple[str, ...]
    memory_gib: float  # nominal (the module's name)
    memtotal_gib: float  # MemTotal: what the OS and the engine see (carve-outs removed)
    bandwidth_gbs: float
    fp16_tflops: float
    arch: str
    platform: str  # "l4t" (Jetson Orin), "sbsa" (Spark, Thor on JetPack 7) or "cpu" (x86-64)
    engines: tuple[str, ...]
    runtimes: tuple[str, ...]
    mem_util_baseline: float
    mem_util_speculative: float
    max_num_seqs: int
    max_model_len: int
    speculative_tokens: dict[str, int]
    eagle3: bool
    gpu_name: str | None = None
    memory_bus_bits: int = 0
    power_modes: dict[str, float] = field(default_factory=dict)  # nvpmodel name -> GB/s
    bandwidth_efficiency: dict[str, float] = field(default_factory=dict)  # engine -> fraction
    jetson: bool = False  # a Tegra module: nvpmodel, the Tegra GPU nodes, --runtime nvidia
    quantizations: tuple[str, ...] | None = None  # narrower than the platform's, when set
    presuper_bandwidth_gbs: float | None = None  # the peak before L4T SUPER_L4T (Orin Nano)
    # the host's own MemTotal is its memory (a generic host): memory_gib is the least it plans
    # for, memtotal_gib an offline plan's assumption
    host_memory: bool = False
    dtype: str | None = None  # the dtype the engine serves in (None: the checkpoint's)
    native_releases: dict[str, str] = field(default_factory=dict)  # engine -> release, no image

    @property
    def is_jetson(self) -> bool:
        return self.jetson

    def runs(self, quant: Quantization) -> bool:
        """Whether the device runs weights of format ``quant``."""
        if self.quantizations is not None and quant.id not in self.quantizations:
            return False
        return self.platform in quant.platforms

    def peak_gbs(self, l4t: str | None = None) -> float:
        """The peak bandwidth on L4T ``l4t``: before super DTBs (L4T < `SUPER_L4T`, JetPack 5
        included) a Nano's EMC tops out at 2133 MHz whatever the mode; unknown L4T: the peak."""
        if self.presuper_bandwidth_gbs is not None and l4t and _l4t_before(l4t, SUPER_L4T):
            return self.presuper_bandwidth_gbs
        return self.bandwidth_gbs

    @property
    def is_cpu(self) -> bool:
        return self.platform == "cpu"

    @property
    def dtype_scale(self) -> float:
        """What the served dtype costs per weight and KV element against the catalog's 16 bits."""
        return DTYPE_BYTES[self.dtype] / 2 if self.dtype else 1.0

    def mode_bandwidth_gbs(self, mode: str | None) -> float | None:
        """Peak bandwidth in the nvpmodel mode called ``mode`` (None: not in the catalog)."""
        if mode is None:
            return self.bandwidth_gbs
        return self.power_modes.get(mode)

    def emc_bandwidth_gbs(self, emc_mhz: float) -> float:
        """Peak bandwidth at an EMC clock ceiling (MHz), never above the device's peak."""
        return min(self.bandwidth_gbs, round(emc_mhz * 2 * self.memory_bus_bits / 8 / 1000, 1))


# Super DTBs lift the Orin Nano's EMC maximum from L4T 36.4.2 (JetPack 6.1 rev1 / 6.2; devices.yaml)
SUPER_L4T = "36.4.2"


def _l4t_before(l4t: str, release: str) -> bool:
    try:
        return Version.parse(l4t) < Version.parse(release)
    except ValueError:
        return False


@dataclass(frozen=True)
class Module:
    """A module part number (``p3767-0005``) and the catalog device that plans for it."""

    id: str
    device: str
    name: str
    memory_gib: float
    bandwidth_gbs: float
    # the conf nvpower.sh links /etc/nvpmodel.conf to, by the first L4T release that does
    nvpmodel_confs: tuple[tuple[str, str], ...] = ()
    mode_table: bool = True  # False: the device's power_modes table is not this module's
    carriers: tuple[tuple[str, Module], ...] = ()  # carrier prefix -> the module on it

    @property
    def nvpmodel_conf(self) -> str | None:
        """The conf of the newest L4T release the catalog names."""
        return self.nvpmodel_confs[-1][1] if self.nvpmodel_confs else None

    def conf_for(self, l4t: str | None) -> str | None:
        """The conf nvpower.sh links on L4T ``l4t`` (unknown L4T: the newest; before the first
        release the catalog names: None)."""
        if not l4t:
            return self.nvpmodel_conf
        fits = [c for since, c in self.nvpmodel_confs if not _l4t_before(l4t, since)]
        return fits[-1] if fits else None

    def on(self, carrier: str | None) -> Module:
        """This module as it is on ``carrier`` (an IGX carrier makes p3701-0008 an IGX Orin)."""
        return next((m for prefix, m in self.carriers if carrier and carrier.startswith(prefix)),
                    self)


@dataclass(frozen=True)
class Refused:
    """Hardware specdec recognises and refuses (``refused:`` in devices.yaml)."""

    id: str
    name: str
    reason: str
    boards: tuple[str, ...] = ()  # "<carrier prefix>+<module>" of the device-tree compatible
    gpu_names: tuple[str, ...] = ()  # nvidia-smi's name
    dgx_platforms: tuple[str, ...] = ()  # /etc/dgx-release DGX_PLATFORM
    dgx_names: tuple[str, ...] = ()  # /etc/dgx-release DGX_NAME


@dataclass(frozen=True)
class Quantization:
    """A weight format and the platforms (``l4t``, ``sbsa``) whose engines run it."""

    id: str
    platforms: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Model:
    id: str
    params_b: float
    weight_gib: float
    tokenizer: str
    layers: int
    kv_bytes_per_token: int
    max_context: int
    heads: dict[str, str]  # method -> head repo
    drafts: tuple[str, ...]
    active_params_b: float | None = None
    architecture: str = ""  # config.json architectures[0]; "" when unknown
    model_type: str = ""  # config.json model_type
    vocab_size: int = 0  # config.json vocab_size; 0 when unknown
    quantization: str = "bf16"
    base_model: str | None = None  # the checkpoint a quantized one was made from
    decode_gib: float | None = None  # read per decode step (no input embedding table)
    gated: bool = False  # the Hub asks for an accepted licence: a download needs a token

    @property
    def weight_bytes(self) -> int:
        return int(self.weight_gib * GIB)

    @property
    def decode_bytes(self) -> int:
        """Bytes read from memory per decode step: ``decode_gib`` when the catalog states it,
        else the weights (MoE: scaled to the active parameters)."""
        if self.decode_gib is not None:
            return int(self.decode_gib * GIB)
        if self.active_params_b is None:
            return self.weight_bytes
        return int(self.weight_bytes * self.active_params_b / self.params_b)

    def takes_head(self, head: Head) -> bool:
        """Whether ``head`` was trained for this model or for the model it was quantized from
        (EAGLE heads are published for bf16 targets and reused with their quantized forms)."""
        return head.target in (self.id, self.base_model)


# EAGLE head checkpoint layouts (see models.yaml `heads:`): "original", the EAGLE-3 reference
# layout (SafeAILab / SpecForge / ModelOpt: a flat Llama config, weights `midlayer.*`) and
# "speculators", vLLM's speculators layout (`Eagle3Speculator`, the layer config nested under
# `transformer_layer_config`, weights `layers.0.*`, `norm_before_residual`).
HEAD_FORMATS = ("original", "speculators")


@dataclass(frozen=True)
class Head:
    id: str
    method: str
    target: str
    params_b: float
    weight_gib: float
    tokenizer: str
    format: str = "original"  # one of HEAD_FORMATS
    gated: bool = False  # as Model.gated
    trained: bool = True  # False: random weights (a lab control), never offered by the planner

    @property
    def weight_bytes(self) -> int:
        return int(self.weight_gib * GIB)


@dataclass(frozen=True)
class Catalog:
    devices: dict[str, Device]
    models: dict[str, Model]
    heads: dict[str, Head]
    images: dict[str, Image]
    modules: dict[str, Module] = field(default_factory=dict)
    quantizations: dict[str, Quantization] = field(default_factory=dict)
    refused: dict[str, Refused] = field(default_factory=dict)

    def is_gated(self, repo: str) -> bool:
        """Whether the catalog records ``repo`` (a model or a head) as gated on the Hub."""
        entry = self.models.get(repo) or self.heads.get(repo)
        return bool(entry and entry.gated)

    def needs_token(self, repo: str) -> bool:
        """Whether a download of ``repo`` needs the HF token: gated, or unknown here (it may be
        gated or private); an ungated catalog repo is downloaded without it."""
        entry = self.models.get(repo) or self.heads.get(repo)
        return entry is None or bool(entry.gated)

    def heads_for(self, model: Model, method: str) -> list[Head]:
        """The catalog's trained ``method`` heads ``model`` takes: the one the model names
        first, then any other made for it or for its base model (e.g. another checkpoint
        format). A head with random weights (``trained: false``) is never among them."""
        named = model.heads.get(method)
        out = [self.heads[named]] if named in self.heads else []
        out += sorted((h for h in self.heads.values() if h.method == method
                       and h.id != named and model.takes_head(h)), key=lambda h: h.id)
        return [h for h in out if h.trained]

    def default_image(self, device: Device, engine: str, l4t: str | None) -> Image | None:
        """The newest GA image of ``engine`` that runs on the device (its L4T release on a
        Jetson), else the newest release candidate; None when the catalog has none."""
        host_l4t = Version.parse(l4t) if l4t else None
        fits = [i for i in self.images.values()
                if i.engine == engine and i.runs_on(device.platform, host_l4t)
                and (not i.families or device.family in i.families)]
        if not fits:
            return None
        return max(fits, key=lambda i: (i.channel == "ga", i.engine_version))

    def image_for(self, ref: str) -> Image | None:
        """The catalog image ``ref`` is, or mirrors (same repository path and tag)."""
        parsed = parse_image_ref(ref)
        if parsed is None:
            return None
        return next((i for i in self.images.values() if i.key == parsed.key), None)

    def entrypoint_of(self, ref: str) -> tuple[str, ...]:
        """The ENTRYPOINT the catalog records for ``ref``'s repository (any tag, any registry:
        a mirror of it too); empty when none is recorded."""
        parsed = parse_image_ref(ref)
        if parsed is None:
            return ()
        return next((i.entrypoint for i in self.images.values()
                     if i.entrypoint and i.key.rsplit(":", 1)[0] == parsed.path), ())

    def module(self, module_id: str | None, carrier: str | None = None) -> Module | None:
        """The module ``module_id`` as it is on ``carrier`` (None: not in the catalog)."""
        mod = self.modules.get(module_id or "")
        return mod.on(carrier) if mod is not None else None

    def device(self, device_id: str) -> Device:
        try:
            return self.devices[device_id]
        except KeyError:
            raise ConfigError(
                f"unknown device {device_id!r} (known: {', '.join(sorted(self.devices))})"
            ) from None


