"""The device and model catalog: what each device, model, EAGLE head and image *is*
(``devices.yaml``, ``models.yaml``, ``images.yaml``), typed and validated on load
(`load_catalog`); `images` parses image references and the image table.

May import `specdec.errors`, `config.hygiene` and `engines.version` only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specdec.catalog.images import Image, parse_image_ref, parse_images
from specdec.engines.version import Version
from specdec.errors import ConfigError

__all__ = [
    "ENGINES",
    "METHODS",
    "RUNTIMES",
    "Catalog",
    "Device",
    "Head",
    "Image",
    "Model",
    "Module",
    "Quantization",
    "Refused",
    "load_catalog",
]

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


def _req(where: str, data: dict[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    if key not in data:
        raise ConfigError(f"catalog {where}: missing key {key!r}")
    value = data[key]
    if typ in (float, (int, float)) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and typ is not bool or not isinstance(value, typ):
        name = getattr(typ, "__name__", typ)
        raise ConfigError(f"catalog {where}: {key}={value!r} is not {name}")
    return value


def _positive(where: str, key: str, value: float) -> float:
    if value <= 0:
        raise ConfigError(f"catalog {where}: {key}={value!r} must be > 0")
    return value


def _device(dev_id: str, d: dict[str, Any]) -> Device:
    w = f"device {dev_id}"
    if not isinstance(d, dict):
        raise ConfigError(f"catalog {w}: expected a mapping, got {d!r}")
    engines = tuple(_req(w, d, "engines", list))
    for e in engines:
        if e not in ENGINES:
            raise ConfigError(f"catalog {w}: engines has unknown engine {e!r}")
    runtimes = tuple(_req(w, d, "runtimes", list))
    for r in runtimes:
        if r not in RUNTIMES:
            raise ConfigError(f"catalog {w}: runtimes has unknown runtime {r!r}")
    util = _req(w, d, "gpu_memory_utilization", dict)
    fractions = {}
    for k in ("baseline", "speculative"):
        v = util.get(k)
        if not isinstance(v, int | float) or not 0 < v <= 1:
            raise ConfigError(f"catalog {w}: gpu_memory_utilization.{k}={v!r} must be in (0, 1]")
        fractions[k] = float(v)
    spec_tokens = _req(w, d, "speculative_tokens", dict)
    for m, k in spec_tokens.items():
        if m not in METHODS or not isinstance(k, int) or k < 1:
            raise ConfigError(f"catalog {w}: speculative_tokens.{m}={k!r} is invalid")
    platform = _choice(w, "platform", _req(w, d, "platform", str), PLATFORMS)
    dtype = d.get("dtype")
    if dtype is not None:
        dtype = _choice(w, "dtype", str(dtype), tuple(DTYPE_BYTES))
    natives = d.get("native_releases") or {}
    if not isinstance(natives, dict) or any(e not in engines or not isinstance(v, str)
                                            for e, v in natives.items()):
        raise ConfigError(f"catalog {w}: native_releases={natives!r} must map its engines to "
                          "release strings")
    modes = _floats(w, "power_modes", d.get("power_modes") or {})
    effs = _floats(w, "bandwidth_efficiency", d.get("bandwidth_efficiency") or {})
    for eng, eff in effs.items():
        if eng not in engines or not 0 < eff <= 1:
            raise ConfigError(f"catalog {w}: bandwidth_efficiency.{eng}={eff!r} is invalid")
    quants = d.get("quantizations")
    if quants is not None and (not isinstance(quants, list)
                               or not all(isinstance(q, str) for q in quants)):
        raise ConfigError(f"catalog {w}: quantizations={quants!r} must be a list of names")
    presuper = d.get("presuper_bandwidth_gbs")
    if presuper is not None:
        presuper = _positive(w, "presuper_bandwidth_gbs",
                             _req(w, d, "presuper_bandwidth_gbs", (int, float)))
    return Device(
        id=dev_id,
        family=_req(w, d, "family", str),
        model_string=_req(w, d, "model_string", str),
        module_ids=(),  # filled from the modules table
        memory_gib=_positive(w, "memory_gib", _req(w, d, "memory_gib", (int, float))),
        memtotal_gib=_positive(w, "memtotal_gib", _req(w, d, "memtotal_gib", (int, float))),
        bandwidth_gbs=_positive(w, "bandwidth_gbs", _req(w, d, "bandwidth_gbs", (int, float))),
        fp16_tflops=_positive(w, "fp16_tflops", _req(w, d, "fp16_tflops", (int, float))),
        arch=_req(w, d, "arch", str),
        platform=platform,
        engines=engines,
        runtimes=runtimes,
        mem_util_baseline=fractions["baseline"],
        mem_util_speculative=fractions["speculative"],
        max_num_seqs=int(_positive(w, "max_num_seqs", _req(w, d, "max_num_seqs", int))),
        max_model_len=int(_positive(w, "max_model_len", _req(w, d, "max_model_len", int))),
        speculative_tokens=dict(spec_tokens),
        eagle3=_req(w, d, "eagle3", bool),
        gpu_name=d.get("gpu_name"),
        memory_bus_bits=int(_positive(w, "memory_bus_bits",
                                      _req(w, d, "memory_bus_bits", int))),
        power_modes=modes,
        bandwidth_efficiency=effs,
        jetson=_flag(w, d, "jetson", platform == "l4t"),
        quantizations=tuple(quants) if quants is not None else None,
        presuper_bandwidth_gbs=presuper,
        host_memory=_flag(w, d, "host_memory"),
        dtype=dtype,
        native_releases={e: str(Version.parse(v)) for e, v in natives.items()},
    )


def _floats(where: str, key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for v in value.values()):
        raise ConfigError(f"catalog {where}: {key}={value!r} must map names to numbers > 0")
    return {str(k): float(v) for k, v in value.items()}


def _mapping(key: str, data: Any) -> dict[Any, Any]:
    """A catalog section that must be a mapping (one line naming it otherwise)."""
    if not isinstance(data, dict):
        raise ConfigError(f"catalog: {key}={data!r} must be a mapping")
    return data


def _modules(data: Any, devices: dict[str, Device]) -> dict[str, Module]:
    out: dict[str, Module] = {}
    for mid, row in _mapping("modules", data).items():
        mod = _module(f"module {mid}", mid, row, devices)
        if (mod.memory_gib, mod.bandwidth_gbs) != (devices[mod.device].memory_gib,
                                                   devices[mod.device].bandwidth_gbs):
            raise ConfigError(f"catalog module {mid}: memory/bandwidth {mod.memory_gib:g} GiB / "
                              f"{mod.bandwidth_gbs:g} GB/s disagree with {mod.device}")
        carriers = row.get("carriers") or {}
        if not isinstance(carriers, dict):
            raise ConfigError(f"catalog module {mid}: carriers={carriers!r} must be a mapping")
        on = tuple((str(c), _module(f"module {mid} on {c}", mid,
                                    {"memory_gib": mod.memory_gib,
                                     "bandwidth_gbs": mod.bandwidth_gbs,
                                     "mode_table": mod.mode_table, **r}, devices))
                   for c, r in carriers.items())
        out[mid] = dataclasses.replace(mod, carriers=on)
    return out


def _module(w: str, mid: str, row: Any, devices: dict[str, Device]) -> Module:
    if not isinstance(row, dict):
        raise ConfigError(f"catalog {w}: expected a mapping, got {row!r}")
    dev = devices.get(_req(w, row, "device", str))
    if dev is None or not dev.is_jetson:
        raise ConfigError(f"catalog {w}: device={row.get('device')!r} is not a Jetson device")
    return Module(id=mid, device=dev.id, name=_req(w, row, "name", str),
                  memory_gib=_req(w, row, "memory_gib", (int, float)),
                  bandwidth_gbs=_req(w, row, "bandwidth_gbs", (int, float)),
                  nvpmodel_confs=_confs(w, row.get("nvpmodel_conf")),
                  mode_table=_flag(w, row, "mode_table", True))


def _confs(where: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``nvpmodel_conf``: a file name, or {first L4T release: file name}, oldest first."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (("0", value),)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"catalog {where}: nvpmodel_conf={value!r} must be a name or a "
                          "mapping of L4T releases to names")
    try:
        return tuple(sorted(((str(k), v) for k, v in value.items()),
                            key=lambda kv: Version.parse(kv[0])))
    except ValueError as exc:
        raise ConfigError(f"catalog {where}: nvpmodel_conf: {exc}") from None


def _refused(data: Any) -> dict[str, Refused]:
    out = {}
    for rid, row in _mapping("refused", data).items():
        w = f"refused {rid}"
        if not isinstance(row, dict):
            raise ConfigError(f"catalog {w}: expected a mapping, got {row!r}")
        lists = {k: tuple(str(x) for x in _req(w, row, k, list)) if k in row else ()
                 for k in ("boards", "gpu_names", "dgx_platforms", "dgx_names")}
        if not any(lists.values()):
            raise ConfigError(f"catalog {w}: names nothing to recognise it by")
        out[rid] = Refused(id=rid, name=_req(w, row, "name", str),
                           reason=" ".join(_req(w, row, "reason", str).split()), **lists)
    return out


def _quantizations(data: Any) -> dict[str, Quantization]:
    out = {}
    for q, row in _mapping("quantizations", data).items():
        w = f"quantization {q}"
        plats = tuple(_req(w, row, "platforms", list)) if isinstance(row, dict) else ()
        if not plats or any(p not in PLATFORMS for p in plats):
            raise ConfigError(f"catalog {w}: platforms must list some of {', '.join(PLATFORMS)}")
        out[q] = Quantization(id=q, platforms=plats, note=str(row.get("note") or ""))
    return out


def _model(model_id: str, d: dict[str, Any]) -> Model:
    w = f"model {model_id}"
    if not isinstance(d, dict):
        raise ConfigError(f"catalog {w}: expected a mapping, got {d!r}")
    heads = d.get("heads") or {}
    if not isinstance(heads, dict):
        raise ConfigError(f"catalog {w}: heads={heads!r} must be a mapping")
    active = d.get("active_params_b")
    tokenizer = _req(w, d, "tokenizer", str)
    arch, mtype = FAMILY_CONFIG.get(tokenizer, ("", ""))
    arch = d.get("architecture", arch)
    mtype = d.get("model_type", mtype)
    if not isinstance(arch, str) or not isinstance(mtype, str):
        raise ConfigError(f"catalog {w}: architecture and model_type must be strings")
    decode = d.get("decode_gib")
    if decode is not None:
        decode = _positive(w, "decode_gib", _req(w, d, "decode_gib", (int, float)))
    return Model(
        id=model_id,
        params_b=_positive(w, "params_b", _req(w, d, "params_b", (int, float))),
        weight_gib=_positive(w, "weight_gib", _req(w, d, "weight_gib", (int, float))),
        tokenizer=tokenizer,
        layers=int(_positive(w, "layers", _req(w, d, "layers", int))),
        kv_bytes_per_token=int(
            _positive(w, "kv_bytes_per_token", _req(w, d, "kv_bytes_per_token", int))
        ),
        max_context=int(_positive(w, "max_context", _req(w, d, "max_context", int))),
        heads=dict(heads),
        drafts=tuple(d.get("drafts") or ()),
        active_params_b=float(active) if active is not None else None,
        architecture=arch,
        model_type=mtype,
        vocab_size=int(d.get("vocab_size") or FAMILY_VOCAB.get(tokenizer, 0)),
        quantization=str(d.get("quantization") or "bf16"),
        base_model=d.get("base_model"),
        decode_gib=decode,
        gated=_flag(w, d, "gated"),
    )


def _head(head_id: str, d: dict[str, Any]) -> Head:
    w = f"head {head_id}"
    return Head(
        id=head_id,
        method=_req(w, d, "method", str),
        target=_req(w, d, "target", str),
        params_b=_positive(w, "params_b", _req(w, d, "params_b", (int, float))),
        weight_gib=_positive(w, "weight_gib", _req(w, d, "weight_gib", (int, float))),
        tokenizer=_req(w, d, "tokenizer", str),
        format=_choice(w, "format", _req(w, d, "format", str), HEAD_FORMATS),
        gated=_flag(w, d, "gated"),
        trained=_flag(w, d, "trained", default=True),
    )


def _flag(where: str, d: dict[str, Any], key: str, default: bool = False) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"catalog {where}: {key}={value!r} must be true or false")
    return value


def _choice(where: str, key: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"catalog {where}: {key}={value!r} is not one of {', '.join(choices)}")
    return value


def _read_yaml(path: Path | Any, top: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"catalog {path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get(top), dict):
        raise ConfigError(f"catalog {path}: expected a top-level {top!r} mapping")
    return data


def parse_catalog(devices_yaml: Path | Any, models_yaml: Path | Any,
                  images_yaml: Path | Any | None = None) -> Catalog:
    """Load and cross-check the catalog files."""
    dev_data = _read_yaml(devices_yaml, "devices")
    mod_data = _read_yaml(models_yaml, "models")
    images = (parse_images(_read_yaml(images_yaml, "images")["images"], ENGINES)
              if images_yaml is not None else {})
    devices = {k: _device(k, v) for k, v in dev_data["devices"].items()}
    modules = _modules(dev_data.get("modules") or {}, devices)
    devices = {k: dataclasses.replace(d, module_ids=tuple(
        m.id for m in modules.values() if m.device == k)) for k, d in devices.items()}
    quants = _quantizations(dev_data.get("quantizations") or {"bf16": {"platforms": ["l4t"]}})
    families = {d.family for d in devices.values()}
    for img in images.values():
        if set(img.families) - families:
            raise ConfigError(f"catalog image {img.ref}: families {list(img.families)} names "
                              f"an unknown family (known: {', '.join(sorted(families))})")
    for d in devices.values():
        unknown = sorted(set(d.quantizations or ()) - set(quants))
        if unknown:
            raise ConfigError(f"catalog device {d.id}: quantizations {unknown} are not in "
                              "quantizations")
    models = {k: _model(k, v) for k, v in mod_data["models"].items()}
    heads = {k: _head(k, v) for k, v in (mod_data.get("heads") or {}).items()}
    for m in models.values():
        if m.quantization not in quants:
            raise ConfigError(f"catalog model {m.id}: quantization={m.quantization!r} is not "
                              f"one of {', '.join(quants)}")
        if m.base_model is not None and m.base_model not in models:
            raise ConfigError(f"catalog model {m.id}: base_model {m.base_model!r} is not a "
                              "catalog model")
        for method, head in m.heads.items():
            if head not in heads:
                raise ConfigError(f"catalog model {m.id}: heads.{method}={head!r} is not in heads")
            if not m.takes_head(heads[head]):
                raise ConfigError(f"catalog head {head}: target {heads[head].target!r} is "
                                  f"neither {m.id!r} nor its base model")
        for draft in m.drafts:
            if draft not in models:
                raise ConfigError(f"catalog model {m.id}: draft {draft!r} is not a catalog model")
            if models[draft].tokenizer != m.tokenizer:
                raise ConfigError(f"catalog model {m.id}: draft {draft!r} has another tokenizer")
    return Catalog(devices=devices, models=models, heads=heads, images=images, modules=modules,
                   quantizations=quants, refused=_refused(dev_data.get("refused") or {}))


@cache
def load_catalog() -> Catalog:
    """The catalog shipped in the package."""
    root = resources.files("specdec.catalog")
    return parse_catalog(root.joinpath("devices.yaml"), root.joinpath("models.yaml"),
                         root.joinpath("images.yaml"))
