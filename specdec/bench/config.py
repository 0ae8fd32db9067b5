"""The bench client's configuration (`BenchConfig`) and what it learns about the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from specdec.bench.onhost.records import ENDPOINTS
from specdec.bench.onhost.run import SCHEMA
from specdec.bench.prompts import PromptSet
from specdec.errors import ConfigError

__all__ = ["ENDPOINTS", "SCHEMA", "BenchConfig", "ServerInfo"]




@dataclass(frozen=True)
class BenchConfig:
    """One benchmark: every level runs the same prompts in the same order."""

    url: str
    model: str | None = None
    concurrency: tuple[int, ...] = (1, 8)
    requests: int | tuple[int, ...] | None = None  # per level (one, or one per level);
    # None: every measured prompt once
    max_tokens: int = 128
    warmup: int = 4  # warmup requests (prompts outside the measured set)
    warmup_max_tokens: int = 16  # warmup only has to touch every code path
    prompt_offset: int | tuple[int, ...] = 0  # first measured prompt (one, or one per level):
    # rounds of a gate rotate through the set
    prompts: PromptSet | None = None  # None: the built-in set
    endpoint: str = "chat"  # chat | completions
    fixed_length: bool = True  # send ignore_eos + min_tokens = max_tokens
    continuous_usage: bool = True  # stream_options.continuous_usage_stats
    unique_prefix: bool = True  # "[c8 #12] " before each prompt: no prefix-cache reuse
    request_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    max_failed_fraction: float = 0.05
    progress: bool | None = None  # None: only when stderr is a terminal
    trtllm_poll_s: float = 0.5
    tokenizer: str | None = None  # repo id or local dir: counts tokens when there is no usage
    fill: bool = True  # at C > 1 keep C requests in flight until the last measured one ends
    ramp_tokens: int = 0  # at C > 1 each client first sends one unmeasured request this long,
    # so measured requests start staggered, as in a steady state (0: no ramp)
    prompt_ids: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (level, measured prompt ids):
    # exactly these prompts at that level, instead of --requests/--prompt-offset
    api_key: str | None = field(default=None, repr=False)  # sent as a Bearer token; never shown
    ca_file: str | None = None  # https: the CA the server's certificate chains to (else system)

    def validate(self) -> BenchConfig:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"url: expected http(s)://host:port, got {self.url!r}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ConfigError(f"--concurrency: levels must be >= 1, got {self.concurrency}")
        if isinstance(self.requests, tuple):
            if len(self.requests) != len(self.concurrency) or min(self.requests) < 1:
                raise ConfigError(f"--requests: expected one count >= 1 or one per concurrency "
                                  f"level {self.concurrency}, got {self.requests}")
        elif self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests: must be >= 1, got {self.requests}")
        if self.max_tokens < 2:
            raise ConfigError(f"--max-tokens: must be >= 2 (TPOT needs two tokens), "
                              f"got {self.max_tokens}")
        if self.warmup < 0:
            raise ConfigError(f"--warmup: must be >= 0, got {self.warmup}")
        offs = self.prompt_offset if isinstance(self.prompt_offset, tuple) else (
            self.prompt_offset,)
        if isinstance(self.prompt_offset, tuple) and len(offs) != len(self.concurrency):
            raise ConfigError(f"--prompt-offset: expected one offset or one per concurrency "
                              f"level {self.concurrency}, got {self.prompt_offset}")
        if min(offs) < 0:
            raise ConfigError(f"--prompt-offset: must be >= 0, got {self.prompt_offset}")
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(f"--endpoint: expected chat or completions, got {self.endpoint!r}")
        if not 0.0 <= self.max_failed_fraction < 1.0:
            raise ConfigError(f"max_failed_fraction: must be in [0, 1), got "
                              f"{self.max_failed_fraction}")
        if self.ramp_tokens < 0 or self.ramp_tokens == 1:
            raise ConfigError(f"--ramp-tokens: must be 0 or >= 2, got {self.ramp_tokens}")
        if self.request_timeout_s <= 0:
            raise ConfigError(f"--timeout: must be > 0, got {self.request_timeout_s}")
        return self

    @property
    def base_url(self) -> str:
        u = self.url.rstrip("/")
        return u[:-3] if u.endswith("/v1") else u


@dataclass(frozen=True)
class ServerInfo:
    kind: str  # vllm | trtllm | openai
    metrics: str  # prometheus | trtllm-json | none
    version: str | None
    models: tuple[str, ...]
