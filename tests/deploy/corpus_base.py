"""The bad-input corpus's case type and shared values (`tests/deploy/test_bad_input_corpus.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HOST = "@fake/bad-1"
VLLM = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}
TRT = {"specdec_device": "dgx-spark", "specdec_engine": "trtllm", "specdec_model": "Qwen/Qwen3-8B"}
DYN = {"specdec_device": "dgx-spark", "specdec_engine": "dynamo", "specdec_model": "Qwen/Qwen3-8B",
       "ssh_hostname": "192.0.2.7"}
TOK = "hf_" + "Abc123" * 5  # token-shaped: must never be echoed
NO_FILE = "/nonexistent/specdec-hf-token"
NO_KEY = "/nonexistent/specdec-api-key"
KEY = "sdk_" + "Abc123" * 5  # API-key-shaped: must never be echoed either

# The fixed parts of the messages.
HOST_RULE = ("not a valid inventory host name (1-63 letters, digits, '.', '_' or '-', starting "
             "with a letter or digit; optional @connector/ prefix)")
REPO_RULE = ("not a Hugging Face repo id ([namespace/]name: letters, digits, '-', '_', '.', "
             "each part at most 96, no '--' or '..')")
IMAGE_RULE = ("not a valid image reference ([registry[:port]/]path[:tag][@digest]; lowercase "
              "path components starting with a letter or digit)")
CTRL = "contains a line break or control character"
SECRET = ("looks like a Hugging Face token; secrets do not belong in host data (the token goes "
          "to specdec_hf_token_file or $HF_TOKEN)")
RESERVED = ("is reserved (managed by specdec, or it changes where the engine loads code, weights "
            "or the token from)")
SECRET_FLAG = "takes a secret; secrets do not belong on the command line"
MEMLOCK = 'must be "unlimited" or a number of bytes in 65536..1099511627776'
NOT_SINGLE = ("does not hold a single token (whitespace, a line break or a control character "
              "inside)")
NOT_HF = "does not hold a Hugging Face token (hf_ followed by 20-200 letters and digits)"
H = f"{HOST}: "


@dataclass(frozen=True)
class Case:
    error: str  # exactly what follows "specdec: error: " ("{path}": the token file)
    data: dict[str, Any] = field(default_factory=dict)  # over `base`
    host: str = HOST
    base: dict[str, Any] = field(default_factory=lambda: VLLM)
    env_token: str | None = None  # $HF_TOKEN
    file_token: bytes | None = None  # written to the file specdec_hf_token_file names
    key_file: bytes | None = None  # written to the file specdec_api_key_file names
    key_mode: int = 0o600
    reads_token: bool = False  # found only by reading the token (or a key or PEM file)

    @property
    def offline(self) -> bool:
        """`specdec plan` sees it (it reads no token)."""
        return (self.env_token is None and self.file_token is None and self.key_file is None
                and not self.reads_token)


def _host_case(name: str, shown: str) -> Case:
    return Case(f"host name {shown}: {HOST_RULE}", host=name)


def bad(key: str, value: Any, why: str, base: dict[str, Any] = VLLM) -> Case:
    """Host data ``{key: value}`` over ``base`` (``a.b``: ``{a: {b: value}}``), refused as
    ``<host>: key=repr(value): why``."""
    top, _, sub = key.partition(".")
    return Case(f"{H}{key}={value!r}: {why}", {top: {sub: value} if sub else value}, base=base)


def _managed(args: list[str], shown: str, why: str, base: dict[str, Any] = VLLM) -> Case:
    return Case(f"{H}specdec_extra_args[0]={shown}: {why}", {"specdec_extra_args": args},
                base=base)


