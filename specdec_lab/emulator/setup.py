"""One engine configuration, engine-agnostic: what the timing, memory and core models need."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from specdec.catalog import load_catalog
from specdec.errors import ConfigError
from specdec_lab.emulator.acceptance import VARIANTS
from specdec_lab.emulator.core import EngineModel, SpecConfig
from specdec_lab.emulator.memory import MemoryInputs
from specdec_lab.emulator.profiles import DeviceProfile, ModelSpec, device_profile, model_spec
from specdec_lab.emulator.timing import TimingModel

__all__ = [
    "HEAD_METHODS",
    "LOOKUP_METHODS",
    "PARALLEL_HEAD_METHODS",
    "EngineSetup",
    "mtp_head",
    "setup_for",
    "spec_kind",
]

HEAD_METHODS = ("eagle", "eagle3", "dflash")
PARALLEL_HEAD_METHODS = ("medusa", "mlp_speculator")
LOOKUP_METHODS = ("ngram", "ngram_gpu", "suffix")
FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
VARIANT_ENV = "SPECDEC_EMU_ACCEPTANCE"


def variant_from_env() -> str:
    """``$SPECDEC_EMU_ACCEPTANCE``: the emulator's speculation world (default ``chain``)."""
    raw = os.environ.get(VARIANT_ENV, "").strip() or "chain"
    if raw not in VARIANTS:
        raise ConfigError(f"{VARIANT_ENV}={raw!r} is not one of {', '.join(VARIANTS)}")
    return raw


def spec_kind(method: str) -> str:
    if method in ("none", ""):
        return "none"
    if method in HEAD_METHODS or method == "mtp":
        return "head"
    if method in PARALLEL_HEAD_METHODS:
        return "parallel_head"
    if method in LOOKUP_METHODS:
        return "lookup"
    return "draft"


def mtp_head(target: ModelSpec) -> ModelSpec:
    """An MTP module: one decoder layer of the target plus the shared LM head."""
    layer = target.weight_bytes / max(target.layers, 1)
    lm_head = target.vocab_size * target.hidden_size * 2
    params = target.params / max(target.layers, 1) + target.vocab_size * target.hidden_size
    return ModelSpec(
        id=f"{target.id}:mtp", kind="head", params=params, active_params=params,
        weight_bytes=layer + lm_head, decode_bytes=layer + lm_head, layers=1,
        kv_bytes_per_token=0, max_context=target.max_context, tokenizer=target.tokenizer,
        head_method="mtp", head_target=target.id,
    )


@dataclass(frozen=True)
class EngineSetup:
    device: DeviceProfile
    target: ModelSpec
    method: str = "none"
    k: int = 0
    draft: ModelSpec | None = None
    max_num_seqs: int = 256
    max_model_len: int = 0  # 0: the model's max context
    max_num_batched_tokens: int = 0  # 0: vLLM's default for the device
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"
    weight_scale: float = 1.0
    prefix_caching: bool = True
    seed: int = 0
    overlap_scheduler: bool = False
    k_by_batch: tuple[tuple[int, int, int], ...] = ()
    max_concurrency: int | None = None
    variant: str = field(default_factory=variant_from_env)  # acceptance + drafting-cost world
    prompt_spread: float = 0.0  # per-prompt acceptance spread (`acceptance.prompt_offset`)

    @property
    def speculative(self) -> bool:
        return self.method != "none" and self.k > 0

    @property
    def model_len(self) -> int:
        return self.max_model_len or self.target.max_context

    @property
    def batched_tokens(self) -> int:
        if self.max_num_batched_tokens:
            return self.max_num_batched_tokens
        return 8192 if self.device.memory_gib >= 70 else 2048

    @property
    def drafter(self) -> ModelSpec | None:
        if not self.speculative:
            return None
        if self.method == "mtp":
            return self.draft or mtp_head(self.target)
        return self.draft

    @property
    def matched(self) -> bool:
        d = self.drafter
        if d is None or d.kind != "head" or d.head_target is None:
            return True
        return d.head_target in (self.target.id, self.target.base_model)

    def _kv_scale(self) -> float:
        return 0.5 if self.kv_cache_dtype in FP8_KV else 1.0

    @property
    def target_kv_bytes_per_token(self) -> int:
        return int(self.target.kv_bytes_per_token * self._kv_scale())

    @property
    def draft_kv_bytes_per_token(self) -> int:
        d = self.drafter
        kind = spec_kind(self.method)
        if d is None or kind in ("lookup", "parallel_head"):
            return 0
        if d.kind == "head":
            return self.target_kv_bytes_per_token // max(self.target.layers, 1)
        return int(d.kv_bytes_per_token * self._kv_scale())

    @property
    def draft_weight_bytes(self) -> float:
        d = self.drafter
        if d is None or self.method == "mtp":
            return 0.0  # MTP layers ship inside the target checkpoint
        return d.weight_bytes

    def memory_inputs(self, reserved_gib: float = 0.0) -> MemoryInputs:
        return MemoryInputs(
            device=self.device, target=self.target, draft_weight_bytes=self.draft_weight_bytes,
            kv_bytes_per_token=self.target_kv_bytes_per_token + self.draft_kv_bytes_per_token,
            max_model_len=self.model_len, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.batched_tokens, enforce_eager=self.enforce_eager,
            weight_scale=self.weight_scale, reserved_gib=reserved_gib,
            spec_tokens=self.k if self.speculative else 0,
        )

    def timing(self) -> TimingModel:
        kind = spec_kind(self.method) if self.speculative else "none"
        return TimingModel(
            device=self.device, target=self.target,
            kv_bytes_per_token=self.target_kv_bytes_per_token, weight_scale=self.weight_scale,
            eager=self.enforce_eager, spec_kind=kind, draft=self.drafter,
            draft_kv_bytes_per_token=self.draft_kv_bytes_per_token,
            overlap_scheduler=self.overlap_scheduler, variant=self.variant,
        )

    def spec_config(self) -> SpecConfig:
        if not self.speculative:
            return SpecConfig()
        return SpecConfig(
            method=self.method, k=self.k, draft=self.drafter, matched=self.matched,
            k_by_batch=self.k_by_batch, max_concurrency=self.max_concurrency,
            variant=self.variant, prompt_spread=self.prompt_spread,
        )

    def engine_model(self, kv_capacity_tokens: int | None = None) -> EngineModel:
        """The core's model. Without ``kv_capacity_tokens`` the KV cache is unbounded (sims)."""
        cap = kv_capacity_tokens if kv_capacity_tokens is not None else 1 << 40
        return EngineModel(
            timing=self.timing(), spec=self.spec_config(), max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.batched_tokens, max_model_len=self.model_len,
            kv_capacity_tokens=cap, tokenizer=self.target.tokenizer, seed=self.seed,
            prefix_caching=self.prefix_caching,
        )

    def without_speculation(self) -> EngineSetup:
        return replace(self, method="none", k=0, draft=None)


def setup_for(
    device: str,
    model: str,
    method: str = "none",
    k: int = 0,
    draft: str | None = None,
    **kw: object,
) -> EngineSetup:
    """Convenience: an `EngineSetup` from catalog ids (used by tests and simulations)."""
    target = model_spec(model)
    if target is None:
        raise ConfigError(f"model={model!r} is not in the catalog")
    draft_spec = None
    if draft is not None:
        draft_spec = model_spec(draft)
        if draft_spec is None:
            raise ConfigError(f"draft={draft!r} is not in the catalog")
    elif method in HEAD_METHODS:
        cat_head = None
        m = load_catalog().models.get(model)
        if m is not None:
            cat_head = m.heads.get("eagle3")
        draft_spec = model_spec(cat_head) if cat_head else None
    return EngineSetup(device=device_profile(device), target=target, method=method, k=k,
                       draft=draft_spec, **kw)  # type: ignore[arg-type]
