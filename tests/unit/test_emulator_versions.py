"""The emulator emulates the pinned engine release, not a superset: each refuses, with its own
error text, what that release refuses (`specdec.engines`). One test per engine-contract item
(3-7 of the engine-contract issue); items 1-2 are in test_prefetch.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec_lab.emulator import cli_trtllm, cli_vllm, hf
from specdec_lab.emulator.profiles import device_profile
from specdec_lab.emulator.runtime import StartupError

AGX = device_profile("agx-orin-64gb")
SPARK = device_profile("dgx-spark")
L8 = "meta-llama/Llama-3.1-8B-Instruct"
Q8 = "Qwen/Qwen3-8B"
L8_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
Q8_HEAD = "RedHatAI/Qwen3-8B-speculator.eagle3"


def vllm(version: str, model: str, spec: dict[str, object]):
    args = cli_vllm.parse_argv(["serve", model, "--speculative-config", json.dumps(spec)])
    return cli_vllm.config_from_args(args, seed=0, device_id=AGX.id, device=AGX,
                                     version=version)


def vllm_error(version: str, model: str, spec: dict[str, object]) -> str:
    with pytest.raises(StartupError) as info:
        vllm(version, model, spec)
    return info.value.root


def trt(version: str, yaml_text: str, tmp: Path, model: str = L8):
    p = tmp / "extra.yaml"
    p.write_text(yaml_text)
    args = cli_trtllm.parse_argv(["serve", model, "--extra_llm_api_options", str(p)])
    return cli_trtllm.config_from_args(args, seed=0, device=SPARK, version=version)


def trt_error(version: str, yaml_text: str, tmp: Path, model: str = L8) -> str:
    with pytest.raises(StartupError) as info:
        trt(version, yaml_text, tmp, model)
    return info.value.root


# -- item 5: vLLM 0.9.2 refuses EAGLE-3 for non-Llama targets ---------------------------------
def test_vllm_0_9_2_eagle3_llama_only() -> None:
    spec = {"method": "eagle3", "model": "Tengyunw/qwen3_8b_eagle3", "num_speculative_tokens": 3}
    msg = vllm_error("0.9.2", Q8, spec)
    assert "1 validation error for SpeculativeConfig" in msg
    assert ("Value error, Eagle3 is only supported for Llama models. Got "
            "self.target_model_config.hf_text_config.model_type='qwen3'") in msg
    # a speculators-format head: the real 0.9.2 reads the head's config.json first and refuses
    # that (parsers/vllm-0.9.2.json, probe head-speculators), before its Llama-only gate
    q8 = {"method": "eagle3", "model": Q8_HEAD, "num_speculative_tokens": 3}
    assert "Value error, Unrecognized model in " + Q8_HEAD in vllm_error("0.9.2", Q8, q8)
    assert vllm("0.10.1.1", Q8, q8).setup.method == "eagle3"  # PR #22333 added "qwen"
    llama = {"method": "eagle3", "model": L8_HEAD, "num_speculative_tokens": 3}
    assert vllm("0.9.2", L8, llama).setup.method == "eagle3"


# -- item 6: draft_model on V1-only releases ----------------------------------------------------
@pytest.mark.parametrize(("version", "tail"), [("0.10.0", "or deepseek_mtp."),
                                               ("0.11.0", "or mtp."), ("0.14.0", "or mtp.")])
def test_vllm_v1_only_releases_refuse_draft_model(version: str, tail: str) -> None:
    spec = {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}
    assert vllm_error(version, "Qwen/Qwen3-1.7B", spec) == (
        "NotImplementedError: Speculative decoding with draft model is not supported yet. "
        "Please consider using other speculative decoding methods such as ngram, medusa, "
        f"eagle, {tail}")


def test_draft_model_on_0_9_2_falls_back_to_v0_and_works_again_from_0_15() -> None:
    spec = {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}
    old = vllm("0.9.2", "Qwen/Qwen3-1.7B", spec)
    assert old.setup.method == "draft_model"
    assert any("Falling back to V0" in w for w in old.warnings)
    assert vllm("0.15.0", "Qwen/Qwen3-1.7B", spec).setup.method == "draft_model"


# -- unknown keys: ignored before 0.16.0, refused from it; per-batch-size k from 0.24.0 -------
def test_unknown_speculative_keys_by_release() -> None:
    base = {"method": "ngram", "num_speculative_tokens": 3}
    assert vllm("0.15.1", L8, {**base, "bogus": 1}).setup.method == "ngram"
    msg = vllm_error("0.16.0", L8, {**base, "bogus": 1})
    assert "bogus\n  Unexpected keyword argument [type=unexpected_keyword_argument" in msg
    # disable_by_batch_size: a field (no effect) until 0.16, removed by PR #35060
    assert vllm("0.16.0", L8, {**base, "disable_by_batch_size": 4}).setup.method == "ngram"
    assert "disable_by_batch_size" in vllm_error("0.17.1", L8,
                                                 {**base, "disable_by_batch_size": 4})
    schedule = {**base, "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 0]]}
    assert "num_speculative_tokens_per_batch_size" in vllm_error("0.19.0", L8, schedule)
    assert vllm("0.24.0", L8, schedule).setup.k_by_batch == ((1, 4, 3), (5, 64, 0))
    assert "must start at 1" in vllm_error(
        "0.24.0", L8, {**base, "num_speculative_tokens_per_batch_size": [[2, 4, 3]]})


def test_medusa_is_gone_in_0_33() -> None:
    msg = vllm_error("0.33.0", L8, {"method": "medusa", "model": L8_HEAD,
                                    "num_speculative_tokens": 3})
    assert "[type=literal_error, input_value='medusa'" in msg


# -- item 4: decoding_type Eagle3 arrived with PR #10124 -----------------------------------------
def test_trtllm_eagle3_spelling_by_release(tmp_path: Path) -> None:
    head = tmp_path / "head"
    hf.download(L8_HEAD, local_dir=str(head), quiet=True, time_scale=0)
    yaml_text = ("speculative_config:\n  decoding_type: {dt}\n  max_draft_len: 3\n"
                 f"  speculative_model_dir: {head}\n")
    assert trt_error("1.2.0rc6", yaml_text.format(dt="Eagle3"), tmp_path) == (
        "ValueError: Invalid decoding type: Eagle3")
    assert trt("1.2.0rc6", yaml_text.format(dt="Eagle"), tmp_path).setup.method == "eagle3"
    assert trt("1.3.0rc15", yaml_text.format(dt="Eagle3"), tmp_path).setup.method == "eagle3"


# -- item 3: a Hub id as speculative_model_dir before PR #10099 -----------------------------------
def test_trtllm_head_must_be_a_local_directory_before_pr_10099(tmp_path: Path) -> None:
    hub_id = ("speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
              f"  speculative_model_dir: {L8_HEAD}\n")
    msg = trt_error("1.2.1", hub_id, tmp_path)
    assert "FileNotFoundError" in msg and "needs speculative_model_dir to be a local" in msg
    assert trt("1.3.0rc15", hub_id, tmp_path).draft_ref == L8_HEAD
    # the new key name does not exist before the PR either
    renamed = hub_id.replace("speculative_model_dir", "speculative_model")
    assert trt_error("1.2.1", renamed, tmp_path) == (
        'ValueError: "EagleDecodingConfig" object has no field "speculative_model"')


# -- heads that load: the checkpoint format each release reads ---------------------------------
@pytest.mark.parametrize("version", ["1.2.0rc6", "1.2.1", "1.3.0rc13"])
def test_trtllm_refuses_a_speculators_format_head(tmp_path: Path, version: str) -> None:
    heads = {}
    for repo in (Q8_HEAD, "Tengyunw/qwen3_8b_eagle3"):
        heads[repo] = tmp_path / repo.replace("/", "--")
        hf.download(repo, local_dir=str(heads[repo]), quiet=True, time_scale=0)
    yaml_text = ("speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
                 "  speculative_model_dir: {d}\n")
    msg = trt_error(version, yaml_text.format(d=heads[Q8_HEAD]), tmp_path, Q8)
    assert msg.startswith(f"ValueError: Unrecognized model in {heads[Q8_HEAD]}. Should have a "
                          "`model_type` key in its config.json")
    ok = trt(version, yaml_text.format(d=heads["Tengyunw/qwen3_8b_eagle3"]), tmp_path, Q8)
    assert ok.setup.method == "eagle3" and ok.setup.drafter is not None
    assert ok.setup.drafter.id == "Tengyunw/qwen3_8b_eagle3"


def test_vllm_reads_speculators_heads_from_0_10_1() -> None:
    spec = {"method": "eagle3", "model": L8_HEAD, "num_speculative_tokens": 3}
    assert vllm("0.9.2", L8, spec).setup.method == "eagle3"  # original format: every release
    q8 = {"method": "eagle3", "model": Q8_HEAD, "num_speculative_tokens": 3}
    assert vllm("0.11.0", Q8, q8).setup.drafter.head_format == "speculators"
    # 0.10.1.1 is the first release with EAGLE-3 for Qwen3, after speculators support (0.10.1)
    assert vllm("0.10.1.1", Q8, q8).setup.method == "eagle3"


# -- item 7: gpt-oss reads its harmony encoding; air-gapped hosts need it prefetched ---------------
def test_trtllm_gpt_oss_needs_tiktoken_encodings(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    msg = trt_error("1.2.1", "enable_iter_perf_stats: true\n", tmp_path, "openai/gpt-oss-120b")
    assert "error downloading or loading vocab file" in msg
    enc = tmp_path / "tiktoken"
    enc.mkdir()
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(enc))
    assert "No such file or directory" in trt_error("1.2.1", "enable_iter_perf_stats: true\n",
                                                    tmp_path, "openai/gpt-oss-120b")
    (enc / "o200k_base.tiktoken").write_text("encoding\n")
    assert trt("1.2.1", "enable_iter_perf_stats: true\n", tmp_path,
               "openai/gpt-oss-120b").setup.target.id == "openai/gpt-oss-120b"


def test_trtllm_schema_is_strict(tmp_path: Path) -> None:
    msg = trt_error("1.2.1", "kv_cache_config:\n  free_gpu_memory_fraction: 0.5\n  bogus: 1\n",
                    tmp_path)
    assert "KvCacheConfig\nkv_cache_config.bogus\n  Extra inputs are not permitted" in msg


# -- TensorRT-LLM draft_len_schedule: upper bounds from 1.3.0rc27, absent before --------------
def test_trtllm_draft_len_schedule_by_release(tmp_path: Path) -> None:
    yaml_text = ("max_batch_size: 16\nspeculative_config:\n  decoding_type: Eagle3\n"
                 f"  max_draft_len: 4\n  speculative_model_dir: {L8_HEAD}\n"
                 "  draft_len_schedule: {2: 4, 8: 1}\n")
    # PR #10860's reading: batch 1-2 draft 4, 3-8 draft 1, above the largest key 0
    setup = trt("1.3.0rc29", yaml_text, tmp_path).setup
    assert setup.k_by_batch == ((1, 2, 4), (3, 8, 1), (9, 16, 0))
    # before 1.3.0rc27 the field is not confirmed: judged as the older schema, without it
    assert "Extra inputs are not permitted" in trt_error("1.3.0rc15", yaml_text, tmp_path)
    # the release's validator: the smallest key drafts max_draft_len, none drafts more
    bad = yaml_text.replace("{2: 4, 8: 1}", "{2: 3, 8: 1}")
    assert "draft_len_schedule[2] must equal max_draft_len" in trt_error("1.3.0rc29", bad,
                                                                         tmp_path)
    grows = yaml_text.replace("{2: 4, 8: 1}", "{2: 4, 8: 6}")
    assert "all draft lengths must be <= max_draft_len" in trt_error("1.3.0rc29", grows,
                                                                     tmp_path)
    both = yaml_text + "  max_concurrency: 4\n"
    assert "mutually exclusive" in trt_error("1.3.0rc29", both, tmp_path)
