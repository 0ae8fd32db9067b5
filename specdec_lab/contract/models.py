"""config.json files for the contract checks: what a release reads from the Hub for a target, a
draft model or an EAGLE-3 head, made from the catalog (no weights, no tokenizer: vLLM's
ModelConfig and SpeculativeConfig need only config.json).

A target or draft model gets its family's ``architectures`` and ``model_type``, its vocabulary,
its layers and ``max_position_embeddings`` = the catalog's context; everything else is the
defaults of the release's own transformers config class. EAGLE-3 heads come in the two formats
published on the Hub: the EAGLE reference format (``LlamaForCausalLMEagle3``, one Llama layer,
e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) and the speculators format (``speculators_model_type:
eagle3``, RedHatAI's speculator models; parsed by vllm/transformers_utils/configs/speculators/
from 0.10.1, PR #21345); which one a head is comes from the catalog (`Head.format`).
"""

from __future__ import annotations

from typing import Any

from specdec.catalog import Catalog, Head, Model

__all__ = ["CONTROL_TARGETS", "configs", "generic_head", "head_config", "target_config"]

# yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config.json as published (EAGLE reference format).
_YUHUILI = {
    "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 2048, "model_type": "llama",
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1,
    "pad_token_id": 0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
    "torch_dtype": "float16", "use_cache": True, "vocab_size": 128256, "draft_vocab_size": 32000,
}
# Targets outside the catalog, to show where a release's EAGLE-3 gate refuses:
# mistralai/Mistral-7B-Instruct-v0.3 config.json.
CONTROL_TARGETS: dict[str, dict[str, Any]] = {
    "mistralai/Mistral-7B-Instruct-v0.3": {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32768,
        "max_position_embeddings": 32768, "num_hidden_layers": 32, "torch_dtype": "bfloat16",
    },
}


def target_config(model: Model) -> dict[str, Any]:
    if not model.architecture or not model.vocab_size:
        raise ValueError(f"catalog model {model.id}: architecture or vocab_size unknown")
    return {"architectures": [model.architecture], "model_type": model.model_type,
            "vocab_size": model.vocab_size, "max_position_embeddings": model.max_context,
            "num_hidden_layers": model.layers, "torch_dtype": "bfloat16"}


def generic_head(target: dict[str, Any]) -> dict[str, Any]:
    """An EAGLE-3 head for ``target`` (a config.json) in the EAGLE reference format."""
    return {**_YUHUILI, "vocab_size": target["vocab_size"], "torch_dtype": "bfloat16"}


def _speculators_head(head: Head, target: Model) -> dict[str, Any]:
    layer = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 12288,
             "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
             "num_hidden_layers": 1, "vocab_size": target.vocab_size,
             "max_position_embeddings": target.max_context, "rms_norm_eps": 1e-06,
             "rope_theta": 1000000.0, "torch_dtype": "bfloat16"}
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "speculators_version": "0.1.0", "draft_vocab_size": 32000, "norm_before_residual": True,
        "target_hidden_size": None, "transformer_layer_config": layer,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": target.id, "architectures": [target.architecture]},
        },
    }


def head_config(head: Head, target: Model) -> dict[str, Any]:
    if head.format == "speculators":  # the catalog's record of the checkpoint's layout
        return _speculators_head(head, target)
    if head.id == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B":
        return dict(_YUHUILI)
    return generic_head(target_config(target))


def configs(cat: Catalog) -> dict[str, dict[str, Any]]:
    """config.json of every catalog model and head, and of the control targets."""
    out: dict[str, dict[str, Any]] = {}
    for m in cat.models.values():
        if m.architecture and m.vocab_size:
            out[m.id] = target_config(m)
    for h in cat.heads.values():
        if h.target in cat.models:
            out[h.id] = head_config(h, cat.models[h.target])
    out.update(CONTROL_TARGETS)
    return out
