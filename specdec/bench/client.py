"""Async OpenAI-compatible streaming benchmark client (`specdec bench`).

Definitions (see docs in `specdec.bench`; they follow `vllm bench serve` where it is sound):

* ``t_send`` is when the request is on the wire: httpx's ``trace`` event for the request body
  sent (``http11.send_request_body.complete``, or HTTP/2's), not when the coroutine was
  scheduled (at c=8 the client's own event loop would add its queueing to TTFT); every content
  chunk (non-empty ``delta.content`` or ``text``) is timestamped on arrival with
  ``time.perf_counter()``.
* TTFT = t(first content chunk) − t_send; E2EL = t(last content chunk) − t_send (the trailing
  usage-only chunk and ``[DONE]`` are not tokens); N = ``usage.completion_tokens``;
  TPOT = (E2EL − TTFT)/(N − 1), only for N > 1. Without usage, N is the output text counted
  with the model's tokenizer when it is on the control node (`specdec.bench.tokens`), else the
  chunk count marked *estimated* (``tokens_source``; the level's ``tokens_estimated``).
* ITL keys (``*_itl_ms``) are inter-*chunk* gaps, pooled over requests, as vLLM reports them;
  under speculation a chunk carries several tokens, so gate on TPOT, never on ITL.
* ``throughput_tok_s`` = ``output_throughput`` = Σ N over successful requests / (last completion
  − first send) of the level: what `vllm bench serve` and the emulator's ``/lab/truth`` call
  throughput (failed requests add time, not tokens).
* ``steady_output_throughput``: tokens produced inside the steady window / its length. The window
  opens when the first ``C`` requests have all produced a token (ramp-up done) and closes at the
  first completion after the last request was sent (from then on fewer than ``C`` requests run:
  the drain tail). Token times are exact with ``continuous_usage_stats`` (each chunk carries the
  running ``completion_tokens``), else interpolated linearly between a request's first and last
  chunk. None when the window is empty (requests ≤ C).
* At C > 1 the clients keep C requests in flight until the last measured request ends (extra,
  unmeasured requests on the next prompts, cancelled then), so every measured request ran at
  full concurrency: their Σtokens/ΣE2EL is the steady-state rate (the gate's c=8 figure).

Per level the client scrapes the server's speculation counters before and after (vLLM
Prometheus text; TRT-LLM iteration stats, polled during the level) and reports acceptance.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx

from specdec.bench.metrics import (
    Counters,
    TrtllmAccumulator,
    add_counters,
    diff_counters,
    parse_vllm,
    spec_delta,
    trtllm_entries,
)
from specdec.bench.prompts import Prompt, PromptSet, builtin_prompts
from specdec.bench.stats import summarize
from specdec.bench.tokens import load_counter
from specdec.errors import BenchError, ConfigError

__all__ = [
    "BenchConfig",
    "ServerInfo",
    "parse_sse_line",
    "probe_server",
    "run_bench",
    "run_bench_async",
    "run_bench_sync",
]

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
SCHEMA = 1


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


# -- SSE --------------------------------------------------------------------------------------
class _StreamError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_sse_line(line: str) -> dict[str, Any] | None:
    """One SSE line → JSON event; None for blank/comment/other fields/[DONE].

    Raises `BenchError` for a malformed line or data, and for an error object in the stream.
    """
    line = line.strip()
    if not line or line.startswith(":"):
        return None
    if line.startswith(("event:", "id:", "retry:")):
        return None
    if not line.startswith("data:"):
        raise BenchError(f"malformed SSE line: {line[:60]!r}")
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        ev = json.loads(data)
    except ValueError:
        raise BenchError(f"malformed SSE data: {data[:60]!r}") from None
    if not isinstance(ev, dict):
        raise BenchError(f"malformed SSE data: {data[:60]!r}")
    if "error" in ev:
        err = ev["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise BenchError(f"server error in stream: {str(msg).splitlines()[0][:100]}")
    return ev


def _one_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return (s.splitlines()[0] if s else type(exc).__name__)[:160]


# -- one request ------------------------------------------------------------------------------
@dataclass
class _Rec:
    index: int
    prompt: Prompt
    send: float = 0.0  # on the wire (request body sent)
    queued: float = 0.0  # when the client started the request
    first: float | None = None
    last: float | None = None
    end: float | None = None
    tokens: int = 0
    usage_seen: bool = False
    exact: bool = True  # timeline carries real cumulative token counts
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    chunks: int = 0
    text: list[str] = field(default_factory=list)
    tokens_source: str = "usage"  # usage | tokenizer | estimated
    finish_reason: str | None = None
    times: list[float] = field(default_factory=list)
    cums: list[int] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first is None else (self.first - self.send) * 1000

    @property
    def e2el_ms(self) -> float | None:
        return None if self.last is None else (self.last - self.send) * 1000

    @property
    def tpot_ms(self) -> float | None:
        if self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) * 1000 / (self.tokens - 1)

    def cum_at(self, t: float) -> float:
        """Tokens received by time ``t``."""
        if not self.ok or self.first is None or self.last is None or t < self.first:
            return 0.0
        if t >= self.last:
            return float(self.tokens)
        if self.exact and self.cums:
            i = bisect.bisect_right(self.times, t) - 1
            return float(self.cums[i]) if i >= 0 else 0.0
        span = self.last - self.first
        return 1.0 + (self.tokens - 1) * (t - self.first) / span if span > 0 else 1.0

    def chunk_sizes(self) -> list[int] | None:
        """Tokens per chunk after the first (one chunk per engine step: accepted drafts + 1);
        None without exact per-chunk counts."""
        if not self.ok or not self.exact or len(self.cums) < 2:
            return None
        return [b - a for a, b in zip(self.cums, self.cums[1:], strict=False)]

    def chunk_tokens_sd(self) -> float | None:
        sizes = self.chunk_sizes()
        if not sizes or len(sizes) < 2:
            return None
        m = sum(sizes) / len(sizes)
        return (sum((x - m) ** 2 for x in sizes) / (len(sizes) - 1)) ** 0.5

    def chunk_hist(self) -> list[int] | None:
        """Counts of decode chunks by size (index = tokens in the chunk)."""
        sizes = self.chunk_sizes()
        if sizes is None:
            return None
        out = [0] * (max(sizes, default=0) + 1)
        for s in sizes:
            if s >= 0:
                out[s] += 1
        return out

    def record(self, t0: float) -> dict[str, Any]:
        gaps = self.chunks - 1
        return {
            "index": self.index,
            "prompt_id": self.prompt.id,
            "category": self.prompt.category,
            "start_s": round(self.send - t0, 6),
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "e2el_ms": self.e2el_ms,
            "output_tokens": self.tokens if self.ok else None,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "chunks": self.chunks,
            "tokens_source": self.tokens_source if self.ok else None,
            "client_queue_ms": round((self.send - self.queued) * 1000, 3),
            "tokens_per_chunk": (self.tokens - 1) / gaps if self.ok and gaps > 0 else None,
            "chunk_tokens_sd": self.chunk_tokens_sd(),
            "chunk_hist": self.chunk_hist(),
            "finish_reason": self.finish_reason,
            "error": self.error,
            "error_kind": self.error_kind,
        }


def _body(cfg: BenchConfig, model: str, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    body.update({"max_tokens": cfg.max_tokens, "temperature": 0, "top_p": 1, "stream": True})
    opts: dict[str, Any] = {"include_usage": True}
    if cfg.continuous_usage:
        opts["continuous_usage_stats"] = True
    body["stream_options"] = opts
    if cfg.fixed_length:
        body["ignore_eos"] = True
        body["min_tokens"] = cfg.max_tokens
    return body


def _content(ev: dict[str, Any], endpoint: str) -> tuple[str | None, str | None]:
    choices = ev.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, None
    ch = choices[0]
    if not isinstance(ch, dict):
        raise _StreamError("malformed_sse", "malformed SSE data: choices[0] is not an object")
    reason = ch.get("finish_reason")
    if endpoint == "chat":
        delta = ch.get("delta") or {}
        if not isinstance(delta, dict):
            raise _StreamError("malformed_sse", "malformed SSE data: delta is not an object")
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    else:
        text = ch.get("text")
    return (text if isinstance(text, str) and text else None,
            reason if isinstance(reason, str) else None)


# httpcore trace events: the request (headers and body) has been written to the socket
_SENT_EVENTS = ("http11.send_request_body.complete", "http2.send_request_body.complete")


def _count_without_usage(rec: _Rec, counter: Callable[[str], int] | None) -> None:
    """No usage in the stream: count the text with the tokenizer, else estimate by chunks."""
    if counter is not None:
        rec.tokens = counter("".join(rec.text))
        rec.tokens_source = "tokenizer"
        # chunk times stay, but their cumulative counts were guesses: interpolate instead
    else:
        rec.tokens = rec.chunks
        rec.tokens_source = "estimated"
    rec.exact = False


async def _request(client: httpx.AsyncClient, cfg: BenchConfig, model: str, rec: _Rec,
                   text: str, counter: Callable[[str], int] | None = None) -> None:
    url = cfg.base_url + ENDPOINTS[cfg.endpoint]
    body = _body(cfg, model, text)
    rec.queued = rec.send = time.perf_counter()

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event in _SENT_EVENTS:
            rec.send = time.perf_counter()

    done = False
    try:
        async with asyncio.timeout(cfg.request_timeout_s), \
                client.stream("POST", url, json=body, extensions={"trace": trace}) as resp:
            if resp.status_code != 200:
                raw = (await resp.aread()).decode(errors="replace")
                try:
                    err = json.loads(raw)
                    msg = err.get("error", err)
                    msg = msg.get("message", msg) if isinstance(msg, dict) else msg
                except ValueError:
                    msg = raw
                kind = "http_5xx" if resp.status_code >= 500 else "http_4xx"
                raise _StreamError(kind, f"HTTP {resp.status_code}: "
                                         f"{_one_line(Exception(str(msg)))[:120]}")
            async for line in resp.aiter_lines():
                if line.strip() == "data: [DONE]":
                    done = True
                    continue
                try:
                    ev = parse_sse_line(line)
                except BenchError as exc:
                    kind = "stream_error" if "server error" in str(exc) else "malformed_sse"
                    raise _StreamError(kind, str(exc)) from None
                if ev is None:
                    continue
                now = time.perf_counter()
                usage = ev.get("usage")
                cum: int | None = None
                if isinstance(usage, dict):
                    ct = usage.get("completion_tokens")
                    if isinstance(ct, int) and not isinstance(ct, bool):
                        cum = ct
                        rec.tokens = ct
                        rec.usage_seen = True
                    pt = usage.get("prompt_tokens")
                    if isinstance(pt, int):
                        rec.prompt_tokens = pt
                    det = usage.get("prompt_tokens_details")
                    if isinstance(det, dict) and isinstance(det.get("cached_tokens"), int):
                        rec.cached_tokens = det["cached_tokens"]
                content, reason = _content(ev, cfg.endpoint)
                if reason:
                    rec.finish_reason = reason
                if content is None:
                    continue
                if rec.first is None:
                    rec.first = now
                rec.last = now
                rec.chunks += 1
                rec.text.append(content)
                if cum is None:
                    rec.exact = False
                    cum = (rec.cums[-1] + 1) if rec.cums else 1
                rec.times.append(now)
                rec.cums.append(cum)
        rec.end = time.perf_counter()
        if rec.first is None:
            raise _StreamError("empty", "stream ended without any token")
        if not done and rec.finish_reason is None:
            raise _StreamError("connection", "connection closed before the stream finished "
                                             "(no [DONE], no finish_reason)")
        if not rec.usage_seen:
            _count_without_usage(rec, counter)
    except _StreamError as exc:
        rec.error, rec.error_kind = str(exc), exc.kind
    except TimeoutError:
        rec.error, rec.error_kind = f"timed out after {cfg.request_timeout_s:g} s", "timeout"
    except httpx.TimeoutException as exc:
        rec.error, rec.error_kind = f"timed out: {_one_line(exc)}", "timeout"
    except httpx.HTTPError as exc:
        rec.error = f"connection lost: {type(exc).__name__}: {_one_line(exc)}"
        rec.error_kind = "connection"
    if rec.end is None:
        rec.end = time.perf_counter()


# -- server probing and speculation counters ----------------------------------------------------
async def probe_server(client: httpx.AsyncClient, base_url: str) -> ServerInfo:
    """Check the server speaks OpenAI (GET /v1/models) and find out what it is."""
    try:
        r = await client.get(base_url + "/v1/models")
    except httpx.HTTPError as exc:
        raise BenchError(f"{base_url}: cannot connect ({type(exc).__name__}: "
                         f"{_one_line(exc)})") from None
    try:
        data = r.json()
        ids = tuple(str(m["id"]) for m in data["data"])
    except (ValueError, KeyError, TypeError):
        ids = None
    if r.status_code != 200 or ids is None:
        raise BenchError(f"{base_url}: not an OpenAI-compatible server "
                         f"(GET /v1/models answered HTTP {r.status_code} without a model list)")
    kind, metrics = "openai", "none"
    try:
        m = await client.get(base_url + "/metrics")
        if m.status_code == 200:
            ctype = m.headers.get("content-type", "")
            body = m.text
            if "json" in ctype or body.lstrip().startswith("["):
                try:
                    trtllm_entries(json.loads(body))
                    kind, metrics = "trtllm", "trtllm-json"
                except (ValueError, BenchError):
                    pass
            elif "vllm:" in body:
                parse_vllm(body)
                kind, metrics = "vllm", "prometheus"
        if kind == "openai":
            h = await client.get(base_url + "/health_generate")
            if h.status_code == 200:
                kind = "trtllm"
    except httpx.HTTPError:
        pass
    version = None
    try:
        v = await client.get(base_url + "/version")
        if v.status_code == 200:
            vv = v.json().get("version")
            version = str(vv) if vv is not None else None
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return ServerInfo(kind, metrics, version, ids)


class _SpecProbe:
    """Snapshots of the server's speculation counters for one level."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, server: ServerInfo,
                 poll_s: float, previous: Counters | None = None) -> None:
        self.client = client
        self.url = base_url + "/metrics"
        self.server = server
        self.poll_s = poll_s
        self._acc: TrtllmAccumulator | None = None
        self._task: asyncio.Task[None] | None = None
        self._before = Counters()
        self._previous = previous  # the last level's final snapshot (vLLM)
        self.after: Counters | None = None

    async def _get(self) -> httpx.Response:
        try:
            r = await self.client.get(self.url)
        except httpx.HTTPError as exc:
            raise BenchError(f"GET /metrics failed during the run ({type(exc).__name__}: "
                             f"{_one_line(exc)})") from None
        if r.status_code != 200:
            raise BenchError(f"GET /metrics answered HTTP {r.status_code} during the run")
        return r

    async def _trt_poll(self) -> None:
        assert self._acc is not None
        r = await self._get()
        try:
            payload = json.loads(r.text)
        except ValueError:
            raise BenchError("/metrics: TRT-LLM iteration stats are not JSON") from None
        self._acc.add(trtllm_entries(payload))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self._trt_poll()

    async def start(self) -> None:
        if self.server.metrics == "prometheus":
            self._before = parse_vllm((await self._get()).text)
            if self._previous is not None:
                spec_delta(self._previous, self._before)  # raises when a counter fell
        elif self.server.metrics == "trtllm-json":
            self._acc = TrtllmAccumulator()
            r = await self._get()
            try:
                self._acc.prime(trtllm_entries(json.loads(r.text)))
            except ValueError:
                raise BenchError("/metrics: TRT-LLM iteration stats are not JSON") from None
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> tuple[dict[str, Any] | None, Counters]:
        """Acceptance figures for the level and the level's counter delta."""
        if self.server.metrics == "prometheus":
            after = self.after = parse_vllm((await self._get()).text)
            fig = spec_delta(self._before, after)
            return fig, diff_counters(self._before, after)
        if self._acc is not None:
            if self._task is not None:
                self._task.cancel()
                try:
                    await self._task
                except asyncio.CancelledError:
                    pass
                except BenchError:
                    raise
            await self._trt_poll()
            c = self._acc.counters
            return spec_delta(Counters(present=c.present, per_pos=None), c), c
        return None, Counters()

    def check(self) -> None:
        """Re-raise a poller failure (e.g. counters went backwards) during the level."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            exc = self._task.exception()
            if exc is not None:
                raise exc


# -- progress ---------------------------------------------------------------------------------
class _Progress:
    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self.enabled = enabled
        self.stream = stream

    def show(self, label: str, done: int, total: int, failed: int) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{label:>10} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} failed {failed} ")
        self.stream.flush()

    def end(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


# -- levels -----------------------------------------------------------------------------------
def _prompt_text(cfg: BenchConfig, tag: str, p: Prompt) -> str:
    return f"[{tag}] {p.text}" if cfg.unique_prefix else p.text


async def _run_requests(client: httpx.AsyncClient, cfg: BenchConfig, model: str,
                        prompts: list[Prompt], conc: int, tag: str, progress: _Progress,
                        check: Callable[[], None] | None = None,
                        counter: Callable[[str], int] | None = None,
                        fillers: list[Prompt] | None = None,
                        ramp: int = 0) -> list[_Rec]:
    """Run ``prompts`` with ``conc`` workers. With ``fillers``, a worker without a measured
    request left sends filler requests (not recorded) while measured ones are in flight, and
    the fillers still running are cancelled when the last measured request ends; with
    ``ramp``, each worker first sends one unrecorded request of ``ramp`` tokens."""
    recs = [_Rec(i, p) for i, p in enumerate(prompts)]
    nxt = 0
    finished = failed = 0
    all_done = asyncio.Event()
    ramp_cfg = replace(cfg, max_tokens=ramp) if ramp else cfg
    ramps = (fillers or prompts)

    fill_next = 0

    async def filler() -> None:
        nonlocal fill_next
        assert fillers
        i = fill_next
        fill_next += 1
        await _request(client, cfg, model, _Rec(-1, fillers[i % len(fillers)]),
                       _prompt_text(cfg, f"{tag} fill #{i}", fillers[i % len(fillers)]),
                       counter)

    async def worker(w: int) -> None:
        nonlocal nxt, finished, failed
        if ramp:
            p = ramps[w % len(ramps)]
            await _request(client, ramp_cfg, model, _Rec(-1, p),
                           _prompt_text(cfg, f"{tag} ramp #{w}", p), counter)
        while nxt < len(recs):
            rec = recs[nxt]
            nxt += 1
            await _request(client, cfg, model, rec, _prompt_text(cfg, f"{tag} #{rec.index}",
                                                                   rec.prompt), counter)
            finished += 1
            failed += 0 if rec.ok else 1
            progress.show(tag, finished, len(recs), failed)
            if check is not None:
                check()
        if finished == len(recs):
            all_done.set()
        while fillers and not all_done.is_set():
            task = asyncio.ensure_future(filler())
            waiter = asyncio.ensure_future(all_done.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()  # closes the stream: the server aborts the request
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            waiter.cancel()

    await asyncio.gather(*(worker(w) for w in range(min(conc, len(recs)))))
    progress.end()
    return recs


def _steady(recs: list[_Rec], conc: int) -> tuple[float, float] | None:
    """(start, end) of the window in which ``conc`` requests were producing tokens."""
    if conc > 1 and len(recs) <= conc:
        return None
    firsts = [r.first for r in recs[:conc] if r.first is not None]
    if not firsts:
        return None
    w0 = max(firsts)  # ramp-up done: the first `conc` requests all have a token
    last_send = max(r.send for r in recs)
    ends = [r.end for r in recs if r.end is not None and r.end >= last_send]
    if not ends:
        return None
    # drain: after the last request was sent, the first completion leaves a slot idle for good
    w1 = min(ends) if conc > 1 else max(ends)
    return (w0, w1) if w1 > w0 else None


def _stats_keys(out: dict[str, Any], metric: str, values: list[float]) -> None:
    s = summarize(values)
    out[f"mean_{metric}_ms"] = s["mean"]
    out[f"median_{metric}_ms"] = s["median"]
    out[f"std_{metric}_ms"] = s["std"]
    out[f"p90_{metric}_ms"] = s["p90"]
    out[f"p99_{metric}_ms"] = s["p99"]
    out[f"n_{metric}"] = s["n"]


def _level_result(cfg: BenchConfig, recs: list[_Rec], conc: int) -> dict[str, Any]:
    ok = [r for r in recs if r.ok]
    errors: dict[str, int] = {}
    for r in recs:
        if r.error_kind:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    t0 = min(r.send for r in recs)
    t_end = max((r.end or r.send) for r in recs)
    duration = t_end - t0
    tokens = sum(r.tokens for r in ok)
    lvl: dict[str, Any] = {
        "concurrency": conc,
        "num_requests": len(recs),
        "completed": len(ok),
        "failed": len(recs) - len(ok),
        "errors": errors,
        "first_error": next((r.error for r in recs if r.error), None),
        "duration": duration,
        "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "total_output_tokens": tokens,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "output_throughput": tokens / duration if duration > 0 else None,
    }
    win = _steady(recs, conc)
    if win is not None:
        w0, w1 = win
        wt = sum(r.cum_at(w1) - r.cum_at(w0) for r in ok)
        lvl["steady_output_throughput"] = wt / (w1 - w0)
        lvl["steady_window"] = {"start_s": w0 - t0, "end_s": w1 - t0, "tokens": wt,
                                "exact_token_times": all(r.exact for r in ok)}
    else:
        lvl["steady_output_throughput"] = None
        lvl["steady_window"] = None
    _stats_keys(lvl, "ttft", [r.ttft_ms for r in ok if r.ttft_ms is not None])
    _stats_keys(lvl, "tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None])
    gaps = [(b - a) * 1000 for r in ok for a, b in zip(r.times, r.times[1:], strict=False)]
    _stats_keys(lvl, "itl", gaps)
    _stats_keys(lvl, "e2el", [r.e2el_ms for r in ok if r.e2el_ms is not None])
    tpc = [(r.tokens - 1) / (r.chunks - 1) for r in ok if r.chunks > 1]
    lvl["mean_tokens_per_chunk"] = sum(tpc) / len(tpc) if tpc else None
    lvl["tpot_ms_p50"] = lvl["median_tpot_ms"]
    lvl["ttft_ms_p50"] = lvl["median_ttft_ms"]
    lvl["e2el_ms_p50"] = lvl["median_e2el_ms"]
    lvl["throughput_tok_s"] = lvl["output_throughput"]
    lvl["length_mismatches"] = sum(1 for r in ok if r.tokens != cfg.max_tokens)
    lvl["usage_missing"] = sum(1 for r in ok if not r.usage_seen)
    lvl["tokens_counted"] = sum(1 for r in ok if r.tokens_source == "tokenizer")
    lvl["tokens_estimated"] = sum(1 for r in ok if r.tokens_source == "estimated")
    cats: dict[str, list[_Rec]] = {}
    for r in ok:
        cats.setdefault(r.prompt.category, []).append(r)
    per_cat = {}
    for c, rs in sorted(cats.items()):
        tp = [r.tpot_ms for r in rs if r.tpot_ms is not None]
        ch = [(r.tokens - 1) / (r.chunks - 1) for r in rs if r.chunks > 1]
        per_cat[c] = {"completed": len(rs), "tpot_ms_p50": summarize(tp)["median"],
                      "mean_tokens_per_chunk": sum(ch) / len(ch) if ch else None}
    lvl["per_category"] = per_cat
    lvl["requests"] = [r.record(t0) for r in recs]
    return lvl


def _fail_if_too_many(lvl: dict[str, Any], conc: int, cfg: BenchConfig) -> None:
    n, failed = lvl["num_requests"], lvl["failed"]
    if failed and failed / n > cfg.max_failed_fraction:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(lvl["errors"].items()))
        raise BenchError(f"concurrency {conc}: {failed}/{n} requests failed ({kinds}; first: "
                         f"{lvl['first_error']}); allowed fraction {cfg.max_failed_fraction:g}")


def _check_tokens(lvl: dict[str, Any], conc: int, cfg: BenchConfig,
                  warnings: list[str]) -> None:
    mism = lvl["length_mismatches"]
    if cfg.fixed_length and mism:
        warnings.append(f"concurrency {conc}: {mism} of {lvl['completed']} responses had "
                        f"completion_tokens != max_tokens={cfg.max_tokens} (the server may "
                        "ignore ignore_eos/min_tokens)")
    if lvl["tokens_counted"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_counted']} responses had no usage; "
                        "their text was counted with the model's tokenizer")
    if lvl["tokens_estimated"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_estimated']} responses had no usage "
                        "and no tokenizer is on this machine: tokens estimated (chunks); the "
                        "gate will not decide on these counts")


async def run_bench_async(cfg: BenchConfig, *, stderr: TextIO | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the result dict (see module doc) or raises `BenchError`."""
    cfg.validate()
    err = stderr if stderr is not None else sys.stderr
    show = cfg.progress if cfg.progress is not None else err.isatty()
    progress = _Progress(bool(show), err)
    pset = cfg.prompts or builtin_prompts()
    if isinstance(cfg.requests, tuple):
        counts = dict(zip(cfg.concurrency, cfg.requests, strict=True))
    else:
        counts = {c: cfg.requests or len(pset.measured) for c in cfg.concurrency}
    offsets = dict(zip(cfg.concurrency, cfg.prompt_offset, strict=True)) if isinstance(
        cfg.prompt_offset, tuple) else dict.fromkeys(cfg.concurrency, cfg.prompt_offset)

    by_id = {p.id: p for p in pset.measured}
    chosen: dict[int, list[Prompt]] = {}
    for conc, ids in cfg.prompt_ids:
        missing = [i for i in ids if i not in by_id]
        if missing or conc not in counts:
            raise ConfigError(f"--prompt-ids {conc}={','.join(ids)}: "
                              + (f"no measured prompt {missing[0]!r} in {pset.source}"
                                 if missing else f"{conc} is not a --concurrency level"))
        chosen[conc] = [by_id[i] for i in ids]
        counts[conc] = len(ids)

    def measured(n: int, off: int, conc: int) -> list[Prompt]:
        if conc in chosen:
            return chosen[conc]
        return [pset.measured[(off + i) % len(pset.measured)] for i in range(n)]

    warm = [pset.warmup[i % len(pset.warmup)] for i in range(cfg.warmup)]

    started = datetime.now(UTC).isoformat()
    warnings: list[str] = []
    limits = httpx.Limits(max_connections=max(cfg.concurrency) + 4,
                          max_keepalive_connections=max(cfg.concurrency) + 4)
    timeout = httpx.Timeout(None, connect=cfg.connect_timeout_s)
    base = cfg.base_url
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        server = await probe_server(client, base)
        if cfg.model is None:
            if len(server.models) != 1:
                raise BenchError(f"{base} serves {len(server.models)} models "
                                 f"({', '.join(server.models) or 'none'}); pick one with --model")
            model = server.models[0]
        else:
            model = cfg.model
            if model not in server.models:
                raise BenchError(f"--model {model!r} is not served at {base} "
                                 f"(served: {', '.join(server.models) or 'none'})")
        warm_failed = 0
        if warm:
            wcfg = replace(cfg, max_tokens=max(2, min(cfg.max_tokens, cfg.warmup_max_tokens)))
            wrecs = await _run_requests(client, wcfg, model, warm, max(cfg.concurrency),
                                        "warmup", progress, counter=load_counter(None))
            bad = [r for r in wrecs if not r.ok]
            warm_failed = len(bad)
            if len(bad) == len(wrecs):
                raise BenchError(f"warmup: all {len(wrecs)} requests failed "
                                 f"({bad[0].error_kind}: {bad[0].error})")
        levels: dict[str, Any] = {}
        total = Counters()
        any_spec = False
        last: Counters | None = None
        counter = load_counter(cfg.tokenizer or model)
        for conc in cfg.concurrency:
            probe = _SpecProbe(client, base, server, cfg.trtllm_poll_s, last)
            await probe.start()
            n, off = counts[conc], offsets[conc]
            fill = [pset.measured[(off + n + i) % len(pset.measured)] for i in range(conc)]
            recs = await _run_requests(client, cfg, model, measured(n, off, conc), conc,
                                       f"c{conc}" + (f" o{off}" if off else ""), progress,
                                       probe.check, counter,
                                       fill if conc > 1 and cfg.fill else None,
                                       cfg.ramp_tokens if conc > 1 else 0)
            fig, delta = await probe.stop()
            last = probe.after
            lvl = _level_result(cfg, recs, conc)
            lvl["spec_decode"] = fig
            _fail_if_too_many(lvl, conc, cfg)
            _check_tokens(lvl, conc, cfg, warnings)
            if fig is not None:
                any_spec = True
                total = add_counters(total, delta)
            levels[str(conc)] = lvl
    spec = spec_delta(Counters(present=True, per_pos=None if total.per_pos is None else {}),
                      total) if any_spec else None
    conf = asdict(replace(cfg, prompts=None))
    conf.pop("prompts")
    conf["requests"] = [counts[c] for c in cfg.concurrency]
    conf["concurrency"] = list(cfg.concurrency)
    conf["prompt_offset"] = [offsets[c] for c in cfg.concurrency]
    conf["prompt_ids"] = {str(c): [p.id for p in ps] for c, ps in chosen.items()}
    return {
        "schema": SCHEMA,
        "tool": "specdec bench",
        "url": cfg.url,
        "model": model,
        "endpoint": cfg.endpoint,
        "server": {"kind": server.kind, "metrics": server.metrics, "version": server.version},
        "started_at": started,
        "finished_at": datetime.now(UTC).isoformat(),
        "config": conf,
        "prompts": {"source": pset.source, "measured": len(pset.measured),
                    "categories": pset.categories()},
        "warmup": {"requests": len(warm), "failed": warm_failed},
        "concurrency": levels,
        "spec_decode": spec,
        "tokens": {"tokenizer": cfg.tokenizer or model, "tokenizer_found": counter is not None,
                   "estimated": sum(lv["tokens_estimated"] for lv in levels.values()),
                   "counted": sum(lv["tokens_counted"] for lv in levels.values())},
        "warnings": warnings,
    }


def run_bench(cfg: BenchConfig, *, stderr: TextIO | None = None) -> dict[str, Any]:
    """Synchronous wrapper (for the deploy's verify step and scripts)."""
    return asyncio.run(run_bench_async(cfg, stderr=stderr))


run_bench_sync = run_bench


def _finite(x: Any) -> Any:
    """JSON-safe copy: NaN/inf become None (json.dumps would write invalid JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(_finite(result), indent=2, allow_nan=False)
