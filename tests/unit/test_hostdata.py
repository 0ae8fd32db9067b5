"""specdec.plan.hostdata: typed, validated specdec_* keys; one-line errors naming host, key,
value."""

from __future__ import annotations

from typing import Any

import pytest

from specdec.errors import ConfigError
from specdec.plan.hostdata import HostSettings, as_mapping, parse_host_settings
from specdec.plan.types import GatePolicy


def test_defaults_and_types() -> None:
    s = parse_host_settings("h1", {"specdec_model": "m", "ssh_user": "x", "_sudo": True})
    assert isinstance(s, HostSettings)
    assert s.model == "m"
    assert s.engine is None and s.runtime is None and s.method is None
    assert s.memlock == "unlimited"
    assert s.jetson_tuning is True
    assert s.health_timeout == 900
    assert s.service_user == "specdec"
    assert s.gate == GatePolicy()
    assert s.keys == frozenset({"specdec_model"})
    assert s.pinned("model") and not s.pinned("device")


def test_full_settings() -> None:
    s = parse_host_settings(
        "h1",
        {
            "specdec_device": "agx-orin-64gb",
            "specdec_engine": "vllm",
            "specdec_runtime": "native",
            "specdec_method": "eagle3",
            "specdec_num_speculative_tokens": 4,
            "specdec_gpu_memory_utilization": 0.5,
            "specdec_max_model_len": 2048,
            "specdec_max_num_seqs": 2,
            "specdec_port": 8100,
            "specdec_memlock": 8388608,
            "specdec_env": {"B": "2", "A": "1"},
            "specdec_extra_args": ["--enforce-eager"],
            "specdec_jetson_tuning": False,
            "specdec_gate": {"keep_min_throughput_gain": 0.25, "max_rounds": 2},
            "specdec_reverify": True,
        },
    )
    assert s.memlock == "8388608"
    assert s.env == (("A", "1"), ("B", "2"))
    assert s.extra_args == ("--enforce-eager",)
    assert s.gate.keep_min_throughput_gain == 0.25 and s.gate.max_rounds == 2
    assert s.reverify and not s.jetson_tuning


class _HostDataLike:
    """pyinfra's HostData is not a Mapping; it has .dict()."""

    def __init__(self, d: dict[str, Any]) -> None:
        self._d = d

    def dict(self) -> dict[str, Any]:
        return dict(self._d)


def test_accepts_object_with_dict_method() -> None:
    s = parse_host_settings("h1", _HostDataLike({"specdec_port": 9000}))
    assert s.port == 9000
    assert as_mapping(None) == {}
    with pytest.raises(ConfigError, match="must be a mapping"):
        as_mapping(42)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("specdec_engine", "sglang", "must be one of vllm, trtllm"),
        ("specdec_runtime", "podman", "must be one of docker, native"),
        ("specdec_method", "eagle4", "must be one of"),
        ("specdec_num_speculative_tokens", 0, "1..16"),
        ("specdec_num_speculative_tokens", 17, "1..16"),
        ("specdec_num_speculative_tokens", "4", "must be auto or an integer in 1..16"),
        ("specdec_num_speculative_tokens", True, "must be auto or an integer in 1..16"),
        ("specdec_num_speculative_tokens", "automatic", "must be auto or an integer"),
        ("specdec_gpu_memory_utilization", 1.0, "(0, 1)"),
        ("specdec_gpu_memory_utilization", 0, "must be a finite number in (0, 1)"),
        ("specdec_gpu_memory_utilization", "0.5", "must be a number"),
        ("specdec_max_model_len", 64, "128..16777216"),
        ("specdec_max_num_seqs", 2000, "1..1024"),
        ("specdec_port", 80, "1024..65535"),
        ("specdec_port", 70000, "1024..65535"),
        ("specdec_memlock", "lots", "unlimited"),
        ("specdec_memlock", -1, "unlimited"),
        ("specdec_env", ["A=1"], "mapping"),
        ("specdec_env", {"A": "x\ny"}, "line break or control character (U+000A)"),
        ("specdec_env", {"1BAD": "x"}, "environment variable name"),
        ("specdec_extra_args", "--enforce-eager", "list of strings"),
        ("specdec_extra_args", ["ok", 3], "specdec_extra_args[1]=3: must be a string"),
        ("specdec_jetson_tuning", "yes", "true or false"),
        ("specdec_health_timeout", 5, "30.."),
        ("specdec_gate", {"keep_min_gain": 0.2}, "unknown gate field"),
        ("specdec_gate", {"max_rounds": 0.5}, "integer"),
        ("specdec_gate", {"confidence": 1.5}, "(0, 1)"),
        ("specdec_model_params_b", -3, "finite number in (0, 2000]"),
        ("specdec_service_user", "Root User", "user name"),
        ("specdec_model", "", "non-empty"),
        ("specdec_model", 5, "must be a string"),
        ("specdec_bench_mode", "remote", "must be one of host, image, control"),
        ("specdec_bench_mode", 3, "specdec_bench_mode"),
    ],
)
def test_bad_values_name_host_key_value(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_host_settings("orin-7", {key: value})
    msg = str(exc.value)
    assert msg.startswith("orin-7: ")
    assert key in msg
    assert "\n" not in msg
    assert fragment in msg
    if not isinstance(value, dict | list):
        assert repr(value) in msg


@pytest.mark.parametrize("secret", ["HF_TOKEN", "AWS_SECRET", "DB_PASSWORD", "API_KEY", "hf_token"])
def test_secret_env_rejected(secret: str) -> None:
    with pytest.raises(ConfigError, match=f"specdec_env.{secret}: looks like a secret") as exc:
        parse_host_settings("h", {"specdec_env": {secret: "hf_MARKERtoken123"}})
    assert "hf_MARKERtoken123" not in str(exc.value)


def test_unknown_key_suggests() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_host_settings("h", {"specdec_metod": "ngram"})
    assert str(exc.value) == (
        "h: unknown key specdec_metod='ngram'; did you mean specdec_method?"
    )
    with pytest.raises(ConfigError, match="unknown key specdec_zzz=1$"):
        parse_host_settings("h", {"specdec_zzz": 1})


def test_memlock_forms() -> None:
    assert parse_host_settings("h", {"specdec_memlock": "unlimited"}).memlock == "unlimited"
    assert parse_host_settings("h", {"specdec_memlock": "8388608"}).memlock == "8388608"


TOKEN = "hf_MARKERtoken123abcdefghijklmnopqrstuv"


@pytest.mark.parametrize(
    "data",
    [
        {"specdec_env": {"FOO": TOKEN}},
        {"specdec_extra_args": ["--api-key", "x"]},
        {"specdec_extra_args": [TOKEN]},
        {"specdec_hf_token_file": TOKEN},
        {"specdec_hf_tokn_file": TOKEN},
        {"specdec_model": TOKEN + " "},
    ],
)
def test_tokens_rejected_and_never_echoed(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_host_settings("h", data)
    assert TOKEN not in str(exc.value)
    assert "\n" not in str(exc.value)


def test_hf_token_file_path_ok() -> None:
    s = parse_host_settings("h", {"specdec_hf_token_file": "~/.cache/huggingface/token"})
    assert s.hf_token_file == "~/.cache/huggingface/token"


def test_bench_mode_defaults_to_the_host_and_image_needs_an_image() -> None:
    assert parse_host_settings("orin-7", {}).bench_mode == "host"
    assert parse_host_settings("orin-7", {"specdec_bench_mode": "control"}).bench_mode == "control"
    assert parse_host_settings("orin-7", {"specdec_bench_mode": "image"}).bench_mode == "image"
    with pytest.raises(ConfigError) as exc:
        parse_host_settings("orin-7", {"specdec_bench_mode": "image",
                                       "specdec_runtime": "native"})
    msg = str(exc.value)
    assert msg.startswith("orin-7: specdec_bench_mode='image'") and "native runtime" in msg
