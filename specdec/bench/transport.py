"""The control node's transport: one streamed request over httpx, the server probe and its
speculation counters per level. What a request's events mean is
`specdec.bench.onhost.records`'s (one definition for both clients); only how bytes arrive
differs.

``t_send`` is when the request is on the wire: httpcore's ``trace`` event for the request body
sent (``http11.send_request_body.complete``, or HTTP/2's), not when the coroutine was scheduled
(at c=8 the client's own event loop would add its queueing to TTFT).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from specdec.bench.config import ENDPOINTS, BenchConfig, ServerInfo
from specdec.bench.metrics import (
    Counters,
    TrtllmAccumulator,
    diff_counters,
    parse_vllm,
    spec_delta,
    trtllm_entries,
)
from specdec.bench.onhost import errors as core_errors
from specdec.bench.onhost import probe as core_probe
from specdec.bench.onhost import records
from specdec.errors import BenchError

__all__ = ["SpecProbe", "parse_sse_line", "probe_server", "request"]

_one_line = core_errors._one_line
# httpcore trace events: the request (headers and body) has been written to the socket
_SENT_EVENTS = ("http11.send_request_body.complete", "http2.send_request_body.complete")


def parse_sse_line(line: str) -> dict[str, Any] | None:
    """One SSE line → JSON event; None for blank/comment/other fields/[DONE].

    Raises `BenchError` for a malformed line or data, and for an error object in the stream.
    """
    try:
        ev: dict[str, Any] | None = records.parse_sse_line(line)
    except core_errors.BenchError as exc:
        raise BenchError(str(exc)) from None
    return ev


async def _stream(client: httpx.AsyncClient, cfg: BenchConfig, model: str, rec: records.Rec,
                  text: str, max_tokens: int) -> bool:
    """Send the request, feed its events to ``rec``; True when ``[DONE]`` came."""
    async def trace(event: str, info: dict[str, Any]) -> None:
        if event in _SENT_EVENTS:
            rec.send = time.perf_counter()

    done = False
    body = records._body(cfg, model, text, max_tokens)
    async with client.stream("POST", cfg.base_url + ENDPOINTS[cfg.endpoint], json=body,
                             extensions={"trace": trace}) as resp:
        if resp.status_code != 200:
            raise records.http_error(resp.status_code, await resp.aread())
        async for line in resp.aiter_lines():
            if line.strip() == "data: [DONE]":
                done = True
                continue
            try:
                ev = records.parse_sse_line(line)
            except core_errors.BenchError as exc:
                kind = "stream_error" if "server error" in str(exc) else "malformed_sse"
                raise core_errors.StreamError(kind, str(exc)) from None
            if ev is not None:
                records._event(rec, ev, cfg.endpoint, time.perf_counter())
    return done


async def request(client: httpx.AsyncClient, cfg: BenchConfig, model: str, rec: records.Rec,
                  text: str, counter: Callable[[str], int] | None = None,
                  max_tokens: int | None = None) -> None:
    """One streamed request into ``rec`` (errors are recorded, not raised)."""
    rec.queued = rec.send = time.perf_counter()
    try:
        async with asyncio.timeout(cfg.request_timeout_s):
            done = await _stream(client, cfg, model, rec, text, max_tokens or cfg.max_tokens)
        records.finish(rec, done, counter)
    except core_errors.StreamError as exc:
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


class _Get:
    """`specdec.bench.onhost.http.Http.get` over httpx, for the measurement core's server probe."""

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self.client, self.base_url = client, base_url

    async def get(self, path: str, timeout: float = 30.0) -> tuple[int, dict[str, str], str]:
        try:
            r = await self.client.get(self.base_url + path, timeout=timeout)
        except httpx.HTTPError as exc:  # as the core's own transport reports it
            raise ConnectionError(f"{type(exc).__name__}: {_one_line(exc)}") from None
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.text


async def probe_server(client: httpx.AsyncClient, base_url: str) -> ServerInfo:
    """Check the server speaks OpenAI (GET /v1/models) and find out what it is."""
    try:
        info, ids = await core_probe.probe_server(_Get(client, base_url), base_url)
    except core_errors.BenchError as exc:
        raise BenchError(str(exc)) from None
    return ServerInfo(info["kind"], info["metrics"], info["version"], tuple(ids))


class SpecProbe:
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
