"""The per-host plan: catalog + ``specdec_*`` host data + identity -> one validated `Plan`.

Choices a user did not pin are made here, in this order, and explained in ``plan.notes``:
method (EAGLE-3 head -> same-tokenizer draft model -> n-gram, the first that fits), draft,
``num_speculative_tokens`` (device starting point), memory fraction, ``max_model_len``,
``max_num_seqs``, image (pinned, from the catalog). A pinned value that does not work is an error.

`make_plan` reads as the steps: device, release (`specdec.plan.image`), target model, method
candidates (`specdec.plan.method`) the release can run, memory fit, k and its tuning, Dynamo part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdec.catalog import GIB, Catalog, Device, Image, Model, load_catalog
from specdec.config.hygiene import check_image
from specdec.config.settings import HostSettings
from specdec.engines.base import Engine
from specdec.engines.registry import engine, engine_of
from specdec.engines.version import Version
from specdec.errors import ConfigError, PlanError
from specdec.host.identify import Identity
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.image import engine_details, engine_version, image_for_host, runnable
from specdec.plan.memory import fit, fit_problem, max_model_len_for
from specdec.plan.method import MethodCandidate, candidates, one_layer, spec_tokens
from specdec.plan.sites import mirror_image, mirror_sockets
from specdec.plan.sockets import DEFAULT_LISTEN, operator_sockets, plan_sockets
from specdec.plan.suggest import instead, unknown_model
from specdec.plan.types import ANY_NETWORK, K_MAX, DynamoPlan, FitReport, Group, Plan

__all__ = ["DEFAULT_PORT", "baseline", "check_image", "gated_repos", "make_plan", "missing_token",
           "plan_host_settings"]

DEFAULT_PORT = 8000
# A default context that does not fit is shortened, but not below this.
MIN_AUTO_MODEL_LEN = 1024


def _custom_model(s: HostSettings, cat: Catalog, device: Device) -> Model:
    assert s.model is not None
    base = cat.models.get(s.model)
    if base is None:
        if s.model_params_b is None:
            raise ConfigError(f"specdec_model={s.model!r}: not in the catalog; "
                              f"{unknown_model(cat, device, s.model)}", host=s.host)
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
    device = cat.device(device_id)
    if device.host_memory and identity is not None:  # a generic host: its own MemTotal
        device = dataclasses.replace(device, memtotal_gib=identity.memory_gib)
    return device


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


@dataclass(frozen=True)
class _Release:
    """What the host runs: engine, runtime, image (docker) and engine release."""

    engine: Engine
    runtime: str
    image: str | None
    version: Version


@dataclass(frozen=True)
class _Choice:
    """The candidate that fits, with its memory fraction and fit at ``max_model_len``."""

    cand: MethodCandidate
    util: float
    report: FitReport
    max_model_len: int


@dataclass(frozen=True)
class _Tuning:
    """num_speculative_tokens, whether the host tunes it, and what the tune measures."""

    k: int
    k_auto: bool
    methods: tuple[tuple[str, str | None], ...]


def make_plan(
    host: str,
    data: Any,
    identity: Identity | None = None,
    catalog: Catalog | None = None,
    installed: Mapping[str, str] | None = None,
    group: Group | None = None,
) -> Plan:
    """Plan one host from its host data (dict, Mapping or pyinfra ``host.data``): parse it
    (`specdec.plan.hostdata.parse_host_settings`), then `plan_host_settings`."""
    identity, cat = _coerce_args(identity, catalog)
    return plan_host_settings(parse_host_settings(host, data), identity, cat, installed, group)


def plan_host_settings(
    s: HostSettings,
    identity: Identity | None = None,
    catalog: Catalog | None = None,
    installed: Mapping[str, str] | None = None,
    group: Group | None = None,
) -> Plan:
    """Plan one host from its parsed settings. ``installed``: engine -> version found on the
    host (native runtime), when known; ``group``: its serving group (`specdec.plan.groups.groups_of`
    over the inventory)."""
    cat = catalog or load_catalog()
    host = s.host
    if s.model is None:
        raise ConfigError("specdec_model is not set", host=host)
    device = _resolve_device(s, identity, cat)
    notes = _identity_notes(identity)
    rel = _release(s, cat, device, identity, installed, notes)
    model = _target_model(s, cat, device)
    cands, cand_notes = candidates(s, cat, device, model)
    notes += cand_notes
    cands = runnable(s, rel.engine, rel.version, model, cands, notes, device.platform)
    choice = _memory_fit(s, cat, device, model, cands, notes)
    tuning = _tuning(s, device, choice.cand, cands, rel.engine, notes)
    port = s.port or DEFAULT_PORT
    dyn = _group_part(s, group, rel, port, choice.cand.method, tuning.k, notes)
    return _assemble(s, device, model, rel, choice, tuning, port, dyn, notes)


def _identity_notes(identity: Identity | None) -> list[str]:
    if identity is None:
        return []
    return [f"identified as {identity.device} ({identity.model_string}"
            + (f", L4T {identity.l4t}" if identity.l4t else "") + ")"]


def _release(s: HostSettings, cat: Catalog, device: Device, identity: Identity | None,
             installed: Mapping[str, str] | None, notes: list[str]) -> _Release:
    """Engine and runtime (both supported on the device), image and engine release."""
    name, runtime = _engine_and_runtime(s, device)
    eng = engine(name)
    image, img = _image(s, cat, device, name, runtime, identity, notes)
    native = device.native_releases.get(name)
    version, origin = engine_version(s, eng, runtime, image, img, installed,
                                     Version.parse(native) if native else None)
    notes.append(f"{name} {version} ({origin})")
    notes += eng.release_notes(s, version, origin)
    return _Release(eng, runtime, image, version)


def _engine_and_runtime(s: HostSettings, device: Device) -> tuple[str, str]:
    engine = s.engine or "vllm"
    if engine not in device.engines:
        raise PlanError(
            f"specdec_engine={engine!r}: not supported on {device.id} (platform "
            f"{device.platform}; supported: {', '.join(device.engines)})",
            host=s.host,
        )
    runtime = s.runtime or ("docker" if "docker" in device.runtimes else device.runtimes[0])
    if runtime not in device.runtimes:
        raise PlanError(
            f"specdec_runtime={runtime!r}: not supported on {device.id} "
            f"(supported: {', '.join(device.runtimes)})",
            host=s.host,
        )
    return engine, runtime


def _image(s: HostSettings, cat: Catalog, device: Device, engine: str, runtime: str,
           identity: Identity | None, notes: list[str]) -> tuple[str | None, Image | None]:
    """Docker: the image to run and its catalog entry. Native: no image; the catalog's default
    for the device stands for the release an offline plan assumes."""
    if runtime == "docker":
        ref, img = image_for_host(s, cat, device, engine, identity)
        # a site with a registry mirror: pulled through it, by digest (specdec.plan.sites)
        return (mirror_image(s, ref, notes) if s.registry_mirror else ref), img
    if s.image is not None:
        notes.append("specdec_image ignored: runtime is native")
    return None, cat.default_image(device, engine, identity.l4t if identity and identity.l4t
                                   else ("36.4" if device.platform == "l4t" else None))


def _target_model(s: HostSettings, cat: Catalog, device: Device) -> Model:
    """The target model, checked against the device (quantization) and a pinned context."""
    model = _custom_model(s, cat, device)
    quant = cat.quantizations.get(model.quantization)
    if quant is not None and not device.runs(quant):
        runs = (f"{device.id} runs {', '.join(device.quantizations)}" if device.quantizations
                else f"runs on: {', '.join(quant.platforms)}")
        raise PlanError(
            f"specdec_model={model.id!r}: {model.quantization} weights do not run on "
            f"{device.id} ({runs}; {quant.note})",
            host=s.host,
        )
    if s.max_model_len is not None and s.max_model_len > model.max_context:
        raise ConfigError(
            f"specdec_max_model_len={s.max_model_len}: exceeds {model.id}'s context "
            f"({model.max_context})",
            host=s.host,
        )
    return model


def _pinned_choice(s: HostSettings) -> bool:
    return s.method is not None or s.draft is not None


def _memory_fit(s: HostSettings, cat: Catalog, device: Device, model: Model,
                cands: list[MethodCandidate], notes: list[str]) -> _Choice:
    """The first candidate that fits in memory (noted unless the method or draft is pinned);
    none does: the last one's problem, and what would fit."""
    try:
        choice = _first_fit(s, device, model, cands, notes)
    except PlanError as exc:
        length = s.max_model_len or min(device.max_model_len, model.max_context)
        drafted = any(c.draft_weight_gib for c in cands)
        raise PlanError(str(exc).removeprefix(f"{s.host}: ")
                        + instead(cat, device, model, length, drafted), host=s.host) from None
    if not _pinned_choice(s):
        notes.append(f"method {choice.cand.method}: {choice.cand.why}, fits")
    return choice


def _first_fit(s: HostSettings, device: Device, model: Model, cands: list[MethodCandidate],
               notes: list[str]) -> _Choice:
    """At the pinned or default context; failing that (default only) at a shorter one. None
    fits: the last candidate's problem is the error."""
    length = s.max_model_len or min(device.max_model_len, model.max_context)
    last_problem = ""
    misfits: list[tuple[MethodCandidate, FitReport]] = []
    for cand in cands:
        util, report = _budget(s, device, model, cand, length)
        problem = fit_problem(report, util, length)
        if problem is None:
            return _Choice(cand, util, report, length)
        misfits.append((cand, report))
        last_problem = f"{_fit_keys(s, cand.method, cand.draft, util, length)}: {problem}"
        notes.append(f"{cand.method}{' ' + cand.draft if cand.draft else ''} does not fit: "
                     f"{problem}")
    if s.max_model_len is None:
        choice = _shorter_fit(s, device, model, misfits, length, notes)
        if choice is not None:
            return choice
    raise PlanError(last_problem, host=s.host)


def _shorter_fit(s: HostSettings, device: Device, model: Model,
                 misfits: list[tuple[MethodCandidate, FitReport]], length: int,
                 notes: list[str]) -> _Choice | None:
    """Nothing fits at the device's default context: the longest context that does (as vLLM's
    "estimated maximum model length"), in the same order of preference."""
    for cand, report in misfits:
        shorter = max_model_len_for(report, length) // 256 * 256
        if shorter < MIN_AUTO_MODEL_LEN:
            continue
        util, report = _budget(s, device, model, cand, shorter)
        if fit_problem(report, util, shorter) is None:
            notes.append(f"max_model_len {length} does not fit; {shorter} does "
                         f"(set specdec_max_model_len to choose)")
            return _Choice(cand, util, report, shorter)
    return None


def _budget(s: HostSettings, device: Device, model: Model, cand: MethodCandidate,
            length: int) -> tuple[float, FitReport]:
    """The memory fraction (pinned, else the device's for speculation or baseline) and fit."""
    util = s.gpu_memory_utilization or (
        device.mem_util_speculative if cand.method != "none" else device.mem_util_baseline
    )
    return util, fit(device, model.weight_gib, model.kv_bytes_per_token,
                     cand.draft_weight_gib, cand.draft_kv_bytes_per_token, util, length,
                     s.max_num_seqs or device.max_num_seqs)


def _tuning(s: HostSettings, device: Device, cand: MethodCandidate,
            cands: list[MethodCandidate], eng: Engine, notes: list[str]) -> _Tuning:
    """k: pinned, or the device's starting point that the host tunes (k auto)."""
    k = spec_tokens(s, device, cand.method)
    # k auto is tuned on the host's own API (a serving group is measured through its frontend)
    k_auto = s.num_speculative_tokens is None and cand.method != "none" and eng.tunes_on_host
    if not k_auto:
        return _Tuning(k, False, ())
    methods: tuple[tuple[str, str | None], ...] = ((cand.method, cand.draft),)
    # n-gram needs no weights nor memory: the tune measures it too, unless pinned
    if not _pinned_choice(s) and cand.method != "ngram" and any(
            c.method == "ngram" for c in cands):
        methods += (("ngram", None),)
    notes.append(f"num_speculative_tokens auto: tuned on the host from k={k} over 1.."
                 f"{K_MAX}" + (" (and against n-gram)" if len(methods) > 1 else ""))
    return _Tuning(k, True, methods)


def _group_part(s: HostSettings, group: Group | None, rel: _Release, port: int,
                method: str, k: int, notes: list[str]) -> DynamoPlan | None:
    """The host's part in its serving group (None unless its engine serves groups); without
    ``group`` the host is a group of its own, unless it names one."""
    if not rel.engine.serves_groups:
        return None
    if group is None:
        if s.group is not None:
            raise ConfigError(f"specdec_group={s.group!r}: planning a member of a serving group "
                              "needs the whole inventory (specdec plan INVENTORY, or the deploy)",
                              host=s.host)
        group = groups_of([s])[s.host]
    if s.host not in group.members:
        raise PlanError(f"not a member of group {group.name!r}", host=s.host)
    return rel.engine.group_part(s, group, rel.version, port, method, k, notes)


def _assemble(s: HostSettings, device: Device, model: Model, rel: _Release, choice: _Choice,
              tuning: _Tuning, port: int, dyn: DynamoPlan | None, notes: list[str]) -> Plan:
    cand = choice.cand
    decoding, draft_dir, tiktoken = engine_details(rel.engine, rel.version, model, cand.method,
                                                   cand.draft)
    plan = Plan(
        host=s.host,
        device=device.id,
        engine=rel.engine.name,
        runtime=rel.runtime,
        image=rel.image,
        engine_version=str(rel.version),
        model=model.id,
        served_model_name=model.id,
        method=cand.method,
        draft=cand.draft,
        num_speculative_tokens=tuning.k,
        gpu_memory_utilization=choice.util,
        max_model_len=choice.max_model_len,
        max_num_seqs=s.max_num_seqs or device.max_num_seqs,
        port=port,
        memlock=s.memlock,
        jetson_tuning=s.jetson_tuning and device.is_jetson,
        health_timeout_s=s.health_timeout,
        gate=s.gate,
        fit=choice.report,
        extra_args=s.extra_args,
        env=s.env,
        notes=tuple(notes),
        service_user=s.service_user,
        pinned=tuple(sorted(s.keys)),
        decoding_type=decoding,
        draft_dir=draft_dir,
        tiktoken_dir=tiktoken,
        dynamo=dyn,
        k_auto=tuning.k_auto,
        tune_methods=tuning.methods,
        listen=s.listen or DEFAULT_LISTEN,
        allow_from=s.allow_from or ANY_NETWORK,
        engine_port=s.engine_port or (port + 1 if port < 65535 else port - 1),
        tls=s.tls,
        trust_remote_code=s.trust_remote_code,
        ssh_port=s.ssh_port,
    )
    extra = [*mirror_sockets(s), *operator_sockets(s.firewall_allow)]
    return dataclasses.replace(plan, sockets=plan_sockets(plan, rel.engine, extra))


def baseline(plan: Plan, catalog: Catalog | None = None) -> Plan:
    """The same host with speculation off (memory fraction back to the device baseline)."""
    cat = catalog or load_catalog()
    device = cat.device(plan.device)
    if "specdec_gpu_memory_utilization" in plan.pinned:
        util = plan.gpu_memory_utilization
    else:
        util = device.mem_util_baseline
    if device.host_memory:  # the host's own MemTotal, as planned
        device = dataclasses.replace(device, memtotal_gib=plan.fit.device_gib)
    report = fit(device, plan.fit.target_gib / device.dtype_scale,
                 _target_kv(cat, plan, device.dtype_scale), 0.0, 0, util, plan.max_model_len,
                 plan.max_num_seqs)
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
    decoding, draft_dir = engine_of(plan).speculation_details(
        Version.parse(plan.engine_version), method, draft)
    return dataclasses.replace(plan, method=method, draft=draft, num_speculative_tokens=k,
                               k_by_batch=k_by_batch, decoding_type=decoding,
                               draft_dir=draft_dir)


def _target_kv(cat: Catalog, plan: Plan, scale: float = 1.0) -> int:
    """Recover the target's KV bytes/token (at 16 bits: the catalog's) from the plan's fit
    report (needed = len * (t + d) * the device's dtype scale)."""
    draft_kv = 0
    if plan.draft in cat.models:
        draft_kv = cat.models[plan.draft].kv_bytes_per_token
    elif plan.draft in cat.heads and plan.model in cat.models:
        draft_kv = one_layer(cat.models[plan.model])
    if plan.model in cat.models and "specdec_model_kv_bytes_per_token" not in plan.pinned:
        return cat.models[plan.model].kv_bytes_per_token
    total = plan.fit.kv_needed_gib * GIB / max(1, plan.max_model_len) / scale
    return max(1, int(round(total)) - draft_kv)


def gated_repos(plan: Plan, catalog: Catalog | None = None) -> list[str]:
    """The repos this plan downloads that the catalog records as gated (they need a token)."""
    cat = catalog or load_catalog()
    return [r for r in (plan.model, plan.draft) if r and cat.is_gated(r)]


def missing_token(plan: Plan, has_token: bool, catalog: Catalog | None = None) -> str | None:
    """Why ``plan`` cannot be deployed without an HF token (one line), or None."""
    gated = [] if has_token else gated_repos(plan, catalog)
    if not gated:
        return None
    return (f"{plan.host}: {', '.join(gated)} is gated on Hugging Face but no token is given: "
            "set specdec_hf_token_file (a file on the control node) or $HF_TOKEN, or run "
            "`hf auth login` on this machine")
