"""What the server is (`probe_server`: OpenAI models, vLLM or TRT-LLM, version) and its
speculation counters before and after a level (`SpecProbe`)."""

from __future__ import annotations

import asyncio
import contextlib
import json

from .counters import (
    Counters,
    TrtllmAccumulator,
    diff_counters,
    parse_vllm,
    spec_delta,
    trtllm_entries,
)
from .errors import BenchError, StreamError, _one_line


async def probe_server(http, base):
    try:
        status, _, text = await http.get("/v1/models")
    except (OSError, asyncio.TimeoutError, StreamError) as exc:
        raise BenchError(f"{base}: cannot connect ({type(exc).__name__}: {_one_line(exc)})") \
            from None
    try:
        ids = tuple(str(m["id"]) for m in json.loads(text)["data"])
    except (ValueError, KeyError, TypeError):
        ids = None
    if status != 200 or ids is None:
        raise BenchError(f"{base}: not an OpenAI-compatible server "
                         f"(GET /v1/models answered HTTP {status} without a model list)")
    kind, metrics, version = "openai", "none", None
    try:
        status, headers, body = await http.get("/metrics")
        if status == 200:
            if "json" in headers.get("content-type", "") or body.lstrip().startswith("["):
                try:
                    trtllm_entries(json.loads(body))
                    kind, metrics = "trtllm", "trtllm-json"
                except (ValueError, BenchError):
                    pass
            elif "vllm:" in body:
                parse_vllm(body)
                kind, metrics = "vllm", "prometheus"
        if kind == "openai" and (await http.get("/health_generate"))[0] == 200:
            kind = "trtllm"
    except (OSError, asyncio.TimeoutError, StreamError):
        pass
    try:
        status, _, body = await http.get("/version")
        vv = json.loads(body).get("version") if status == 200 else None
        version = str(vv) if vv is not None else None
    except (OSError, asyncio.TimeoutError, StreamError, ValueError, AttributeError):
        pass
    return {"kind": kind, "metrics": metrics, "version": version}, ids


class SpecProbe:
    """The server's speculation counters before and after one level."""

    def __init__(self, http, metrics, poll_s, previous):
        self.http, self.metrics, self.poll_s, self.previous = http, metrics, poll_s, previous
        self.acc = TrtllmAccumulator()  # used for TRT-LLM's iteration stats only
        self.task = None  # type: asyncio.Future | None
        self.before, self.after = Counters(), None

    async def _get(self):
        try:
            status, _, text = await self.http.get("/metrics")
        except (OSError, asyncio.TimeoutError, StreamError) as exc:
            raise BenchError(f"GET /metrics failed during the run ({type(exc).__name__}: "
                             f"{_one_line(exc)})") from None
        if status != 200:
            raise BenchError(f"GET /metrics answered HTTP {status} during the run")
        return text

    async def _trt(self, prime=False):
        try:
            payload = json.loads(await self._get())
        except ValueError:
            raise BenchError("/metrics: TRT-LLM iteration stats are not JSON") from None
        self.acc.add(trtllm_entries(payload), prime)

    async def _loop(self):
        while True:
            await asyncio.sleep(self.poll_s)
            await self._trt()

    async def start(self):
        if self.metrics == "prometheus":
            self.before = parse_vllm(await self._get())
            if self.previous is not None:
                spec_delta(self.previous, self.before)  # raises when a counter fell
        elif self.metrics == "trtllm-json":
            await self._trt(prime=True)
            self.task = asyncio.ensure_future(self._loop())

    async def stop(self):
        if self.metrics == "prometheus":
            self.after = parse_vllm(await self._get())
            before, after = self.before, self.after
            return spec_delta(before, after), diff_counters(before, after)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            await self._trt()
            c = self.acc.counters
            return spec_delta(Counters(present=c.present, per_pos=None), c), c
        return None, Counters()

    def check(self):
        if self.task is not None and self.task.done() and not self.task.cancelled():
            exc = self.task.exception()
            if exc is not None:
                raise exc
