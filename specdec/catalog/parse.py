"""Reading the catalog's YAML files into its types (`specdec.catalog.types`): every field typed
and checked, one line naming the entry and the key otherwise."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from specdec.catalog.images import parse_images
from specdec.catalog.types import (
    DTYPE_BYTES,
    ENGINES,
    FAMILY_CONFIG,
    FAMILY_VOCAB,
    HEAD_FORMATS,
    METHODS,
    PLATFORMS,
    RUNTIMES,
    Catalog,
    Device,
    Head,
    Model,
    Module,
    Quantization,
    Refused,
)
from specdec.engines.version import Version
from specdec.errors import ConfigError

__all__ = ["parse_catalog"]


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
    extra = _device_extras(w, d, engines, platform)
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
        **extra,
    )


def _device_extras(w: str, d: dict[str, Any], engines: tuple[str, ...],
                   platform: str) -> dict[str, Any]:
    """A device's optional fields, checked: power modes, efficiencies, quantizations, the
    pre-super peak, a generic host's memory, its dtype and native releases."""
    dtype = d.get("dtype")
    if dtype is not None:
        dtype = _choice(w, "dtype", str(dtype), tuple(DTYPE_BYTES))
    natives = d.get("native_releases") or {}
    if not isinstance(natives, dict) or any(e not in engines or not isinstance(v, str)
                                            for e, v in natives.items()):
        raise ConfigError(f"catalog {w}: native_releases={natives!r} must map its engines to "
                          "release strings")
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
    return {"power_modes": _floats(w, "power_modes", d.get("power_modes") or {}),
            "bandwidth_efficiency": effs,
            "jetson": _flag(w, d, "jetson", platform == "l4t"),
            "quantizations": tuple(quants) if quants is not None else None,
            "presuper_bandwidth_gbs": presuper, "host_memory": _flag(w, d, "host_memory"),
            "dtype": dtype,
            "native_releases": {e: str(Version.parse(v)) for e, v in natives.items()}}


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


