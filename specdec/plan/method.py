"""Which speculative method and draft a host considers, and its starting k (part of the plan).

`candidates` lists the configurations in preference order: a pinned method / draft alone, else
EAGLE-3 head -> same-tokenizer catalog draft -> n-gram. The planner keeps the ones the engine
release can run (`specdec.plan.image.runnable`) and takes the first that fits in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.catalog import Catalog, Device, Model
from specdec.errors import ConfigError
from specdec.plan.hostdata import HostSettings

__all__ = ["HEAD_METHODS", "SELF_METHODS", "MethodCandidate", "candidates", "one_layer",
           "spec_tokens"]

# Methods whose speculator is separate weights given by `model` in --speculative-config.
HEAD_METHODS = ("eagle3", "eagle", "medusa", "mlp_speculator", "dflash")
# Methods with no separate weights.
SELF_METHODS = ("ngram", "ngram_gpu", "suffix", "mtp")

# Starting num_speculative_tokens for methods the device table does not list.
_K_ALIASES = {"eagle": "eagle3", "dflash": "eagle3", "ngram_gpu": "ngram", "suffix": "ngram"}
_DEFAULT_K = 3


@dataclass(frozen=True)
class MethodCandidate:
    """A speculative configuration and the memory its speculator adds."""

    method: str
    draft: str | None
    draft_weight_gib: float
    draft_kv_bytes_per_token: int
    why: str
    head_format: str | None = None  # an EAGLE head's checkpoint format (catalog heads)


def one_layer(model: Model) -> int:
    """KV bytes/token of one of the model's layers (what an EAGLE head adds)."""
    return max(1, model.kv_bytes_per_token // max(1, model.layers))


def candidates(
    s: HostSettings, cat: Catalog, device: Device, model: Model
) -> tuple[list[MethodCandidate], list[str]]:
    """Candidate configurations in preference order, and notes."""
    notes: list[str] = []
    method = s.method
    if method is None and s.draft is not None:
        method = cat.heads[s.draft].method if s.draft in cat.heads else "draft_model"
        notes.append(f"method {method} inferred from specdec_draft")
    if method is not None:
        return _pinned(s, cat, device, model, method, notes), notes
    return _preferred(cat, device, model, notes), notes


def _pinned(s: HostSettings, cat: Catalog, device: Device, model: Model, method: str,
            notes: list[str]) -> list[MethodCandidate]:
    """The candidates for a pinned (or inferred) method."""
    if method == "none" or method in SELF_METHODS:
        if s.draft is not None:
            raise ConfigError(
                f"specdec_draft={s.draft!r}: method {method!r} takes no draft", host=s.host
            )
        return [MethodCandidate(method, None, 0.0, 0, "specdec_method")]
    if s.draft is not None:
        return [_explicit_draft(s, cat, model, method, notes)]
    if method in HEAD_METHODS:
        heads = cat.heads_for(model, method)
        if not heads:
            raise ConfigError(
                f"specdec_method={method!r}: no known {method} head for {model.id}; "
                "set specdec_draft or choose another method",
                host=s.host,
            )
        if method == "eagle3" and not device.eagle3:
            notes.append(f"eagle3 pinned; the catalog does not advise it on {device.id}")
        return [MethodCandidate(method, h.id, h.weight_gib, one_layer(model),
                                f"catalog head ({h.format} format)", h.format) for h in heads]
    # draft_model without an explicit draft: any catalog draft (first that fits).
    drafts = _catalog_drafts(cat, model)
    if not drafts:
        raise ConfigError(
            f"specdec_method='draft_model': no catalog draft for {model.id}; set specdec_draft",
            host=s.host,
        )
    return drafts


def _preferred(cat: Catalog, device: Device, model: Model,
               notes: list[str]) -> list[MethodCandidate]:
    """Nothing pinned: EAGLE-3 head (where advised) -> catalog drafts -> n-gram."""
    out: list[MethodCandidate] = []
    heads = cat.heads_for(model, "eagle3")
    if heads and device.eagle3:
        out += [MethodCandidate("eagle3", h.id, h.weight_gib, one_layer(model),
                                f"EAGLE-3 head {h.id} ({h.format} format)", h.format)
                for h in heads]
    elif heads:
        notes.append(f"eagle3 head {heads[0].id} skipped: the catalog does not advise EAGLE-3 "
                     f"on {device.id}")
    out.extend(_catalog_drafts(cat, model))
    out.append(MethodCandidate("ngram", None, 0.0, 0, "n-gram (no extra weights)"))
    return out


def _tokenizer_of(cat: Catalog, draft: str) -> str | None:
    if draft in cat.heads:
        return cat.heads[draft].tokenizer
    if draft in cat.models:
        return cat.models[draft].tokenizer
    return None


def _explicit_draft(s: HostSettings, cat: Catalog, model: Model, method: str,
                    notes: list[str]) -> MethodCandidate:
    assert s.draft is not None
    d = s.draft
    key = f"specdec_draft={d!r}"
    if d == model.id:
        if method != "draft_model":
            raise ConfigError(f"{key}: the draft is the target model itself", host=s.host)
        # a known truth: every draft is accepted and each step costs the target twice
        notes.append(f"{key}: the target drafts for itself, a control (every token accepted, "
                     "no faster): the gate should disable it")
        return MethodCandidate(method, d, model.weight_gib, model.kv_bytes_per_token,
                               "specdec_draft (the target itself)")
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
        if not head.trained:
            notes.append(f"{key}: random weights (a lab control, never offered): it accepts "
                         "next to nothing, the gate should disable it")
        return MethodCandidate(method, d, head.weight_gib, one_layer(model), "specdec_draft",
                               head.format)
    if method != "draft_model":
        raise ConfigError(
            f"{key}: is a standalone model; use specdec_method='draft_model' (not {method!r})",
            host=s.host,
        )
    dm = cat.models[d]
    return MethodCandidate(method, d, dm.weight_gib, dm.kv_bytes_per_token, "specdec_draft")


def _catalog_drafts(cat: Catalog, model: Model) -> list[MethodCandidate]:
    out = []
    for d in model.drafts:
        dm = cat.models.get(d)
        if dm is not None and dm.tokenizer == model.tokenizer:
            out.append(
                MethodCandidate(
                    "draft_model", d, dm.weight_gib, dm.kv_bytes_per_token,
                    f"catalog draft {d} (tokenizer {dm.tokenizer})",
                )
            )
    return out


def spec_tokens(s: HostSettings, device: Device, method: str) -> int:
    """The pinned k, else the device's starting point for the method (0 for none)."""
    if method == "none":
        return 0
    if s.num_speculative_tokens is not None:
        return s.num_speculative_tokens
    table = device.speculative_tokens
    return table.get(method) or table.get(_K_ALIASES.get(method, ""), 0) or _DEFAULT_K
