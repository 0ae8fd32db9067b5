"""The per-host plan: catalog + ``specdec_*`` host data + identity -> one validated `Plan`.

Choices a user did not pin are made here, in this order, and explained in ``plan.notes``:
method (EAGLE-3 head -> same-tokenizer draft model -> n-gram, the first that fits), draft,
``num_speculative_tokens`` (device starting point), memory fraction, ``max_model_len``,
``max_num_seqs``, image (pinned, from the catalog). A pinned value that does not work is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specdec.catalog import GIB, Catalog, Device, Image, Model, load_catalog
from specdec.errors import ConfigError, PlanError
from specdec.fit import fit, fit_problem, max_model_len_for
from specdec.hostdata import HostSettings, as_mapping, parse_host_settings
from specdec.hygiene import check_image
from specdec.identify import Identity
from specdec.plan_engine import (
    engine_details,
    engine_version,
    image_for_host,
    release_details,
    runnable,
)
from specdec.plan_types import DynamoPlan, FitReport, Plan
from specdec.tune import K_MAX

if TYPE_CHECKING:
    from specdec.dynamo.group import Group

__all__ = ["DEFAULT_PORT", "baseline", "check_image", "make_plan"]

DEFAULT_PORT = 8000
# Methods whose speculator is separate weights given by `model` in --speculative-config.
HEAD_METHODS = ("eagle3", "eagle", "medusa", "mlp_speculator", "dflash")
# Methods with no separate weights.
SELF_METHODS = ("ngram", "ngram_gpu", "suffix", "mtp")
# A default context that does not fit is shortened, but not below this.
MIN_AUTO_MODEL_LEN = 1024

# Starting num_speculative_tokens for methods the device table does not list.
_K_ALIASES = {"eagle": "eagle3", "dflash": "eagle3", "ngram_gpu": "ngram", "suffix": "ngram"}
_DEFAULT_K = 3

@dataclass(frozen=True)
class _Candidate:
    method: str
    draft: str | None
    draft_weight_gib: float
    draft_kv_bytes_per_token: int
    why: str


def _custom_model(s: HostSettings, cat: Catalog, device: Device) -> Model:
    assert s.model is not None
    base = cat.models.get(s.model)
    if base is None:
        if s.model_params_b is None:
            known = ", ".join(sorted(cat.models))
            raise ConfigError(
                f"specdec_model={s.model!r}: not in the catalog; set specdec_model_params_b "
                f"(and optionally specdec_model_weight_gib) or use one of: {known}",
                host=s.host,
            )
        params = s.model_params_b
        # bf16 weights; KV scaled from an 8B-class model (131072 B/token) by sqrt(params / 8B).
        weight = s.model_weight_gib or params * 1e9 * 2 / GIB
        kv = s.model_kv_bytes_per_token or int(131072 * max(1.0, params / 8.0) ** 0.5)
        return Model(
            id=s.model,
            params_b=params,
            weight_gib=round(weight, 2),
            tokenizer=s.model_tokenizer or f"unknown:{s.model}",
            layers=32,
            kv_bytes_per_token=kv,
            max_context=device.max_model_len,
            heads={},
            drafts=(),
        )
    return dataclasses.replace(
        base,
        params_b=s.model_params_b or base.params_b,
        weight_gib=s.model_weight_gib or base.weight_gib,
        kv_bytes_per_token=s.model_kv_bytes_per_token or base.kv_bytes_per_token,
        tokenizer=s.model_tokenizer or base.tokenizer,
    )


def _resolve_device(s: HostSettings, identity: Identity | None, cat: Catalog) -> Device:
    if s.device is not None and s.device not in cat.devices:
        raise ConfigError(
            f"specdec_device={s.device!r}: unknown device "
            f"(known: {', '.join(sorted(cat.devices))})",
            host=s.host,
        )
    if s.device and identity and identity.device != s.device:
        raise PlanError(
            f"declared specdec_device={s.device} but the host identifies as {identity.device}",
            host=s.host,
        )
    device_id = s.device or (identity.device if identity else None)
    if device_id is None:
        raise ConfigError(
            "specdec_device is not set and the host was not identified (offline plans need it)",
            host=s.host,
        )
    return cat.device(device_id)


def _tokenizer_of(cat: Catalog, draft: str) -> str | None:
    if draft in cat.heads:
        return cat.heads[draft].tokenizer
    if draft in cat.models:
        return cat.models[draft].tokenizer
    return None


def _explicit_draft(s: HostSettings, cat: Catalog, model: Model, method: str) -> _Candidate:
    assert s.draft is not None
    d = s.draft
    key = f"specdec_draft={d!r}"
    if d == model.id:
        raise ConfigError(f"{key}: the draft is the target model itself", host=s.host)
    tok = _tokenizer_of(cat, d)
    if tok is None:
        raise ConfigError(
            f"{key}: not a catalog model or EAGLE head (its size and tokenizer are unknown)",
            host=s.host,
        )
    if model.tokenizer.startswith("unknown:"):
        raise ConfigError(
            f"specdec_model={model.id!r}: tokenizer unknown, cannot check {key}; "
            "set specdec_model_tokenizer",
            host=s.host,
        )
    if tok != model.tokenizer:
        raise ConfigError(
            f"{key}: tokenizer {tok} does not match the target {model.id} ({model.tokenizer})",
            host=s.host,
        )
    if d in cat.heads:
        head = cat.heads[d]
        if not model.takes_head(head):
            raise ConfigError(
                f"{key}: is a {head.method} head for {head.target}, not for {model.id}",
                host=s.host,
            )
        if method != head.method:
            raise ConfigError(
                f"{key}: is a {head.method} head but specdec_method={method!r}", host=s.host
            )
        return _Candidate(method, d, head.weight_gib, _one_layer(model), "specdec_draft")
    if method != "draft_model":
        raise ConfigError(
            f"{key}: is a standalone model; use specdec_method='draft_model' (not {method!r})",
            host=s.host,
        )
    dm = cat.models[d]
    return _Candidate(method, d, dm.weight_gib, dm.kv_bytes_per_token, "specdec_draft")


def _one_layer(model: Model) -> int:
    return max(1, model.kv_bytes_per_token // max(1, model.layers))


def _catalog_drafts(cat: Catalog, model: Model) -> list[_Candidate]:
    out = []
    for d in model.drafts:
        dm = cat.models.get(d)
        if dm is not None and dm.tokenizer == model.tokenizer:
            out.append(
                _Candidate(
                    "draft_model", d, dm.weight_gib, dm.kv_bytes_per_token,
                    f"catalog draft {d} (tokenizer {dm.tokenizer})",
                )
            )
    return out


def _candidates(
    s: HostSettings, cat: Catalog, device: Device, model: Model
) -> tuple[list[_Candidate], list[str]]:
    """Candidate configurations in preference order, and notes."""
    notes: list[str] = []
    method = s.method
    if method is None and s.draft is not None:
        method = cat.heads[s.draft].method if s.draft in cat.heads else "draft_model"
        notes.append(f"method {method} inferred from specdec_draft")
    if method is not None:
        if method == "none" or method in SELF_METHODS:
            if s.draft is not None:
                raise ConfigError(
                    f"specdec_draft={s.draft!r}: method {method!r} takes no draft", host=s.host
                )
            return [_Candidate(method, None, 0.0, 0, "specdec_method")], notes
        if s.draft is not None:
            return [_explicit_draft(s, cat, model, method)], notes
        if method in HEAD_METHODS:
            head_id = model.heads.get(method)
            if head_id is None:
                raise ConfigError(
                    f"specdec_method={method!r}: no known {method} head for {model.id}; "
                    "set specdec_draft or choose another method",
                    host=s.host,
                )
            if method == "eagle3" and not device.eagle3:
                notes.append(f"eagle3 pinned; the catalog does not advise it on {device.id}")
            head = cat.heads[head_id]
            return [
                _Candidate(method, head_id, head.weight_gib, _one_layer(model), "catalog head")
            ], notes
        # draft_model without an explicit draft: any catalog draft (first that fits).
        drafts = _catalog_drafts(cat, model)
        if not drafts:
            raise ConfigError(
                f"specdec_method='draft_model': no catalog draft for {model.id}; set specdec_draft",
                host=s.host,
            )
        return drafts, notes

    out: list[_Candidate] = []
    head_id = model.heads.get("eagle3")
    if head_id and device.eagle3:
        head = cat.heads[head_id]
        out.append(_Candidate("eagle3", head_id, head.weight_gib, _one_layer(model),
                              f"EAGLE-3 head {head_id}"))
    elif head_id:
        notes.append(f"eagle3 head {head_id} skipped: the catalog does not advise EAGLE-3 on "
                     f"{device.id}")
    out.extend(_catalog_drafts(cat, model))
    out.append(_Candidate("ngram", None, 0.0, 0, "n-gram (no extra weights)"))
    return out, notes


def _spec_tokens(s: HostSettings, device: Device, method: str) -> int:
    if method == "none":
        return 0
    if s.num_speculative_tokens is not None:
        return s.num_speculative_tokens
    table = device.speculative_tokens
    return table.get(method) or table.get(_K_ALIASES.get(method, ""), 0) or _DEFAULT_K


def _fit_keys(s: HostSettings, method: str, draft: str | None, util: float, mml: int) -> str:
    def val(name: str, value: Any) -> str:
        return f"specdec_{name}={value!r}" + ("" if s.pinned(name) else " (default)")

    parts = [f"specdec_model={s.model!r}", val("method", method)]
    if draft:
        parts.append(val("draft", draft))
    parts += [val("gpu_memory_utilization", util), val("max_model_len", mml)]
    return ", ".join(parts)


def _coerce_args(identity: Any, catalog: Any) -> tuple[Identity | None, Catalog]:
    # Accept make_plan(host, data, catalog, identity) too (positional order of older docs).
    if isinstance(identity, Catalog) and (catalog is None or isinstance(catalog, Identity)):
        identity, catalog = catalog, identity
    return identity, catalog or load_catalog()


def make_plan(
    host: str,
    data: Any,
    identity: Identity | None = None,
    catalog: Catalog | None = None,
    installed: Mapping[str, str] | None = None,
    group: Group | None = None,
) -> Plan:
    """Plan one host. ``data``: its host data (dict, Mapping or pyinfra ``host.data``);
    ``installed``: engine -> version found on the host (native runtime), when known;
    ``group``: its Dynamo serving group (`specdec.dynamo.group.groups_of` over the inventory)."""
    identity, cat = _coerce_args(identity, catalog)
    s = parse_host_settings(host, data)
    if s.model is None:
        raise ConfigError("specdec_model is not set", host=host)
    device = _resolve_device(s, identity, cat)
    notes: list[str] = []
    if identity is not None:
        notes.append(f"identified as {identity.device} ({identity.model_string}"
                     + (f", L4T {identity.l4t}" if identity.l4t else "") + ")")

    engine = s.engine or "vllm"
    if engine not in device.engines:
        raise PlanError(
            f"specdec_engine={engine!r}: not supported on {device.id} (platform "
            f"{device.platform}; supported: {', '.join(device.engines)})",
            host=host,
        )
    runtime = s.runtime or "docker"
    if runtime not in device.runtimes:
        raise PlanError(
            f"specdec_runtime={runtime!r}: not supported on {device.id} "
            f"(supported: {', '.join(device.runtimes)})",
            host=host,
        )
    image: str | None = None
    img: Image | None = None
    if runtime == "docker":
        image, img = image_for_host(s, cat, device, engine, identity)
    else:
        if s.image is not None:
            notes.append("specdec_image ignored: runtime is native")
        img = cat.default_image(device, engine, identity.l4t if identity and identity.l4t
                                else ("36.4" if device.platform == "l4t" else None))
    version, origin = engine_version(s, engine, runtime, image, img, installed)
    notes.append(f"{engine} {version} ({origin})")
    vllm_pin: str | None = None
    if engine == "dynamo":
        from specdec.dynamo.plan import vllm_release

        vllm_pin = vllm_release(s, version, origin)
        notes.append(f"Dynamo {version} runs vLLM {vllm_pin}: its speculative config is "
                     f"vLLM {vllm_pin}'s")

    model = _custom_model(s, cat, device)
    quant = cat.quantizations.get(model.quantization)
    if quant is not None and device.platform not in quant.platforms:
        raise PlanError(
            f"specdec_model={model.id!r}: {model.quantization} weights do not run on "
            f"{device.id} (runs on: {', '.join(quant.platforms)}; {quant.note})",
            host=host,
        )
    if s.max_model_len is not None and s.max_model_len > model.max_context:
        raise ConfigError(
            f"specdec_max_model_len={s.max_model_len}: exceeds {model.id}'s context "
            f"({model.max_context})",
            host=host,
        )
    max_model_len = s.max_model_len or min(device.max_model_len, model.max_context)
    max_num_seqs = s.max_num_seqs or device.max_num_seqs
    port = s.port or DEFAULT_PORT

    candidates, cand_notes = _candidates(s, cat, device, model)
    notes += cand_notes
    candidates = runnable(s, engine, version, model, candidates, notes)

    pinned_choice = s.method is not None or s.draft is not None
    def budget(cand: _Candidate, length: int) -> tuple[float, FitReport]:
        util = s.gpu_memory_utilization or (
            device.mem_util_speculative if cand.method != "none" else device.mem_util_baseline
        )
        return util, fit(device, model.weight_gib, model.kv_bytes_per_token,
                         cand.draft_weight_gib, cand.draft_kv_bytes_per_token, util, length)

    chosen: tuple[_Candidate, float, FitReport] | None = None
    last_problem = ""
    reports: list[tuple[_Candidate, FitReport]] = []
    for cand in candidates:
        util, report = budget(cand, max_model_len)
        problem = fit_problem(report, util, max_model_len)
        if problem is None:
            chosen = (cand, util, report)
            break
        reports.append((cand, report))
        last_problem = f"{_fit_keys(s, cand.method, cand.draft, util, max_model_len)}: {problem}"
        notes.append(f"{cand.method}{' ' + cand.draft if cand.draft else ''} does not fit: "
                     f"{problem}")
    if chosen is None and s.max_model_len is None:
        # Nothing fits at the device's default context: the longest context that does (as
        # vLLM's "estimated maximum model length"), in the same order of preference.
        for cand, report in reports:
            shorter = max_model_len_for(report, max_model_len) // 256 * 256
            if shorter < MIN_AUTO_MODEL_LEN:
                continue
            util, report = budget(cand, shorter)
            if fit_problem(report, util, shorter) is None:
                notes.append(f"max_model_len {max_model_len} does not fit; {shorter} does "
                             f"(set specdec_max_model_len to choose)")
                max_model_len = shorter
                chosen = (cand, util, report)
                break
    if chosen is None:
        raise PlanError(last_problem, host=host)
    cand, util, report = chosen
    if not pinned_choice:
        notes.append(f"method {cand.method}: {cand.why}, fits")

    k = _spec_tokens(s, device, cand.method)
    # k auto is tuned on the host's own API; a Dynamo group is measured through its frontend
    k_auto = s.num_speculative_tokens is None and cand.method != "none" and vllm_pin is None
    methods: tuple[tuple[str, str | None], ...] = ()
    if k_auto:
        methods = ((cand.method, cand.draft),)
        # n-gram needs no weights nor memory: the tune measures it too, unless pinned
        if not pinned_choice and cand.method != "ngram" and any(
                c.method == "ngram" for c in candidates):
            methods += (("ngram", None),)
        notes.append(f"num_speculative_tokens auto: tuned on the host from k={k} over 1.."
                     f"{K_MAX}" + (" (and against n-gram)" if len(methods) > 1 else ""))
    env = dict(s.env)
    dyn: DynamoPlan | None = None
    if vllm_pin is not None:
        from specdec.dynamo.plan import dynamo_part

        dyn = dynamo_part(s, as_mapping(data), group, vllm_pin, port, cand.method, k, notes)
    decoding, draft_dir, tiktoken = engine_details(engine, version, model, cand.method,
                                                    cand.draft)
    return Plan(
        host=host,
        device=device.id,
        engine=engine,
        runtime=runtime,
        image=image,
        engine_version=str(version),
        model=model.id,
        served_model_name=model.id,
        method=cand.method,
        draft=cand.draft,
        num_speculative_tokens=k,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        port=port,
        memlock=s.memlock,
        jetson_tuning=s.jetson_tuning and device.is_jetson,
        health_timeout_s=s.health_timeout,
        gate=s.gate,
        fit=report,
        extra_args=s.extra_args,
        env=s.env,
        fault=env.get("SPECDEC_EMU_FAULT"),
        notes=tuple(notes),
        service_user=s.service_user,
        pinned=tuple(sorted(s.keys)),
        decoding_type=decoding,
        draft_dir=draft_dir,
        tiktoken_dir=tiktoken,
        dynamo=dyn,
        k_auto=k_auto,
        tune_methods=methods,
    )


def baseline(plan: Plan, catalog: Catalog | None = None) -> Plan:
    """The same host with speculation off (memory fraction back to the device baseline)."""
    cat = catalog or load_catalog()
    device = cat.device(plan.device)
    if "specdec_gpu_memory_utilization" in plan.pinned:
        util = plan.gpu_memory_utilization
    else:
        util = device.mem_util_baseline
    report = fit(device, plan.fit.target_gib, _target_kv(cat, plan), 0.0, 0, util,
                 plan.max_model_len)
    problem = fit_problem(report, util, plan.max_model_len)
    if problem is not None:
        raise PlanError(
            f"baseline: specdec_model={plan.model!r}, gpu_memory_utilization={util!r}: {problem}",
            host=plan.host,
        )
    return dataclasses.replace(
        plan,
        method="none",
        draft=None,
        num_speculative_tokens=0,
        gpu_memory_utilization=util,
        fit=report,
        notes=(*plan.notes, "baseline: speculation off"),
        decoding_type=None,
        draft_dir=None,
        k_auto=False,
        tune_methods=(),
        k_by_batch=(),
        tuned=None,
    )


def speculating(plan: Plan, method: str, draft: str | None, k: int,
                k_by_batch: tuple[tuple[int, int, int], ...] = ()) -> Plan:
    """The plan with another speculation setting (a tune point); the release-specific details
    (TensorRT-LLM's decoding_type, a local draft directory) follow the method and draft."""
    decoding, draft_dir = release_details(plan.engine, plan.engine_version, method, draft)
    return dataclasses.replace(plan, method=method, draft=draft, num_speculative_tokens=k,
                               k_by_batch=k_by_batch, decoding_type=decoding,
                               draft_dir=draft_dir)


def _target_kv(cat: Catalog, plan: Plan) -> int:
    """Recover the target's KV bytes/token from the plan's fit report (needed = len * (t + d))."""
    draft_kv = 0
    if plan.draft in cat.models:
        draft_kv = cat.models[plan.draft].kv_bytes_per_token
    elif plan.draft in cat.heads and plan.model in cat.models:
        draft_kv = _one_layer(cat.models[plan.model])
    if plan.model in cat.models and "specdec_model_kv_bytes_per_token" not in plan.pinned:
        return cat.models[plan.model].kv_bytes_per_token
    total = plan.fit.kv_needed_gib * GIB / max(1, plan.max_model_len)
    return max(1, int(round(total)) - draft_kv)
