"""Parse and validate the flat ``specdec_*`` host-data keys into a typed `HostSettings`."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdec.catalog import ENGINES, METHODS, RUNTIMES
from specdec.errors import ConfigError
from specdec.layout import SERVICE_USER
from specdec.plan_types import GatePolicy

__all__ = [
    "DEFAULT_HEALTH_TIMEOUT",
    "DEFAULT_MEMLOCK",
    "KNOWN_KEYS",
    "SECRET_MARKERS",
    "HostSettings",
    "as_mapping",
    "parse_host_settings",
]

PREFIX = "specdec_"
DEFAULT_MEMLOCK = "unlimited"
DEFAULT_HEALTH_TIMEOUT = 900
# An engine env key containing one of these is a secret and belongs in /etc/specdec/hf_token.
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Hugging Face user access tokens ("hf_" + ~34 letters): never echoed, never accepted as data.
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token")


def _looks_secret(key: str, value: Any) -> bool:
    if key not in KNOWN_KEYS and any(m in key.upper() for m in SECRET_MARKERS):
        return True
    return _HF_TOKEN.search(repr(value)) is not None


def _show(key: str, value: Any) -> str:
    """``key=value`` for an error message, with anything secret-looking redacted."""
    return f"{key}=<redacted>" if _looks_secret(key, value) else f"{key}={value!r}"
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


@dataclass(frozen=True)
class HostSettings:
    """The validated ``specdec_*`` keys of one host; ``None`` means "not set, use the default"."""

    host: str
    device: str | None = None
    engine: str | None = None
    runtime: str | None = None
    model: str | None = None
    method: str | None = None
    draft: str | None = None
    num_speculative_tokens: int | None = None  # None: auto (tuned on the host)
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    port: int | None = None
    image: str | None = None
    memlock: str = DEFAULT_MEMLOCK
    env: tuple[tuple[str, str], ...] = ()
    extra_args: tuple[str, ...] = ()
    jetson_tuning: bool = True
    health_timeout: int = DEFAULT_HEALTH_TIMEOUT
    gate: GatePolicy = dataclasses.field(default_factory=GatePolicy)
    model_params_b: float | None = None
    model_weight_gib: float | None = None
    model_kv_bytes_per_token: int | None = None
    model_tokenizer: str | None = None
    hf_token_file: str | None = None
    reverify: bool = False
    verify: bool = True  # False: provision and release only (no benchmark/gate)
    service_user: str = SERVICE_USER
    keys: frozenset[str] = frozenset()  # the specdec_* keys the data actually set ("pinned")

    def pinned(self, field_name: str) -> bool:
        """Whether ``specdec_<field_name>`` was set in the host's data."""
        return PREFIX + field_name in self.keys


def as_mapping(data: Any) -> Mapping[str, Any]:
    """Host data as a mapping: a dict/Mapping, or pyinfra's ``HostData`` (has ``.dict()``)."""
    if data is None:
        return {}
    if isinstance(data, Mapping):
        return data
    to_dict = getattr(data, "dict", None)
    if callable(to_dict):
        result = to_dict()
        if isinstance(result, Mapping):
            return result
    raise ConfigError(f"host data must be a mapping, got {type(data).__name__}")


class _Reader:
    def __init__(self, host: str, data: Mapping[str, Any]) -> None:
        self.host = host
        self.data = data

    def fail(self, key: str, value: Any, why: str) -> ConfigError:
        return ConfigError(f"{_show(key, value)}: {why}", host=self.host)

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def str_(self, key: str, choices: tuple[str, ...] | None = None) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, "must be a non-empty string")
        if value != value.strip() or any(c in value for c in "\n\r\0"):
            raise self.fail(key, value, "must not contain surrounding whitespace or newlines")
        if choices is not None and value not in choices:
            raise self.fail(key, value, f"must be one of {', '.join(choices)}")
        return value

    def int_(self, key: str, lo: int, hi: int | None = None) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, value, "must be an integer")
        if value < lo or (hi is not None and value > hi):
            rng = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
            raise self.fail(key, value, f"must be an integer {rng}")
        return value

    def float_(self, key: str, positive: bool = True) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, value, "must be a number")
        if positive and not value > 0:
            raise self.fail(key, value, "must be > 0")
        return float(value)

    def bool_(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, value, "must be true or false")
        return value


def _check_unknown(host: str, data: Mapping[str, Any]) -> None:
    for key in sorted(k for k in data if isinstance(k, str) and k.startswith(PREFIX)):
        if key in KNOWN_KEYS:
            continue
        names = [k[len(PREFIX):] for k in KNOWN_KEYS]
        close = difflib.get_close_matches(key[len(PREFIX):], names, n=1, cutoff=0.6)
        hint = f"; did you mean {PREFIX}{close[0]}?" if close else ""
        raise ConfigError(f"unknown key {_show(key, data[key])}{hint}", host=host)


def _spec_tokens(r: _Reader) -> int | None:
    """An integer pins k; ``auto`` (the default) tunes it on the host."""
    key = "specdec_num_speculative_tokens"
    value = r.get(key)
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int | None) or (
            isinstance(value, int) and not 1 <= value <= 16):
        raise r.fail(key, value, "must be auto or an integer in 1..16")
    return r.int_(key, 1, 16)


def _memlock(r: _Reader) -> str:
    key = "specdec_memlock"
    value = r.get(key)
    if value is None:
        return DEFAULT_MEMLOCK
    if value in ("unlimited", "infinity"):
        return "unlimited"
    if isinstance(value, str) and value.isdigit():
        value_int = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value_int = value
    else:
        raise r.fail(key, value, 'must be "unlimited" or a positive number of bytes')
    if value_int <= 0:
        raise r.fail(key, value, 'must be "unlimited" or a positive number of bytes')
    return str(value_int)


def _env(r: _Reader) -> tuple[tuple[str, str], ...]:
    key = "specdec_env"
    value = r.get(key)
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise r.fail(key, value, "must be a mapping of NAME: value strings")
    items = []
    for name, val in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise r.fail(f"{key}.{name}", val, "is not a valid environment variable name")
        upper = name.upper()
        marker = next((m for m in SECRET_MARKERS if m in upper), None)
        if marker is not None:
            raise ConfigError(
                f"{key}.{name}: looks like a secret (contains {marker}); secrets do not belong "
                "in host data (the HF token goes to specdec_hf_token_file)",
                host=r.host,
            )
        if isinstance(val, bool) or not isinstance(val, str | int | float):
            raise r.fail(f"{key}.{name}", val, "must be a string")
        sval = str(val)
        if _HF_TOKEN.search(sval):
            raise r.fail(f"{key}.{name}", val, "looks like a Hugging Face token; secrets do not "
                         "belong in host data")
        if any(c in sval for c in "\n\r\0"):
            raise r.fail(f"{key}.{name}", val, "must not contain newlines")
        items.append((name, sval))
    return tuple(sorted(items))


def _extra_args(r: _Reader) -> tuple[str, ...]:
    key = "specdec_extra_args"
    value = r.get(key)
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise r.fail(key, value, "must be a list of strings")
    for arg in value:
        if not isinstance(arg, str) or not arg or any(c in arg for c in "\n\r\0"):
            raise r.fail(key, value, f"item {arg!r} must be a non-empty one-line string")
        if _HF_TOKEN.search(arg) or arg.split("=")[0] in _SECRET_FLAGS:
            raise r.fail(key, value, "secrets do not belong on the engine command line")
    return tuple(value)


_GATE_FIELDS = {f.name: f for f in dataclasses.fields(GatePolicy)}


def _gate(r: _Reader) -> GatePolicy:
    key = "specdec_gate"
    value = r.get(key)
    if value is None:
        return GatePolicy()
    if not isinstance(value, Mapping):
        raise r.fail(key, value, "must be a mapping of GatePolicy fields")
    kwargs: dict[str, Any] = {}
    for name, val in value.items():
        if name not in _GATE_FIELDS:
            close = difflib.get_close_matches(str(name), list(_GATE_FIELDS), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise r.fail(f"{key}.{name}", val, f"unknown gate field{hint}")
        default = getattr(GatePolicy(), name)
        if isinstance(val, bool):
            raise r.fail(f"{key}.{name}", val, "must be a number")
        if isinstance(default, int):
            if not isinstance(val, int) or val < 1:
                raise r.fail(f"{key}.{name}", val, "must be an integer >= 1")
        else:
            if not isinstance(val, int | float):
                raise r.fail(f"{key}.{name}", val, "must be a number")
            val = float(val)
            if name == "confidence" and not 0 < val < 1:
                raise r.fail(f"{key}.{name}", val, "must be in (0, 1)")
            if name != "confidence" and not -1 < val < 10:
                raise r.fail(f"{key}.{name}", val, "must be a fraction (e.g. 0.3 for 30%)")
        kwargs[name] = val
    return GatePolicy(**kwargs)


def parse_host_settings(host: str, data: Any) -> HostSettings:
    """Validate the ``specdec_*`` keys of ``data`` (non-specdec keys are ignored)."""
    mapping = as_mapping(data)
    _check_unknown(host, mapping)
    r = _Reader(host, mapping)

    util = r.float_("specdec_gpu_memory_utilization")
    if util is not None and not 0 < util < 1:
        raise r.fail("specdec_gpu_memory_utilization", util, "must be in (0, 1)")

    service_user = r.str_("specdec_service_user") or SERVICE_USER
    if not _USER_NAME.fullmatch(service_user):
        raise r.fail("specdec_service_user", service_user, "is not a valid user name")

    hf_token_file = r.str_("specdec_hf_token_file")
    if hf_token_file is not None and _HF_TOKEN.search(hf_token_file):
        raise ConfigError(
            "specdec_hf_token_file=<redacted>: must be a path to a file holding the token "
            "(on the control node), not the token itself",
            host=host,
        )

    return HostSettings(
        host=host,
        device=r.str_("specdec_device"),
        engine=r.str_("specdec_engine", ENGINES),
        runtime=r.str_("specdec_runtime", RUNTIMES),
        model=r.str_("specdec_model"),
        method=r.str_("specdec_method", METHODS),
        draft=r.str_("specdec_draft"),
        num_speculative_tokens=_spec_tokens(r),
        gpu_memory_utilization=util,
        max_model_len=r.int_("specdec_max_model_len", 128),
        max_num_seqs=r.int_("specdec_max_num_seqs", 1, 1024),
        port=r.int_("specdec_port", 1024, 65535),
        image=r.str_("specdec_image"),
        memlock=_memlock(r),
        env=_env(r),
        extra_args=_extra_args(r),
        jetson_tuning=r.bool_("specdec_jetson_tuning", True),
        health_timeout=r.int_("specdec_health_timeout", 30, 24 * 3600) or DEFAULT_HEALTH_TIMEOUT,
        gate=_gate(r),
        model_params_b=r.float_("specdec_model_params_b"),
        model_weight_gib=r.float_("specdec_model_weight_gib"),
        model_kv_bytes_per_token=r.int_("specdec_model_kv_bytes_per_token", 1),
        model_tokenizer=r.str_("specdec_model_tokenizer"),
        hf_token_file=hf_token_file,
        reverify=r.bool_("specdec_reverify", False),
        verify=r.bool_("specdec_verify", True),
        service_user=service_user,
        keys=frozenset(
            k for k, v in mapping.items() if isinstance(k, str) and k.startswith(PREFIX)
            and v is not None
        ),
    )


KNOWN_KEYS = tuple(
    PREFIX + name
    for name in (
        "device", "engine", "runtime", "model", "method", "draft", "num_speculative_tokens",
        "gpu_memory_utilization", "max_model_len", "max_num_seqs", "port", "image", "memlock",
        "env", "extra_args", "jetson_tuning", "health_timeout", "gate", "model_params_b",
        "model_weight_gib", "model_kv_bytes_per_token", "model_tokenizer", "hf_token_file",
        "reverify", "verify", "service_user",
    )
)
