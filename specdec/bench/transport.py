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
import time
from collections.abc import Callable
from typing import Any

import httpx

from specdec.bench.config import ENDPOINTS, BenchConfig, ServerInfo
from specdec.bench.metrics import Counters
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
    """The measurement core's `SpecProbe` (`specdec.bench.onhost.probe`) over httpx: the
    server's speculation counters before and after one level, its errors the control node's."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, server: ServerInfo,
                 poll_s: float, previous: Counters | None = None) -> None:
        self._core = core_probe.SpecProbe(_Get(client, base_url), server.metrics, poll_s,
                                          previous)

    @property
    def after(self) -> Counters | None:
        """The level's final snapshot (vLLM): the next level's ``previous``."""
        after: Counters | None = self._core.after
        return after

    async def start(self) -> None:
        try:
            await self._core.start()
        except core_errors.BenchError as exc:
            raise BenchError(str(exc)) from None

    async def stop(self) -> tuple[dict[str, Any] | None, Counters]:
        """Acceptance figures for the level and the level's counter delta."""
        try:
            result: tuple[dict[str, Any] | None, Counters] = await self._core.stop()
        except core_errors.BenchError as exc:
            raise BenchError(str(exc)) from None
        return result

    def check(self) -> None:
        """Re-raise a poller failure (e.g. counters went backwards) during the level."""
        try:
            self._core.check()
        except core_errors.BenchError as exc:
            raise BenchError(str(exc)) from None
