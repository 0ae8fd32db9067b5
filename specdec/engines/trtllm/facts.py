"""What each TensorRT-LLM release accepts in trtllm-serve's ``--extra_llm_api_options`` YAML.

TensorRT-LLM on PyPI is a download stub, so these are schema facts copied from the source
(NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` of the 1.2 development line, before
v1.2.0rc6 = 9ba14263, 2025-12-18) and from NVIDIA's DGX Spark playbooks, which ran the exact NGC
tags. Two PRs opened the day rc6 was cut change what a release accepts; neither is in rc6, and the
first release verified to have them is 1.3.0rc15 (its docs use ``Eagle3DecodingConfig`` and a Hub id
in ``speculative_model``), so every release before 1.3.0rc15 is treated as without them:

* PR #10124 adds ``decoding_type: Eagle3`` (``Eagle`` stays valid and, on the PyTorch backend,
  means EAGLE-3; NVIDIA's playbook still uses ``Eagle`` on 1.3.0rc12).
* PR #10099 lets ``speculative_model`` (alias ``speculative_model_dir``) be a Hub id; before it the
  PyTorch backend needs a local directory (the playbook downloads with ``--local-dir``).

``draft_len_schedule`` (a draft length per batch size, `DRAFT_LEN_SCHEDULE`) changed meaning
between its PRs: #8194 (stage 1, 2025-10) reads keys as lower thresholds on the two-model and
n-gram drafters; #10860 (merged 2026-03-13) as upper bounds on the one-model path, 0 above the
largest key; #12262 extends that to the other algorithms. Which 1.2.x / 1.3.0rcN first shipped
each is not confirmed from a tag (TensorRT-LLM's repository is too large to read here; a
third-party schema dump labelled 1.2.1 shows the stage-1 field): the first release whose
NVIDIA API reference documents the field is 1.3.0rc27, long after #10860, and specdec renders it
from there on, for EAGLE-3 only (#10860's path); older releases get one k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec.engines.ranges import Fact, FactTable
from specdec.engines.support import Support, Target
from specdec.engines.version import Version

__all__ = [
    "DRAFT_LEN_SCHEDULE",
    "HEAD_FORMATS",
    "check",
    "check_head",
    "CUDA_GRAPH_KEYS",
    "KV_CACHE_KEYS",
    "SPEC_KEYS",
    "TIKTOKEN_FILES",
    "TOP_KEYS",
    "TrtllmFacts",
    "trtllm_facts",
]

F = Fact
PR_10124 = "1.3.0rc15"  # first release verified to carry PR #10124 and PR #10099
_ARGS = "tensorrt_llm/llmapi/llm_args.py (1.2 line, before v1.2.0rc6)"

# decoding_type spellings: DecodingBaseConfig.from_dict's table (exact, case-sensitive).
DECODING_TYPES: FactTable[dict[str, str]] = FactTable("decoding_type", (
    F({"eagle3": "Eagle", "eagle": "Eagle", "draft_model": "DraftTarget", "ngram": "NGram",
       "mtp": "MTP"},
      f"{_ARGS} DecodingBaseConfig.from_dict: MTP, Medusa, Eagle, Lookahead, NGram, "
      "DraftTarget, SaveState, UserProvided, AUTO ('Eagle' is EAGLE-3 on the PyTorch backend)",
      until=PR_10124, error="ValueError: Invalid decoding type: {decoding_type}"),
    F({"eagle3": "Eagle3", "eagle": "Eagle", "draft_model": "DraftTarget", "ngram": "NGram",
       "mtp": "MTP"},
      "PR #10124 (Eagle3DecodingConfig); TensorRT-LLM 1.3.0rc15 docs "
      "examples/llm_speculative_decoding", since=PR_10124,
      error="ValueError: Invalid decoding type: {decoding_type}"),
))
ACCEPTED_DECODING_TYPES: FactTable[tuple[str, ...]] = FactTable("accepted decoding_type", (
    F(("MTP", "Medusa", "Eagle", "Lookahead", "NGram", "DraftTarget", "SaveState",
       "UserProvided", "AUTO"), f"{_ARGS} DecodingBaseConfig.from_dict", until=PR_10124),
    F(("MTP", "Medusa", "Eagle", "Eagle3", "Lookahead", "NGram", "DraftTarget", "SaveState",
       "UserProvided", "AUTO"), "PR #10124", since=PR_10124),
))
# Whether the draft/head must be a local directory (PyTorch backend).
HEAD_LOCAL_DIR: FactTable[bool] = FactTable("speculative_model_dir local", (
    F(True, "PR #10099: 'for the PyTorch / AutoDeploy backends, the draft model for speculative "
      "decoding needs to be provided as a local path'; NVIDIA dgx-spark-playbooks "
      "nvidia/speculative-decoding/README.md downloads with --local-dir on 1.2.0rc6",
      until=PR_10124),
    F(False, "PR #10099 (Hub id accepted, downloaded by the PyTorch backend)", since=PR_10124),
))

# draft_len_schedule: "upper" = {batch-size upper bound: draft length}, 0 above the largest key;
# None = no schedule rendered (the field absent, or its meaning at the release not confirmed).
SCHEDULE_RELEASE = "1.3.0rc27"
DRAFT_LEN_SCHEDULE: FactTable[str | None] = FactTable("draft_len_schedule", (
    F(None, "not confirmed before 1.3.0rc27: PR #8194 (stage 1, lower thresholds, two-model / "
      "n-gram drafters) and PR #10860 (upper bounds) are in main, but no tag was read; a "
      "third-party schema dump labelled 1.2.1 shows the stage-1 field", until=SCHEDULE_RELEASE,
      error="TensorRT-LLM {version} has no draft_len_schedule specdec can render (first: "
      f"{SCHEDULE_RELEASE})"),
    F("upper", "nvidia.github.io/TensorRT-LLM/1.3.0rc27/llm-api/reference/"
      "Eagle3DecodingConfig.html and 1.3.0rc29 AutoDecodingConfig.html: draft_len_schedule: "
      "dict[int, int] | None; PR #10860 (merged 2026-03-13): {4: 4, 8: 2, 32: 1} = batch 1-4 "
      "draft 4, 5-8 2, 9-32 1, 33+ 0; llm_args.py validate_draft_len_schedule_and_sort "
      "(main, not at the tag): keys >= 1, lengths >= 0 and <= max_draft_len, the smallest key's "
      "length == max_draft_len; mutually exclusive with max_concurrency",
      since=SCHEDULE_RELEASE),
))
# The decoding types whose schedule #10860 (the one-model EAGLE-3 path) covers; #12262 (DFlash,
# MTP, draft target, ...) is merged into main but its first release is not confirmed.
SCHEDULE_DECODING = ("Eagle3", "Eagle")

# -- the YAML schema (every level is a StrictBaseModel: extra='forbid') ------------------------
TOP_KEYS = frozenset({
    # BaseLlmArgs
    "model", "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code",
    "tensor_parallel_size", "dtype", "revision", "tokenizer_revision", "pipeline_parallel_size",
    "context_parallel_size", "gpus_per_node", "moe_cluster_parallel_size",
    "moe_tensor_parallel_size", "moe_expert_parallel_size", "enable_attention_dp",
    "enable_lm_head_tp_in_adp", "cp_config", "load_format",
    "fail_fast_on_attention_window_too_large", "enable_lora", "lora_config", "kv_cache_config",
    "enable_chunked_prefill", "guided_decoding_backend", "batched_logits_processor",
    "iter_stats_max_iterations", "request_stats_max_iterations", "peft_cache_config",
    "scheduler_config", "cache_transceiver_config", "sparse_attention_config",
    "speculative_config", "max_batch_size", "max_input_len", "max_seq_len", "max_beam_width",
    "max_num_tokens", "gather_generation_logits", "num_postprocess_workers",
    "postprocess_tokenizer_dir", "reasoning_parser", "decoding_config", "mpi_session",
    "backend", "return_perf_metrics", "orchestrator_type",
    # TorchLlmArgs
    "build_config", "garbage_collection_gen0_threshold", "cuda_graph_config",
    "attention_dp_config", "disable_overlap_scheduler", "moe_config", "attn_backend",
    "sampler_type", "enable_iter_perf_stats", "enable_iter_req_stats", "print_iter_log",
    "perf_metrics_max_requests", "batch_wait_timeout_ms", "batch_wait_timeout_iters",
    "batch_wait_max_tokens_ratio", "torch_compile_config", "enable_autotuner",
    "enable_layerwise_nvtx_marker", "enable_min_latency", "stream_interval",
    "force_dynamic_quantization", "allreduce_strategy", "checkpoint_loader",
    "checkpoint_format", "kv_connector_config", "mm_encoder_only", "ray_worker_extension_cls",
})
KV_CACHE_KEYS = frozenset({
    "enable_block_reuse", "max_tokens", "max_attention_window", "sink_token_length",
    "free_gpu_memory_fraction", "host_cache_size", "onboard_blocks", "cross_kv_cache_fraction",
    "secondary_offload_min_priority", "event_buffer_max_size",
    "attention_dp_events_gather_period_ms", "enable_partial_reuse", "copy_on_partial_reuse",
    "use_uvm", "max_gpu_total_bytes", "dtype", "mamba_ssm_cache_dtype", "tokens_per_block",
})
CUDA_GRAPH_KEYS = frozenset({"batch_sizes", "max_batch_size", "enable_padding"})
_SPEC_BASE = frozenset({"decoding_type", "max_draft_len", "max_total_draft_tokens",
                        "speculative_model_dir", "max_concurrency", "load_format",
                        "acceptance_window", "acceptance_length_threshold"})
SPEC_KEYS: dict[str, frozenset[str]] = {
    "Eagle": _SPEC_BASE | {"eagle_choices", "greedy_sampling", "posterior_threshold",
                           "use_dynamic_tree", "dynamic_tree_max_topK", "num_eagle_layers",
                           "max_non_leaves_per_layer", "eagle3_one_model",
                           "eagle3_layers_to_capture"},
    "DraftTarget": _SPEC_BASE,
    "NGram": _SPEC_BASE | {"max_matching_ngram_size", "is_keep_all", "is_use_oldest",
                           "is_public_pool"},
    "MTP": _SPEC_BASE | {"num_nextn_predict_layers", "use_relaxed_acceptance_for_thinking",
                         "relaxed_topk", "relaxed_delta", "use_mtp_vanilla",
                         "mtp_eagle_one_model"},
}
SPEC_KEYS["Eagle3"] = SPEC_KEYS["Eagle"]
# After PR #10099 the field is `speculative_model` with `speculative_model_dir` as its alias.
SPEC_KEYS_AFTER_10099 = frozenset({"speculative_model"})
# openai/harmony v0.0.4 src/tiktoken_ext/public_encodings.rs: with TIKTOKEN_ENCODINGS_BASE set,
# <dir>/<file> is read and its sha256 checked; without it the file is downloaded from
# openaipublic (fails offline). gpt-oss needs o200k_base only; NVIDIA's playbook fetches both.
TIKTOKEN_FILES = {
    "o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/"
TIKTOKEN_OFFLINE_ERROR = ("error downloading or loading vocab file: failed to download "
                          f"{TIKTOKEN_URL}o200k_base.tiktoken")


# -- EAGLE head checkpoint formats (`specdec.catalog.HEAD_FORMATS`) -----------------------------
# The PyTorch backend builds the draft from ModelConfig.from_pretrained(speculative_model):
# tensorrt_llm/_torch/pyexecutor/config_utils.py load_pretrained_config has branches for some
# model families and otherwise calls transformers' AutoConfig; nothing reads a speculators
# config (transformer_layer_config, speculators_config), and Eagle3DecoderLayer takes the
# residual before hidden_norm, with no norm_before_residual (read on main @00679c66, 2026: still
# absent, so absent in every pinned release). PR #11010 ("Fix Eagle3 draft model weight loading
# for throughput checkpoint", c37531c3f7, 2026-01-28, after the 1.2 branch) only renames
# layers.N.* weights to midlayer.*; it does not read the speculators config. So every pinned
# release (1.2.0rc6, 1.2.1, 1.3.0rc13) loads the original layout only. A speculators head's
# config.json has no model_type, which AutoConfig refuses (transformers models/auto/
# configuration_auto.py) when the directory's name holds no model type.
_HEAD_ORIGINAL = ("tensorrt_llm/_torch/models/modeling_speculative.py Eagle3ForCausalLM (flat "
                  "config: hidden_size, num_hidden_layers, draft_vocab_size; weights midlayer.*); "
                  "NVIDIA's DGX Spark playbook serves nvidia/gpt-oss-120b-Eagle3-long-context "
                  "on 1.2.0rc6 (dgx-spark-playbooks @a5431dd); TensorRT-LLM's CI "
                  "TestQwen3_8B.test_eagle3 loads Tengyunw/qwen3_8b_eagle3")
_HEAD_SPECULATORS = ("no speculators branch in tensorrt_llm/_torch/pyexecutor/config_utils.py "
                     "load_pretrained_config and no norm_before_residual in Eagle3DecoderLayer "
                     "(main @00679c66); PR #11010 (2026-01-28) renames layers.N weights only")
UNRECOGNIZED_CONFIG = ("ValueError: Unrecognized model in {ref}. Should have a `model_type` key "
                       "in its config.json, or contain one of the following strings in its "
                       "name: albert, align, altclip, aria, aria_text, ...")
HEAD_FORMATS: dict[str, FactTable[bool]] = {
    "original": FactTable("original EAGLE-3 head", (F(True, _HEAD_ORIGINAL),)),
    "speculators": FactTable("speculators EAGLE-3 head", (
        F(False, _HEAD_SPECULATORS, error=UNRECOGNIZED_CONFIG),)),
}


def check_head(v: Version, fmt: str, ref: str = "<head dir>") -> Support:
    """Whether TensorRT-LLM ``v`` loads an EAGLE head checkpoint in format ``fmt`` (the refusal
    names the head's directory ``ref``)."""
    table = HEAD_FORMATS.get(fmt)
    fact = table.at(v) if table is not None else None
    if fact is not None and fact.value:
        return Support(True, "", fact.source)
    err = (fact.error if fact else None) or f"unknown EAGLE head format {fmt!r}"
    return Support(False, err.format(ref=ref), fact.source if fact else "")


@dataclass(frozen=True)
class TrtllmFacts:
    version: Version
    decoding: Fact[dict[str, str]]
    accepted: Fact[tuple[str, ...]]
    head_local_dir: Fact[bool]
    schedule: Fact[str | None]

    def decoding_type(self, method: str) -> str | None:
        return self.decoding.value.get(method)

    @property
    def decoding_source(self) -> str:
        return self.decoding.source

    def spec_keys(self, decoding_type: str) -> frozenset[str]:
        keys = SPEC_KEYS.get(decoding_type, _SPEC_BASE)
        if self.schedule.value is not None:
            keys = keys | {"draft_len_schedule"}
        return keys | SPEC_KEYS_AFTER_10099 if not self.head_local_dir.value else keys

    def schedules(self, decoding_type: str | None) -> bool:
        """Whether specdec renders a draft_len_schedule for ``decoding_type`` at this release."""
        return self.schedule.value is not None and decoding_type in SCHEDULE_DECODING


def trtllm_facts(version: Version | str) -> TrtllmFacts:
    v = version if isinstance(version, Version) else Version.parse(version)
    dec, acc, local = DECODING_TYPES.at(v), ACCEPTED_DECODING_TYPES.at(v), HEAD_LOCAL_DIR.at(v)
    sched = DRAFT_LEN_SCHEDULE.at(v)
    assert dec is not None and acc is not None and local is not None and sched is not None
    return TrtllmFacts(version=v, decoding=dec, accepted=acc, head_local_dir=local,
                       schedule=sched)


def boundaries() -> list[Version]:
    out: set[Version] = set()
    tables: list[FactTable[Any]] = [DECODING_TYPES, ACCEPTED_DECODING_TYPES, HEAD_LOCAL_DIR,
                                    DRAFT_LEN_SCHEDULE, *HEAD_FORMATS.values()]
    for table in tables:
        out.update(table.boundaries())
    return sorted(out)


def check(v: Version, method: str, target: Target) -> Support:
    """Whether TensorRT-LLM ``v`` has a ``decoding_type`` for ``method``."""
    facts = trtllm_facts(v)
    spelling = facts.decoding_type(method)
    if spelling is None:
        return Support(False, f"TensorRT-LLM {v} has no decoding_type for {method!r}",
                       facts.decoding_source)
    return Support(True, "", facts.decoding_source)
