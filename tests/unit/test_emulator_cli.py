"""The emulated CLIs: argparse/click usage errors (exit 2), spec-config validation messages,
SPECDEC_EMU_* knobs and fault parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.errors import ConfigError
from specdec_lab.emulator import cli_trtllm, cli_vllm
from specdec_lab.emulator.faults import Faults, parse_faults
from specdec_lab.emulator.launch import engine_of, run
from specdec_lab.emulator.profiles import device_profile, model_spec
from specdec_lab.emulator.runtime import StartupError, make_context

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
HEAD8 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
AGX = device_profile("agx-orin-64gb")
SPARK = device_profile("dgx-spark")


VLLM = "0.19.0"  # the Jetson default image's release (per release: test_emulator_versions)
TRT = "1.3.0rc15"  # the first TensorRT-LLM release with decoding_type Eagle3 and Hub-id drafts


def vllm_cfg(*flags: str, model: str = LLAMA8, version: str = VLLM):
    args = cli_vllm.parse_argv(["serve", model, *flags])
    return cli_vllm.config_from_args(args, seed=0, device_id=AGX.id, device=AGX,
                                     version=version)


def spec_error(spec: dict[str, object], model: str = LLAMA8, version: str = VLLM) -> str:
    with pytest.raises(StartupError) as info:
        vllm_cfg("--speculative-config", json.dumps(spec), model=model, version=version)
    return info.value.root


# -- program name ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("prog", "engine"), [
    ("vllm", "vllm"), ("/usr/local/bin/vllm", "vllm"), ("trtllm-serve", "trtllm"),
    ("/usr/local/bin/trtllm-serve", "trtllm"), ("python3", None), ("sglang", None),
])
def test_engine_of(prog: str, engine: str | None) -> None:
    assert engine_of(prog) == engine


# -- usage errors exit 2 --------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["vllm", "serve", LLAMA8, "--no-such-flag"],
    ["vllm", "serve", LLAMA8, "--port", "eighty"],
    ["vllm", "serve", LLAMA8, "--speculative-config", "{not json"],
    ["vllm", "serve", LLAMA8, "--kv-cache-dtype", "int3"],
    ["vllm", "bench", "serve"],
    ["vllm"],
    ["trtllm-serve"],
    ["trtllm-serve", LLAMA8, "--max_batch_size", "many"],
    ["trtllm-serve", LLAMA8, "--backend", "onnx"],
    ["trtllm-serve", LLAMA8, "--bogus"],
    ["sglang", "serve", LLAMA8],
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(argv, device="agx-orin-64gb", time_scale=0.01) == 2
    assert capsys.readouterr().err.strip()


def test_trtllm_usage_error_is_click_style(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["trtllm-serve", LLAMA8, "--bogus"], device="dgx-spark") == 2
    err = capsys.readouterr().err
    assert "Usage: trtllm-serve" in err and "Error: No such option: --bogus" in err


def test_vllm_version(capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_EMU_ENGINE_VERSION", "0.9.2")
    assert run(["vllm", "--version"]) == 0
    assert capsys.readouterr().out.strip() == "0.9.2"
    monkeypatch.delenv("SPECDEC_EMU_ENGINE_VERSION")
    monkeypatch.setenv("SPECDEC_EMU_DEVICE", "agx-orin-64gb")
    assert run(["vllm", "--version"]) == 0  # the device's default catalog image's release
    assert capsys.readouterr().out.strip() == VLLM


def test_vllm_underscore_flags_are_accepted() -> None:
    cfg = vllm_cfg("--max_model_len", "4096", "--max-num-seqs=4")
    assert cfg.setup.model_len == 4096 and cfg.setup.max_num_seqs == 4


# -- vLLM speculative-config validation (verbatim messages) ----------------------------------------
def test_spec_tensor_parallel_size_rejected() -> None:
    # vLLM 0.19.0 raises it in SpeculativeConfig.__post_init__, so pydantic wraps it
    # (specdec_lab/contract/parsers/vllm-0.19.0.json, probe tp-key)
    assert spec_error({"method": "eagle3", "model": HEAD8, "num_speculative_tokens": 3,
                       "tensor_parallel_size": 1}).startswith(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
        "  Value error, 'tensor_parallel_size' is not a valid argument in the speculative_config. "
        "Please pass 'draft_tensor_parallel_size' instead. [type=value_error, ")


def test_spec_k_without_model() -> None:
    assert "num_speculative_tokens was provided but without speculative model." in spec_error(
        {"method": "eagle3", "num_speculative_tokens": 3})


def test_spec_model_without_k() -> None:
    # 0.19.0 still names speculative_token_tree (removed in 0.21.0); 0.31.0 does not
    assert ("A speculative model was provided, but neither `speculative_token_tree` nor "
            "`num_speculative_tokens` was provided") in spec_error({"method": "eagle3",
                                                                    "model": HEAD8})
    assert "A speculative model was provided, but `num_speculative_tokens` was not provided" in (
        spec_error({"method": "eagle3", "model": HEAD8}, version="0.31.0"))


def test_spec_prompt_lookup_order() -> None:
    assert "prompt_lookup_min=5 must be <= prompt_lookup_max=2" in spec_error(
        {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5,
         "prompt_lookup_max": 2})


def test_spec_draft_tp() -> None:
    assert "speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or target" in (
        spec_error({"method": "eagle3", "model": HEAD8, "num_speculative_tokens": 3,
                    "draft_tensor_parallel_size": 2}))


def test_spec_unknown_method() -> None:
    msg = spec_error({"method": "lookahead", "num_speculative_tokens": 3})
    assert "1 validation error for SpeculativeConfig\nmethod\n  Input should be 'ngram'" in msg
    assert "[type=literal_error, input_value='lookahead', input_type=str]" in msg


def test_spec_vocab_mismatch() -> None:
    assert "Target and draft model should have the same vocabulary size" in spec_error(
        {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3})


def test_spec_unknown_key_is_pydantic_error() -> None:
    msg = spec_error({"method": "eagle3", "model": HEAD8, "num_speculative_tokens": 3,
                      "speculative_depth": 2})
    assert "validation error for SpeculativeConfig" in msg and "speculative_depth" in msg


def test_spec_unknown_draft_repo() -> None:
    assert "is not a valid model identifier" in spec_error(
        {"method": "eagle3", "model": "nobody/no-such-head", "num_speculative_tokens": 3})


def test_spec_ok_sets_method_and_k() -> None:
    cfg = vllm_cfg("--speculative-config", json.dumps(
        {"method": "eagle3", "model": HEAD8, "num_speculative_tokens": 4}))
    assert (cfg.setup.method, cfg.setup.k, cfg.setup.drafter and cfg.setup.drafter.id) == (
        "eagle3", 4, HEAD8)


def test_vllm_gpu_memory_utilization_bounds() -> None:
    with pytest.raises(StartupError, match="less than or equal to 1"):
        vllm_cfg("--gpu-memory-utilization", "1.5")


def test_vllm_max_model_len_above_model() -> None:
    with pytest.raises(StartupError, match="greater than the derived max_model_len"):
        vllm_cfg("--max-model-len", "10000000")


# -- trtllm-serve speculative_config ---------------------------------------------------------------
def trt_cfg(tmp_path: Path, yaml_text: str, model: str = LLAMA8, version: str = TRT):
    p = tmp_path / "extra.yaml"
    p.write_text(yaml_text)
    args = cli_trtllm.parse_argv(["serve", model, "--extra_llm_api_options", str(p)])
    return cli_trtllm.config_from_args(args, seed=0, device=SPARK, version=version)


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("speculative_config: {decoding_type: Bogus, max_draft_len: 3}",
     "Invalid decoding type: Bogus"),
    (f"speculative_config: {{decoding_type: Eagle3, speculative_model_dir: {HEAD8}}}",
     "max_draft_len is required for Eagle"),
    ("speculative_config: {decoding_type: Eagle, max_draft_len: 3}",
     "Path to EAGLE3 weights must be specified."),
    (f"speculative_config: {{decoding_type: Eagle3, max_draft_len: 3, speculative_model_dir: "
     f"{HEAD8}, tree_depth: 2}}", "Extra inputs are not permitted"),
    ("kv_cache_config: {free_gpu_memory_fraction: 1.5}", "free_gpu_memory_fraction"),
    ("foo: 1", "Extra inputs are not permitted"),
    ("speculative_config: [1, 2]", "valid dictionary"),
])
def test_trtllm_spec_validation(tmp_path: Path, yaml_text: str, message: str) -> None:
    with pytest.raises(StartupError) as info:
        trt_cfg(tmp_path, yaml_text)
    assert message in info.value.root


def test_trtllm_missing_yaml(tmp_path: Path) -> None:
    args = cli_trtllm.parse_argv([LLAMA8, "--extra_llm_api_options", str(tmp_path / "no.yaml")])
    with pytest.raises(StartupError, match="No such file or directory"):
        cli_trtllm.config_from_args(args, seed=0, device=SPARK, version=TRT)


def test_trtllm_spec_ok(tmp_path: Path) -> None:
    cfg = trt_cfg(tmp_path, "speculative_config: {decoding_type: Eagle3, max_draft_len: 4, "
                            f"speculative_model_dir: {HEAD8}, "
                            "max_concurrency: 8}\ndisable_overlap_scheduler: true\n")
    assert (cfg.setup.method, cfg.setup.k, cfg.setup.max_concurrency) == ("eagle3", 4, 8)
    assert not cfg.setup.overlap_scheduler
    assert cfg.host == "localhost"  # trtllm-serve's default


def test_trtllm_on_orin_is_unsupported() -> None:
    args = cli_trtllm.parse_argv([LLAMA8])
    with pytest.raises(StartupError, match="Unsupported SM version 87"):
        cli_trtllm.config_from_args(args, seed=0, device=AGX, version=TRT)


# -- knobs and faults ------------------------------------------------------------------------------
def test_parse_faults_all() -> None:
    f = parse_faults("crash_at_start, slow_start:2.5,hang_after:3,5xx_burst:4:2,slowdown:0.1,oom")
    assert f == Faults(crash_at_start=True, slow_start_s=2.5, hang_after=3, burst_start=4,
                       burst_count=2, slowdown=0.1, oom=True)
    assert [n for n in range(1, 8) if f.is_5xx(n)] == [4, 5]
    assert not f.hung(2) and f.hung(3)
    assert f.step_factor(10) == pytest.approx(2.0)
    assert parse_faults("") == Faults() and parse_faults(None) == Faults()


@pytest.mark.parametrize(("text", "message"), [
    ("explode", "unknown fault 'explode'"),
    ("hang_after", "hang_after takes 1 argument"),
    ("5xx_burst:3", "5xx_burst takes 2 argument"),
    ("slowdown:fast", "'fast' is not a number"),
    ("slow_start:-1", "must be >= 0"),
    ("5xx_burst:0:2", "must be >= 1"),
])
def test_parse_faults_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_faults(text)


def test_make_context_reads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_EMU_DEVICE", "orin-nano-8gb")
    monkeypatch.setenv("SPECDEC_EMU_TIME_SCALE", "0.5")
    monkeypatch.setenv("SPECDEC_EMU_FAULT", "hang_after:2")
    monkeypatch.setenv("SPECDEC_EMU_SEED", "7")
    monkeypatch.setenv("SPECDEC_EMU_RESERVED_GIB", "1.5")
    ctx = make_context("vllm", None, None)
    assert (ctx.device.id, ctx.time_scale, ctx.faults.hang_after, ctx.seed, ctx.reserved_gib) == (
        "orin-nano-8gb", 0.5, 2, 7, 1.5)
    ctx = make_context("vllm", "dgx-spark", 0.1)  # explicit arguments win
    assert (ctx.device.id, ctx.time_scale) == ("dgx-spark", 0.1)


@pytest.mark.parametrize(("var", "value", "message"), [
    ("SPECDEC_EMU_DEVICE", "jetson-tx2", "not a known device"),
    ("SPECDEC_EMU_TIME_SCALE", "0", "must be > 0"),
    ("SPECDEC_EMU_SEED", "x", "not an integer"),
    ("SPECDEC_EMU_FAULT", "boom", "unknown fault"),
])
def test_bad_knob_is_one_line_error(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str], var: str, value: str,
                                    message: str) -> None:
    monkeypatch.setenv("SPECDEC_EMU_DEVICE", "agx-orin-64gb")
    monkeypatch.setenv(var, value)
    assert run(["vllm", "serve", LLAMA8]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_config_error_exits_1_with_vllm_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["vllm", "serve", LLAMA8, "--speculative-config",
                '{"method":"eagle3","num_speculative_tokens":3}'], device="agx-orin-64gb",
               time_scale=0.01)
    assert code == 1
    out = capsys.readouterr().out
    assert "Traceback (most recent call last):" in out
    assert "num_speculative_tokens was provided but without speculative model." in out


def test_catalog_head_known() -> None:
    head = model_spec(HEAD8)
    assert head is not None and head.kind == "head" and head.head_target == LLAMA8
