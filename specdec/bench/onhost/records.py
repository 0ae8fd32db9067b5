"""One request: its record (`Rec`), the SSE events that fill it, and the request itself over
`http.Http` (the control node's client sends over httpx, `specdec.bench.transport`, and feeds the
same events to the same records).

Definitions (as the control node's client): ``t_send`` is when the request is on the wire (the
socket send of the request completed: asyncio's write buffer limit is 0, so ``drain()`` returns
only then); TTFT = first content chunk − t_send; E2EL = last content chunk − t_send; N =
``usage.completion_tokens`` (without usage: the chunk count, marked *estimated*; no tokenizer
here); TPOT = (E2EL − TTFT)/(N − 1). Connections are kept alive and reused, as httpx's pool
reuses them (`http.Http`).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time

from .errors import BenchError, StreamError, _one_line

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class Rec:
    def __init__(self, index, prompt):
        self.index, self.prompt = index, prompt  # prompt: {"id", "category", "prompt"}
        self.send = self.queued = 0.0
        self.first = self.last = self.end = None
        self.tokens, self.usage_seen, self.exact, self.chunks = 0, False, True, 0
        self.prompt_tokens = self.cached_tokens = self.finish_reason = None
        self.tokens_source, self.times, self.cums = "usage", [], []
        self.text = []  # type: list[str]  # counted by a tokenizer when there is no usage
        self.error = self.error_kind = None

    ok = property(lambda self: self.error is None)
    ttft_ms = property(lambda self: None if self.first is None
                       else (self.first - self.send) * 1000)
    e2el_ms = property(lambda self: None if self.last is None
                       else (self.last - self.send) * 1000)

    @property
    def tpot_ms(self):
        if self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) * 1000 / (self.tokens - 1)

    def cum_at(self, t):
        if not self.ok or self.first is None or self.last is None or t < self.first:
            return 0.0
        if t >= self.last:
            return float(self.tokens)
        if self.exact and self.cums:
            i = bisect.bisect_right(self.times, t) - 1
            return float(self.cums[i]) if i >= 0 else 0.0
        span = self.last - self.first
        return 1.0 + (self.tokens - 1) * (t - self.first) / span if span > 0 else 1.0

    def chunk_sizes(self):
        if not self.ok or not self.exact or len(self.cums) < 2:
            return None
        return [b - a for a, b in zip(self.cums, self.cums[1:])]

    def record(self, t0):
        gaps, sizes = self.chunks - 1, self.chunk_sizes()
        sd = hist = None
        if sizes and len(sizes) >= 2:
            m = sum(sizes) / len(sizes)
            sd = (sum((x - m) ** 2 for x in sizes) / (len(sizes) - 1)) ** 0.5
        if sizes is not None:
            hist = [0] * (max(sizes, default=0) + 1)
            for s in sizes:
                if s >= 0:
                    hist[s] += 1
        return {"index": self.index, "prompt_id": self.prompt["id"],
                "category": self.prompt["category"], "start_s": round(self.send - t0, 6),
                "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2el_ms": self.e2el_ms,
                "output_tokens": self.tokens if self.ok else None,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "chunks": self.chunks, "tokens_source": self.tokens_source if self.ok else None,
                "client_queue_ms": round((self.send - self.queued) * 1000, 3),
                "tokens_per_chunk": (self.tokens - 1) / gaps if self.ok and gaps > 0 else None,
                "chunk_tokens_sd": sd, "chunk_hist": hist, "finish_reason": self.finish_reason,
                "error": self.error, "error_kind": self.error_kind}


def parse_sse_line(line):
    line = line.strip()
    if not line or line.startswith(":") or line.startswith(("event:", "id:", "retry:")):
        return None
    if not line.startswith("data:"):
        raise BenchError(f"malformed SSE line: {line[:60]!r}")
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        ev = json.loads(data)
    except ValueError:
        ev = None
    if not isinstance(ev, dict):
        raise BenchError(f"malformed SSE data: {data[:60]!r}")
    if "error" in ev:
        err = ev["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise BenchError(f"server error in stream: {str(msg).splitlines()[0][:100]}")
    return ev


def _body(cfg, model, text, max_tokens):
    body = {"model": model}
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    body.update({"max_tokens": max_tokens, "temperature": 0, "top_p": 1, "stream": True})
    body["stream_options"] = {"include_usage": True}
    if cfg.continuous_usage:
        body["stream_options"]["continuous_usage_stats"] = True
    if cfg.fixed_length:
        body["ignore_eos"], body["min_tokens"] = True, max_tokens
    return body


def _content(ev, endpoint):
    choices = ev.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, None
    ch = choices[0]
    if not isinstance(ch, dict):
        raise StreamError("malformed_sse", "malformed SSE data: choices[0] is not an object")
    reason = ch.get("finish_reason")
    if endpoint == "chat":
        delta = ch.get("delta") or {}
        if not isinstance(delta, dict):
            raise StreamError("malformed_sse", "malformed SSE data: delta is not an object")
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    else:
        text = ch.get("text")
    return (text if isinstance(text, str) and text else None,
            reason if isinstance(reason, str) else None)


def _event(rec, ev, endpoint, now):
    usage, cum = ev.get("usage"), None
    if isinstance(usage, dict):
        ct = usage.get("completion_tokens")
        if isinstance(ct, int) and not isinstance(ct, bool):
            cum = rec.tokens = ct
            rec.usage_seen = True
        if isinstance(usage.get("prompt_tokens"), int):
            rec.prompt_tokens = usage["prompt_tokens"]
        det = usage.get("prompt_tokens_details")
        if isinstance(det, dict) and isinstance(det.get("cached_tokens"), int):
            rec.cached_tokens = det["cached_tokens"]
    content, reason = _content(ev, endpoint)
    if reason:
        rec.finish_reason = reason
    if content is None:
        return
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


def http_error(status, raw):
    """A non-200 answer to a request: its error message, as `StreamError`."""
    text = raw.decode("utf-8", "replace")
    try:
        err = json.loads(text)
        msg = err.get("error", err)
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
    except (ValueError, AttributeError):
        msg = text
    return StreamError("http_5xx" if status >= 500 else "http_4xx",
                       f"HTTP {status}: {_one_line(Exception(str(msg)))[:120]}")


async def _stream(http, cfg, model, rec, text, max_tokens):
    reader, writer, status, headers, rec.send = await http.request(
        "POST", ENDPOINTS[cfg.endpoint], _body(cfg, model, text, max_tokens))
    done = False
    try:
        if status != 200:
            raise http_error(status, b"".join([d async for d in http.body(reader, headers)]))
        buf = b""
        async for data in http.body(reader, headers):
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw_line in lines:
                line = raw_line.decode("utf-8", "replace")
                if line.strip() == "data: [DONE]":
                    done = True
                    continue
                try:
                    ev = parse_sse_line(line)
                except BenchError as exc:
                    kind = "stream_error" if "server error" in str(exc) else "malformed_sse"
                    raise StreamError(kind, str(exc)) from None
                if ev is not None:
                    _event(rec, ev, cfg.endpoint, time.perf_counter())
    except BaseException:
        writer.close()  # a cancelled filler: the server sees the disconnect and aborts
        raise
    http.release(reader, writer, headers)
    return done


def finish(rec, done, counter=None):
    """The stream ended (``done``: ``[DONE]`` seen): check it and settle the token count.
    Without usage: the text counted by ``counter`` (the control node's tokenizer), else the
    chunk count, marked *estimated* (beside the engine there is no tokenizer)."""
    rec.end = time.perf_counter()
    if rec.first is None:
        raise StreamError("empty", "stream ended without any token")
    if not done and rec.finish_reason is None:
        raise StreamError("connection", "connection closed before the stream finished "
                                        "(no [DONE], no finish_reason)")
    if not rec.usage_seen:  # chunk times stay; their cumulative counts were guesses
        rec.tokens, rec.tokens_source = ((counter("".join(rec.text)), "tokenizer") if counter
                                         else (rec.chunks, "estimated"))
        rec.exact = False


async def request(http, cfg, model, rec, text, max_tokens):
    rec.queued = rec.send = time.perf_counter()
    try:
        finish(rec, await asyncio.wait_for(_stream(http, cfg, model, rec, text, max_tokens),
                                           cfg.request_timeout_s))
    except StreamError as exc:
        rec.error, rec.error_kind = str(exc), exc.kind
    except asyncio.TimeoutError:
        rec.error, rec.error_kind = f"timed out after {cfg.request_timeout_s:g} s", "timeout"
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        rec.error = f"connection lost: {type(exc).__name__}: {_one_line(exc)}"
        rec.error_kind = "connection"
    if rec.end is None:
        rec.end = time.perf_counter()
