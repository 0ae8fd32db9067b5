"""What would fit, when what a host asks for does not: a shorter context, a quantized form of
the model, the model without its draft, a smaller model of the same family; and, for a model id
the catalog does not know, the closest id and the models that fit the device. Pure: each
suggestion is planned with the same memory budget as the plan (`specdec.plan.memory`)."""

from __future__ import annotations

from specdec.catalog import Catalog, Device, Model
from specdec.config.keys import closest
from specdec.plan.memory import fit, fit_problem, max_model_len_for

__all__ = ["fitting_models", "instead", "unknown_model"]

MAX_SUGGESTIONS = 3
MIN_CONTEXT = 1024  # a suggestion below this context is no help


def _runs_on(cat: Catalog, model: Model, device: Device) -> bool:
    quant = cat.quantizations.get(model.quantization)
    return quant is None or device.platform in quant.platforms


def _context(model: Model, device: Device) -> int:
    return min(device.max_model_len, model.max_context)


def _fits(device: Device, model: Model, length: int, draft_gib: float = 0.0,
          draft_kv: int = 0) -> bool:
    util = device.mem_util_speculative if draft_gib else device.mem_util_baseline
    report = fit(device, model.weight_gib, model.kv_bytes_per_token, draft_gib, draft_kv, util,
                 length)
    return fit_problem(report, util, length) is None


def fitting_models(cat: Catalog, device: Device, limit: int = 5) -> list[str]:
    """The largest catalog models that run on ``device`` at their default context."""
    ok = [m for m in cat.models.values()
          if _runs_on(cat, m, device) and _fits(device, m, _context(m, device))]
    return [m.id for m in sorted(ok, key=lambda m: (-m.weight_gib, m.id))[:limit]]


def unknown_model(cat: Catalog, device: Device, model_id: str) -> str:
    """The hint for a model id outside the catalog: the closest id, and what fits."""
    near = closest(model_id, cat.models)
    hint = f"did you mean {near}? " if near else ""
    fits = fitting_models(cat, device)
    return (f"{hint}(models that fit {device.id}: {', '.join(fits) or 'none'}; a model outside "
            "the catalog needs specdec_model_params_b)")


def instead(cat: Catalog, device: Device, model: Model, length: int, drafted: bool) -> str:
    """``"; would fit: …"`` for a model (with a draft or head when ``drafted``) that does not
    fit at ``length``."""
    found: list[str] = []
    if drafted and _fits(device, model, length):
        found.append("no draft (specdec_method: ngram or none)")
    report = fit(device, model.weight_gib, model.kv_bytes_per_token, 0.0, 0,
                 device.mem_util_baseline, length)
    shorter = max_model_len_for(report, length) // 256 * 256
    if MIN_CONTEXT <= shorter < length and _fits(device, model, shorter):
        found.append(f"specdec_max_model_len: {shorter}")
    family = [m for m in cat.models.values()
              if m.id != model.id and _runs_on(cat, m, device)
              and (m.base_model in (model.id, model.base_model) and m.base_model is not None
                   or m.tokenizer == model.tokenizer and m.weight_gib < model.weight_gib)]
    for m in sorted(family, key=lambda m: (m.base_model is None, -m.weight_gib)):
        if len(found) >= MAX_SUGGESTIONS:
            break
        if _fits(device, m, min(length, m.max_context)):
            found.append(f"specdec_model: {m.id}")
    return "; would fit: " + ", or ".join(found) if found else ""
