"""``--speculative-config`` as one vLLM release's SpeculativeConfig validates it.

Every decision and every refusal text comes from the release (`vllm_release.VllmRelease`:
its fields, ``extra``, method Literal and its verdict on each probe, with the emulator's values
put in place of the probe's). The order follows pydantic: field validation (unknown keys,
types, Literal, Field bounds) first, then ``__post_init__``. What the emulator adds itself is
marked: the method guess, the draft checks against the emulator's model profiles and the
per-batch-size schedule (checked by the engine when its scheduler starts, 0.24.0
vllm/v1/spec_decode/dynamic/utils.py:7-74).
"""

from __future__ import annotations

from typing import Any

from specdec.engines.version import Version
from specdec_lab.emulator.profiles import ModelSpec, resolve_model_ref
from specdec_lab.emulator.runtime import StartupError
from specdec_lab.emulator.vllm_release import VllmRelease, gap

__all__ = ["parse_spec_config", "unknown_model"]

LOOKUP = ("ngram", "ngram_gpu", "suffix")


def _fail(msg: str) -> StartupError:
    return StartupError(msg, stage="config")


def _refuse(rel: VllmRelease, pid: str, subs: tuple[tuple[str, str], ...] = ()) -> None:
    text = rel.refusal(pid, subs)
    if text is not None:
        raise _fail(text)


def _pyd(value: Any, probe: int = 1) -> tuple[tuple[str, str], ...]:
    """pydantic's ``input_value=…, input_type=…`` of the probe's int -> of ``value``."""
    return ((f"input_value={probe},", f"input_value={value!r},"),
            ("input_type=int]", f"input_type={type(value).__name__}]"))


def unknown_model(ref: str) -> StartupError:
    return _fail(
        f"OSError: {ref} is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a "
        "token having permission to this repo either by logging in with `hf auth login` or by "
        "passing `token=<your_token>`"
    )


def _guess_method(model: str | None, v: Version) -> str:
    """SpeculativeConfig.__post_init__'s guess when ``method`` is omitted (the emulator's
    reading; probe guess-eagle3-name holds it to the release)."""
    name = (model or "").lower()
    if model is None or name in ("ngram", "[ngram]"):
        return "ngram"
    if "eagle-" in name:
        return "eagle"
    if "eagle3" in name:
        # 0.9.2-0.10.1 match "eagle3-" as EAGLE-1 (vllm/config.py:2685-2689 in 0.9.2)
        return "eagle" if v < Version.parse("0.10.2") else "eagle3"
    return "draft_model"


def _fields(raw: Any, rel: VllmRelease) -> dict[str, Any]:
    """pydantic's field validation: unknown keys, the model's type, the Literal."""
    if not isinstance(raw, dict):
        _refuse(rel, "not-dict", (("'list'", f"'{type(raw).__name__}'"),))
        raise _fail(gap(rel.version, f"--speculative-config {raw!r}", "not-dict"))
    unknown = [k for k in raw if k not in rel.spec_keys]
    if unknown and rel.rejects_unknown:
        key = unknown[0]
        _refuse(rel, "unknown-key", (("\nno_such_key\n", f"\n{key}\n"), *_pyd(raw[key], 17)))
    cfg = {k: v for k, v in raw.items() if k in rel.spec_keys}  # the rest: ignored
    model = cfg.get("model")
    if model is not None and not isinstance(model, str):
        _refuse(rel, "model-int", _pyd(model))
    method = cfg.get("method")
    if method is not None and method not in rel.literal:
        _refuse(rel, "bad-method", (("input_value='no_such_method'", f"input_value={method!r}"),))
    return cfg


def _k(cfg: dict[str, Any], rel: VllmRelease) -> int | None:
    k = cfg.get("num_speculative_tokens")
    if isinstance(k, str) and k.strip().lstrip("-").isdigit() and rel.field_error("k-str"):
        k = int(k)  # pydantic's lax mode parses "3"
    if isinstance(k, float) and k.is_integer() and rel.field_error("k-float"):
        k = int(k)
    if k is None or (isinstance(k, int) and not isinstance(k, bool)):
        if k is not None and k <= 0 and rel.field_error("k-neg"):
            _refuse(rel, "k-neg", (("input_value=-3,", f"input_value={k},"),))
        return k
    pid = "k-float" if isinstance(k, float) else "k-str"
    _refuse(rel, pid, (("input_value=1.5,", f"input_value={k!r},"),
                       ("input_value='x'", f"input_value={k!r}")))
    raise _fail(gap(rel.version, f"num_speculative_tokens={k!r}", pid))


def _lookup_bounds(cfg: dict[str, Any], rel: VllmRelease, *, field: bool) -> None:
    """prompt_lookup_min/max >= 1: a Field bound from 0.14.0 (``field``), a ValueError in
    ``__post_init__`` before."""
    for key, pid in (("prompt_lookup_min", "plmin-0"), ("prompt_lookup_max", "plmax-0")):
        v = cfg.get(key)
        if isinstance(v, int) and v < 1 and rel.field_error(pid) == field:
            _refuse(rel, pid, ((f"{key}=0", f"{key}={v}"), ("input_value=0,", f"input_value={v},")))


def _prompt_lookup(cfg: dict[str, Any], rel: VllmRelease) -> tuple[int, int]:
    lo, hi = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    if lo is None and hi is None:
        lo = hi = 5
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    if not isinstance(lo, int) or not isinstance(hi, int):
        raise _fail(gap(rel.version, f"prompt_lookup_min={lo!r}, prompt_lookup_max={hi!r}",
                        "plmin-gt"))
    _lookup_bounds({"prompt_lookup_min": lo, "prompt_lookup_max": hi}, rel, field=False)
    if lo > hi:
        _refuse(rel, "plmin-gt", (("prompt_lookup_min=5", f"prompt_lookup_min={lo}"),
                                  ("prompt_lookup_max=2", f"prompt_lookup_max={hi}")))
    return lo, hi


def _method(cfg: dict[str, Any], model: str | None, k: int | None, rel: VllmRelease,
            warnings: list[str]) -> str:
    """The method, the model-less checks, the release's refusal of the method."""
    given = cfg.get("method")
    method = given if given is not None else _guess_method(model, rel.version)
    if method.endswith("_mtp") and "mtp" in rel.literal:
        warnings.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    if model is None and method != "mtp":
        if k is None:
            _refuse(rel, "no-k")
        elif method not in LOOKUP:
            _refuse(rel, "draft-no-model")
    try:
        refusal = rel.method_refusal(method)
    except KeyError:
        raise _fail(gap(rel.version, f"speculative method {method!r}", f"method/{method}")
                    ) from None
    if refusal is not None:
        raise _fail(refusal)
    if method == "mtp":  # every emulated target lacks MTP layers; the release refused it
        raise _fail(gap(rel.version, "mtp", "method/mtp"))
    pid = f"method/{method}" if given is not None else "guess-eagle3-name"
    warnings += rel.v0_fallback(pid)
    return method


def parse_spec_config(
    raw: Any, target: ModelSpec, *, tp: int, max_model_len: int, rel: VllmRelease
) -> tuple[str, int, ModelSpec | None, dict[str, Any], list[str]]:
    """Validate ``--speculative-config`` like release ``rel``. Returns (method, k, draft spec,
    extras, warnings); raises `StartupError` with that release's text."""
    warnings: list[str] = []
    cfg = _fields(raw, rel)
    k = _k(cfg, rel)
    _lookup_bounds(cfg, rel, field=True)
    if "tensor_parallel_size" in cfg:  # a field from 0.15.0, only to refuse it by name
        _refuse(rel, "tp-key")
    model = cfg.get("model")
    method = _method(cfg, model, k, rel, warnings)
    if model is not None and k is None:
        _refuse(rel, "draft-no-k")
    if k is None:
        raise _fail(gap(rel.version, "a speculative config without num_speculative_tokens",
                        "draft-no-k"))
    if k <= 0:
        _refuse(rel, "k-neg", (("(-3)", f"({k})"), ("input_value=-3,", f"input_value={k},")))
    extras: dict[str, Any] = {}
    if method in ("ngram", "ngram_gpu"):
        extras["prompt_lookup"] = _prompt_lookup(cfg, rel)
    dtp = cfg.get("draft_tensor_parallel_size")
    if method not in LOOKUP and dtp is not None and dtp not in (1, tp):
        _refuse(rel, "dtp", (("size=2 ", f"size={dtp} "),))
    draft: ModelSpec | None = None
    runner = None
    if method not in LOOKUP:  # the draft's config is read before the EAGLE-3 gate (0.9.2)
        assert model is not None
        draft = _draft_spec(model, method, target, cfg, max_model_len, rel)
    if method == "eagle3":
        config, runner = _eagle3(rel, target)
        if config is not None:
            raise _fail(config)
    if runner is not None:  # the model runner, once the weights are loaded
        raise StartupError(runner, stage="load", progress=0.3)
    kb = cfg.get("num_speculative_tokens_per_batch_size")
    if kb is not None:
        extras["k_by_batch"] = _per_batch_size(kb)
    extras["enforce_eager"] = cfg.get("enforce_eager")
    return method, int(k), draft, extras, warnings


def _eagle3(rel: VllmRelease, target: ModelSpec) -> tuple[str | None, str | None]:
    try:
        return rel.eagle3(target.architecture, target.model_type)
    except KeyError:
        raise _fail(gap(rel.version, f"EAGLE-3 on a {target.architecture} target",
                        f"eagle3-arch/{target.architecture}")) from None


def _draft_spec(model: str, method: str, target: ModelSpec, cfg: dict[str, Any],
                max_model_len: int, rel: VllmRelease) -> ModelSpec:
    draft = resolve_model_ref(model)
    if draft is None:
        raise unknown_model(model)
    # the emulator's own pairing checks (its profiles know what each checkpoint is)
    if method in ("eagle", "eagle3", "dflash") and draft.kind != "head":
        raise _fail(f"ValueError: {model} is not an EAGLE draft model: its architecture "
                    f"{draft.architecture} has no EAGLE layers (method='{method}').")
    if method == "draft_model" and draft.kind == "head":
        raise _fail(f"ValueError: {model} is an EAGLE head, not a standalone draft model; "
                    "use method 'eagle3'.")
    if method in ("medusa", "mlp_speculator") and draft.kind != "head":
        raise _fail(f"ValueError: {model} is not a {method} speculator.")
    if draft.kind == "head" and draft.head_format == "speculators":
        _refuse(rel, "head-speculators", (("RedHatAI/Qwen3-8B-speculator.eagle3", model),))
    if draft.vocab_size != target.vocab_size:
        _refuse(rel, "draft-vocab", (("=128256", f"={target.vocab_size}"),
                                     ("=151936", f"={draft.vocab_size}")))
        raise _fail(gap(rel.version, "a draft whose vocabulary differs from the target's",
                        "draft-vocab"))
    smax = cfg.get("max_model_len")
    if smax is not None:
        if smax > draft.max_context:
            _refuse(rel, "draft-maxlen", (("999999", str(smax)),
                                          ("=40960", f"={draft.max_context}")))
        if smax > max_model_len:
            _refuse(rel, "draft-maxlen-target", (("=8192", f"={smax}"),
                                                 ("=4096", f"={max_model_len}")))
    return draft


def _per_batch_size(kb: Any) -> tuple[tuple[int, int, int], ...]:
    """0.24.0 vllm/v1/spec_decode/dynamic/utils.py:7-74 (checked when the scheduler starts)."""
    pre = "num_speculative_tokens_per_batch_size"
    if not isinstance(kb, list) or not kb:
        raise _fail(f"ValueError: {pre} must be a non-empty list of (range_start, range_end, "
                    "num_speculative_tokens) entries.")
    rows = []
    for r in kb:
        if not isinstance(r, list | tuple) or len(r) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in r):
            raise _fail(f"ValueError: Each {pre} entry must be a 3-item sequence")
        a, b, k = r
        if a < 1 or b < 1:
            raise _fail(f"ValueError: Batch-size range ({a}, {b}) must be positive.")
        if a > b:
            raise _fail(f"ValueError: Batch-size range start must be <= end for ({a}, {b})")
        if k < 0:
            raise _fail(f"ValueError: {pre} values must be >= 0.")
        rows.append((a, b, k))
    rows.sort()
    for (_, b1, _), (a2, _, _) in zip(rows, rows[1:], strict=False):
        if a2 <= b1:
            raise _fail("ValueError: Batch-size ranges must be non-overlapping and sorted.")
    if rows[0][0] != 1:
        raise _fail("ValueError: The first batch-size range must start at 1 so every runtime "
                    "batch size has a defined schedule.")
    return tuple(rows)
