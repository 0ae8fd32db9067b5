#!/usr/bin/env python3
"""`specdec bench` beside the engine: one stdlib-only file the deploy uploads to a host.

    python3 onhost.py http://127.0.0.1:8000 --model M --prompts prompts.json --json -

It measures what the control node's client (`specdec.bench.client`, httpx) measures, with the
same definitions, prompts, levels, fillers and ramp, and writes the same JSON (schema 1), so the
gate cannot tell them apart; only the network between client and engine is gone (loopback).
Python 3.8+, nothing outside the standard library, no import from the specdec package: a
Jetson's or Spark's python3 (or the engine image's) runs it as uploaded. The prompt set travels
beside it as JSON (``--prompts``, written from the package's ``prompts.yaml``).

This file is also the measurement core of the control node's client, which imports it: records
and their JSON (`Rec`), SSE events (`parse_sse_line`, `_event`, `finish`), a level's figures and
checks (`level_result`, `check_level`), statistics (`summarize`, also `specdec.bench.stats`'s).
So those are defined once; only transport (httpx there, asyncio streams here) differs.

Definitions (as the control node's client): ``t_send`` is when the request is on the wire (the
socket send of the request completed: asyncio's write buffer limit is 0, so ``drain()`` returns
only then); TTFT = first content chunk − t_send; E2EL = last content chunk − t_send; N =
``usage.completion_tokens`` (without usage: the chunk count, marked *estimated*; no tokenizer
here); TPOT = (E2EL − TTFT)/(N − 1). Each request has its own connection (``Connection:
close``). ``--json -`` prints one line ``SPECDEC-BENCH-RESULT <json>`` on stdout; a failure is
one line ``specdec-bench: error: …`` on stderr and exit 1 (2: bad arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import re
import sys
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit

SCHEMA = 1
MARKER = "SPECDEC-BENCH-RESULT "
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
RESTARTED = "server counters went backwards between scrapes (the server restarted during the run)"
RATE_KEYS = ("request_throughput", "output_throughput", "steady_output_throughput",
             "throughput_tok_s")


class BenchError(Exception):
    pass


class ConfigError(BenchError):
    pass


class StreamError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _one_line(exc):
    s = str(exc).strip()
    return (s.splitlines()[0] if s else type(exc).__name__)[:160]


# -- statistics (as specdec.bench.stats: numpy's linear percentile, population std) ----------
def percentile(values, q):
    if not values:
        return float("nan")
    xs = sorted(float(v) for v in values)
    pos = (len(xs) - 1) * min(max(q, 0.0), 100.0) / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values):
    n = len(values)
    if n == 0:
        return {"mean": None, "median": None, "std": None, "p90": None, "p99": None,
                "min": None, "max": None, "n": 0}
    xs = [float(v) for v in values]
    mean = math.fsum(xs) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / n)
    return {"mean": mean, "median": percentile(xs, 50), "std": std, "p90": percentile(xs, 90),
            "p99": percentile(xs, 99), "min": min(xs), "max": max(xs), "n": n}


# -- HTTP/1.1 over asyncio streams -------------------------------------------------------------
class Http:
    """Keep-alive connections reused as httpx's pool reuses them (a burst of new connections
    would meet a small listen backlog); a reused connection the server closed meanwhile is
    replaced once, as httpx does."""

    def __init__(self, base, connect_timeout):
        parts = urlsplit(base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = parts.scheme == "https"
        self.netloc = parts.netloc
        self.connect_timeout = connect_timeout
        self.idle = []

    async def _connect(self, fresh):
        while self.idle and not fresh:
            reader, writer = self.idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl or None),
            self.connect_timeout)
        writer.transport.set_write_buffer_limits(0)  # drain() = handed to the socket
        return reader, writer, False

    async def request(self, method, path, body=None):
        """Send the request, read the head: (reader, writer, status, headers, t_on_wire)."""
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.netloc}\r\n"
                "User-Agent: specdec-bench\r\nAccept: */*\r\n")
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        for attempt in (0, 1):
            reader, writer, reused = await self._connect(fresh=attempt == 1)
            try:
                writer.write(head.encode() + b"\r\n" + data)
                await writer.drain()
                sent = time.perf_counter()
                status, headers = await self.head(reader)
                return reader, writer, status, headers, sent
            except (OSError, StreamError, asyncio.IncompleteReadError):
                writer.close()
                if not reused:
                    raise
        raise StreamError("connection", "unreachable")

    def release(self, reader, writer, headers):
        if headers.get("connection", "").lower() == "close" or reader.at_eof():
            writer.close()
        else:
            self.idle.append((reader, writer))

    def close(self):
        for _, writer in self.idle:
            writer.close()
        self.idle = []

    @staticmethod
    async def head(reader):
        line = await reader.readline()
        m = re.match(rb"HTTP/1\.[01] (\d{3})", line)
        if not m:
            raise StreamError("connection", f"not an HTTP response: {line[:40]!r}")
        headers = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(m.group(1)), headers

    @staticmethod
    async def body(reader, headers):
        """The body in pieces as they arrive (chunked, sized or until close)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = await reader.readexactly(size)
                await reader.readexactly(2)
                yield data
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left > 0:
                data = await reader.read(min(left, 65536))
                if not data:
                    raise StreamError("connection", "connection closed mid-body")
                left -= len(data)
                yield data
        else:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                yield data

    async def get(self, path, timeout=30.0):
        async def go():
            reader, writer, status, headers, _ = await self.request("GET", path)
            try:
                parts = [d async for d in self.body(reader, headers)]
            except BaseException:
                writer.close()
                raise
            self.release(reader, writer, headers)
            return status, headers, b"".join(parts).decode("utf-8", "replace")
        return await asyncio.wait_for(go(), timeout)


# -- speculation counters ----------------------------------------------------------------------
# Stdlib twins of specdec.bench.metrics, which parses Prometheus text with prometheus_client (not
# on a host) and types its counters; tests/unit/test_onhost.py checks that both agree.
class Counters:
    def __init__(self, present=False, drafts=0.0, draft_tokens=0.0, accepted=0.0, per_pos=None,
                 no_pos=False):
        self.present, self.drafts, self.draft_tokens, self.accepted = (present, drafts,
                                                                        draft_tokens, accepted)
        self.per_pos = None if no_pos else (per_pos if per_pos is not None else {})


_PROM = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_vllm(text):
    out, per_pos = Counters(), {}  # type: Counters, dict[int, float]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if m is None or value is None:
            raise BenchError(f"/metrics: malformed Prometheus text: {line[:100]}")
        name = m.group(1)
        if not name.startswith("vllm:spec_decode_") or not name.endswith("_total"):
            continue
        key = name[len("vllm:spec_decode_"):-len("_total")]
        if key == "num_drafts":
            out.drafts += value
        elif key == "num_draft_tokens":
            out.draft_tokens += value
        elif key == "num_accepted_tokens":
            out.accepted += value
        elif key == "num_accepted_tokens_per_pos":
            labels = dict(_LABEL.findall(m.group(2) or ""))
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                raise BenchError(f"/metrics: {name} has a bad position label "
                                 f"{labels.get('position')!r}") from None
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        else:
            continue
        out.present = True
    out.per_pos = per_pos
    return out


def trtllm_entries(payload):
    if not isinstance(payload, list):
        raise BenchError("/metrics: TRT-LLM iteration stats must be a JSON list")
    out = []
    for it in payload:
        if isinstance(it, str):
            try:
                it = json.loads(it)
            except ValueError:
                raise BenchError(f"/metrics: malformed iteration stats entry {it[:60]!r}") \
                    from None
        if not isinstance(it, dict):
            raise BenchError(f"/metrics: iteration stats entry is not an object: {it!r:.60}")
        out.append(it)
    return out


def _num(d, key):
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BenchError(f"/metrics: specDecodingStats.{key} is not a number: {v!r}")
    return float(v)


class TrtllmAccumulator:
    def __init__(self):
        self.seen, self.max_iter, self.counters = set(), -1.0, Counters(no_pos=True)

    @staticmethod
    def _key(it):
        if "iter" in it:
            return ("iter", it.get("iter"), it.get("timestamp"))
        return ("raw", json.dumps(it, sort_keys=True, default=str))

    def add(self, entries, prime=False):
        for it in entries:
            key = self._key(it)
            if key in self.seen:
                continue
            n = it.get("iter")
            if isinstance(n, (int, float)) and not isinstance(n, bool):
                if float(n) < self.max_iter and not prime:
                    raise BenchError(RESTARTED)
                self.max_iter = max(self.max_iter, float(n))
            self.seen.add(key)
            sd = it.get("specDecodingStats")
            if isinstance(sd, dict):
                self.counters.present = True
                if not prime:
                    self.counters.drafts += _num(sd, "numRequestsWithDraftTokens")
                    self.counters.draft_tokens += _num(sd, "numDraftTokens")
                    self.counters.accepted += _num(sd, "numAcceptedTokens")


def spec_delta(before, after):
    if not (before.present or after.present):
        return None
    d_drafts, d_tokens = after.drafts - before.drafts, after.draft_tokens - before.draft_tokens
    d_acc = after.accepted - before.accepted
    if d_drafts < 0 or d_tokens < 0 or d_acc < 0:
        raise BenchError(RESTARTED)
    per_pos = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        deltas = {p: v - prev.get(p, 0.0) for p, v in after.per_pos.items()}
        if any(v < 0 for v in deltas.values()) or any(p not in after.per_pos for p in prev):
            raise BenchError(RESTARTED)
        per_pos = ([deltas[p] / d_drafts for p in sorted(deltas)] if d_drafts > 0
                   else [0.0 for _ in deltas])
    al = 1.0 + d_acc / d_drafts if d_drafts > 0 else None
    rate = d_acc / d_tokens if d_tokens > 0 else None
    return {"num_drafts": int(d_drafts), "draft_tokens": int(d_tokens),
            "accepted_tokens": int(d_acc), "acceptance_length": al, "acceptance_rate": rate,
            "per_position_acceptance_rates": per_pos, "spec_decode_acceptance_length": al,
            "spec_decode_acceptance_rate": None if rate is None else 100.0 * rate}


def diff_counters(before, after):
    pp = None
    if after.per_pos is not None:
        prev = before.per_pos or {}
        pp = {k: v - prev.get(k, 0.0) for k, v in after.per_pos.items()}
    return Counters(before.present or after.present, after.drafts - before.drafts,
                    after.draft_tokens - before.draft_tokens, after.accepted - before.accepted,
                    pp, no_pos=pp is None)


def add_counters(a, b):
    pp = None
    if a.per_pos is not None and b.per_pos is not None:
        pp = dict(a.per_pos)
        for k, v in b.per_pos.items():
            pp[k] = pp.get(k, 0.0) + v
    return Counters(a.present or b.present, a.drafts + b.drafts, a.draft_tokens + b.draft_tokens,
                    a.accepted + b.accepted, pp, no_pos=pp is None)


# -- one request --------------------------------------------------------------------------------
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


# -- server probing and speculation counters ----------------------------------------------------
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
            return spec_delta(self.before, self.after), diff_counters(self.before, self.after)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            await self._trt()
            c = self.acc.counters
            return spec_delta(Counters(present=c.present, no_pos=True), c), c
        return None, Counters()

    def check(self):
        if self.task is not None and self.task.done() and not self.task.cancelled():
            exc = self.task.exception()
            if exc is not None:
                raise exc


# -- levels ---------------------------------------------------------------------------------------
async def run_requests(http, cfg, model, prompts, conc, tag, check=None, fillers=None, ramp=0,
                       max_tokens=None, send=None, done=None):
    """``conc`` workers; fillers keep ``conc`` requests in flight until the last measured one
    ends (then cancelled); ``ramp``: one unmeasured request of that many tokens per worker
    first. ``send`` (default `request`) is the transport; ``done(rec)`` follows each measured
    request (the control node's client passes both)."""
    max_tokens = max_tokens or cfg.max_tokens
    request_ = send or request
    recs = [Rec(i, p) for i, p in enumerate(prompts)]
    state = {"next": 0, "finished": 0, "fill": 0}
    all_done = asyncio.Event()
    ramps = fillers or prompts

    def text(label, p):
        return f"[{label}] {p['prompt']}" if cfg.unique_prefix else p["prompt"]

    async def filler():
        i = state["fill"]
        state["fill"] += 1
        p = fillers[i % len(fillers)]
        await request_(http, cfg, model, Rec(-1, p), text(f"{tag} fill #{i}", p), max_tokens)

    async def worker(w):
        if ramp:
            p = ramps[w % len(ramps)]
            await request_(http, cfg, model, Rec(-1, p), text(f"{tag} ramp #{w}", p), ramp)
        while state["next"] < len(recs):
            rec = recs[state["next"]]
            state["next"] += 1
            await request_(http, cfg, model, rec, text(f"{tag} #{rec.index}", rec.prompt),
                           max_tokens)
            state["finished"] += 1
            if done is not None:
                done(rec)
            if check is not None:
                check()
        if state["finished"] == len(recs):
            all_done.set()
        while fillers and not all_done.is_set():
            task = asyncio.ensure_future(filler())
            waiter = asyncio.ensure_future(all_done.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()  # closes the connection: the server aborts the request
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            waiter.cancel()

    await asyncio.gather(*(worker(w) for w in range(min(conc, len(recs)))))
    return recs


def _steady(recs, conc):
    if conc > 1 and len(recs) <= conc:
        return None
    firsts = [r.first for r in recs[:conc] if r.first is not None]
    if not firsts:
        return None
    w0, last_send = max(firsts), max(r.send for r in recs)
    ends = [r.end for r in recs if r.end is not None and r.end >= last_send]
    if not ends:
        return None
    w1 = min(ends) if conc > 1 else max(ends)
    return (w0, w1) if w1 > w0 else None


def _stats_keys(out, metric, values):
    s = summarize(values)
    for key, stat in (("mean", "mean"), ("median", "median"), ("std", "std"), ("p90", "p90"),
                      ("p99", "p99")):
        out[f"{key}_{metric}_ms"] = s[stat]
    out[f"n_{metric}"] = s["n"]


def level_result(cfg, recs, conc):
    ok = [r for r in recs if r.ok]
    errors = {}  # type: dict[str, int]
    for r in recs:
        if r.error_kind:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    t0 = min(r.send for r in recs)
    duration = max((r.end or r.send) for r in recs) - t0
    tokens = sum(r.tokens for r in ok)
    lvl = {"concurrency": conc, "num_requests": len(recs), "completed": len(ok),
           "failed": len(recs) - len(ok), "errors": errors,
           "first_error": next((r.error for r in recs if r.error), None), "duration": duration,
           "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok),
           "total_output_tokens": tokens,
           "request_throughput": len(ok) / duration if duration > 0 else None,
           "output_throughput": tokens / duration if duration > 0 else None}
    win = _steady(recs, conc)
    lvl["steady_output_throughput"] = lvl["steady_window"] = None
    if win is not None:
        w0, w1 = win
        wt = sum(r.cum_at(w1) - r.cum_at(w0) for r in ok)
        lvl["steady_output_throughput"] = wt / (w1 - w0)
        lvl["steady_window"] = {"start_s": w0 - t0, "end_s": w1 - t0, "tokens": wt,
                                "exact_token_times": all(r.exact for r in ok)}
    _stats_keys(lvl, "ttft", [r.ttft_ms for r in ok if r.ttft_ms is not None])
    _stats_keys(lvl, "tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None])
    _stats_keys(lvl, "itl", [(b - a) * 1000 for r in ok for a, b in zip(r.times, r.times[1:])])
    _stats_keys(lvl, "e2el", [r.e2el_ms for r in ok if r.e2el_ms is not None])
    tpc = [(r.tokens - 1) / (r.chunks - 1) for r in ok if r.chunks > 1]
    lvl["mean_tokens_per_chunk"] = sum(tpc) / len(tpc) if tpc else None
    lvl["tpot_ms_p50"], lvl["ttft_ms_p50"] = lvl["median_tpot_ms"], lvl["median_ttft_ms"]
    lvl["e2el_ms_p50"], lvl["throughput_tok_s"] = lvl["median_e2el_ms"], lvl["output_throughput"]
    lvl["length_mismatches"] = sum(1 for r in ok if r.tokens != cfg.max_tokens)
    lvl["usage_missing"] = sum(1 for r in ok if not r.usage_seen)
    lvl["tokens_counted"] = sum(1 for r in ok if r.tokens_source == "tokenizer")
    lvl["tokens_estimated"] = sum(1 for r in ok if r.tokens_source == "estimated")
    cats = {}  # type: dict[str, list[Rec]]
    for r in ok:
        cats.setdefault(r.prompt["category"], []).append(r)
    lvl["per_category"] = {}
    for c, rs in sorted(cats.items()):
        ch = [(r.tokens - 1) / (r.chunks - 1) for r in rs if r.chunks > 1]
        lvl["per_category"][c] = {
            "completed": len(rs),
            "tpot_ms_p50": summarize([r.tpot_ms for r in rs if r.tpot_ms is not None])["median"],
            "mean_tokens_per_chunk": sum(ch) / len(ch) if ch else None}
    lvl["requests"] = [r.record(t0) for r in recs]
    return lvl


def check_level(cfg, lvl, conc, warnings):
    n, failed = lvl["num_requests"], lvl["failed"]
    if failed and failed / n > cfg.max_failed_fraction:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(lvl["errors"].items()))
        raise BenchError(f"concurrency {conc}: {failed}/{n} requests failed ({kinds}; first: "
                         f"{lvl['first_error']}); allowed fraction {cfg.max_failed_fraction:g}")
    if cfg.fixed_length and lvl["length_mismatches"]:
        warnings.append(f"concurrency {conc}: {lvl['length_mismatches']} of {lvl['completed']} "
                        f"responses had completion_tokens != max_tokens={cfg.max_tokens} (the "
                        "server may ignore ignore_eos/min_tokens)")
    if lvl["tokens_counted"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_counted']} responses had no usage; "
                        "their text was counted with the model's tokenizer")
    if lvl["tokens_estimated"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_estimated']} responses had no usage "
                        "and no tokenizer is on this machine: tokens estimated (chunks); the "
                        "gate will not decide on these counts")


# -- the run --------------------------------------------------------------------------------------
CONFIG_FIELDS = ("url", "model", "concurrency", "requests", "max_tokens", "warmup",
                 "warmup_max_tokens", "prompt_offset", "endpoint", "fixed_length",
                 "continuous_usage", "unique_prefix", "request_timeout_s", "connect_timeout_s",
                 "max_failed_fraction", "progress", "trtllm_poll_s", "tokenizer", "fill",
                 "ramp_tokens", "prompt_ids")


def choose(measured_set, source, prompt_ids, counts):
    """``--prompt-ids``: per level, exactly these measured prompts (``counts`` follows)."""
    by_id = {p["id"]: p for p in measured_set}
    chosen = {}
    for conc, ids in prompt_ids:
        missing = [i for i in ids if i not in by_id]
        if missing or conc not in counts:
            raise ConfigError(f"--prompt-ids {conc}={','.join(ids)}: "
                              + (f"no measured prompt {missing[0]!r} in {source}"
                                 if missing else f"{conc} is not a --concurrency level"))
        chosen[conc] = [by_id[i] for i in ids]
        counts[conc] = len(ids)
    return chosen


async def run_bench(cfg, pset):
    measured_set = pset["measured"]
    counts = {c: (cfg.requests[i] if cfg.requests else len(measured_set))
              for i, c in enumerate(cfg.concurrency)}
    offsets = dict(zip(cfg.concurrency, cfg.prompt_offset))
    chosen = choose(measured_set, pset["source"], cfg.prompt_ids, counts)
    warm = [pset["warmup"][i % len(pset["warmup"])] for i in range(cfg.warmup)]
    started = datetime.now(timezone.utc).isoformat()
    base = cfg.url.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    http = Http(base, cfg.connect_timeout_s)
    try:
        return await _run(cfg, pset, http, (base, started, counts, offsets, chosen, warm))
    finally:
        http.close()


async def _run(cfg, pset, http, plan):
    base, started, counts, offsets, chosen, warm = plan
    measured_set = pset["measured"]
    server, served = await probe_server(http, base)
    model = cfg.model
    if model is None:
        if len(served) != 1:
            raise BenchError(f"{base} serves {len(served)} models ({', '.join(served) or 'none'}"
                             "); pick one with --model")
        model = served[0]
    elif model not in served:
        raise BenchError(f"--model {model!r} is not served at {base} (served: "
                         f"{', '.join(served) or 'none'})")
    warm_failed, warnings, levels = 0, [], {}  # type: int, list[str], dict[str, dict]
    if warm:
        wrecs = await run_requests(http, cfg, model, warm, max(cfg.concurrency), "warmup",
                                   max_tokens=max(2, min(cfg.max_tokens, cfg.warmup_max_tokens)))
        bad = [r for r in wrecs if not r.ok]
        warm_failed = len(bad)
        if len(bad) == len(wrecs):
            raise BenchError(f"warmup: all {len(wrecs)} requests failed ({bad[0].error_kind}: "
                             f"{bad[0].error})")
    total, any_spec, last = Counters(), False, None
    for conc in cfg.concurrency:
        n, off = counts[conc], offsets[conc]
        prompts = chosen.get(conc) or [measured_set[(off + i) % len(measured_set)]
                                       for i in range(n)]
        fill = [measured_set[(off + n + i) % len(measured_set)] for i in range(conc)]
        probe = SpecProbe(http, server["metrics"], cfg.trtllm_poll_s, last)
        await probe.start()
        recs = await run_requests(http, cfg, model, prompts, conc,
                                  f"c{conc}" + (f" o{off}" if off else ""), probe.check,
                                  fill if conc > 1 and cfg.fill else None,
                                  cfg.ramp_tokens if conc > 1 else 0)
        fig, delta = await probe.stop()
        last = probe.after
        lvl = level_result(cfg, recs, conc)
        lvl["spec_decode"] = fig
        check_level(cfg, lvl, conc, warnings)
        if fig is not None:
            any_spec, total = True, add_counters(total, delta)
        levels[str(conc)] = lvl
    spec = spec_delta(Counters(present=True, no_pos=total.per_pos is None), total) \
        if any_spec else None
    conf = {k: getattr(cfg, k) for k in CONFIG_FIELDS}
    conf.update(concurrency=list(cfg.concurrency), requests=[counts[c] for c in cfg.concurrency],
                prompt_offset=list(cfg.prompt_offset),
                prompt_ids={str(c): [p["id"] for p in ps] for c, ps in chosen.items()})
    cats = {}  # type: dict[str, int]
    for p in measured_set:
        cats[p["category"]] = cats.get(p["category"], 0) + 1
    return {
        "schema": SCHEMA, "tool": "specdec bench", "url": cfg.url, "model": model,
        "endpoint": cfg.endpoint, "server": server, "started_at": started,
        "finished_at": datetime.now(timezone.utc).isoformat(), "config": conf,
        "prompts": {"source": pset["source"], "measured": len(measured_set), "categories": cats},
        "warmup": {"requests": len(warm), "failed": warm_failed}, "concurrency": levels,
        "spec_decode": spec,
        "tokens": {"tokenizer": cfg.tokenizer or model, "tokenizer_found": False,
                   "estimated": sum(lv["tokens_estimated"] for lv in levels.values()),
                   "counted": 0},
        "warnings": warnings,
    }


# -- device time (as specdec.bench.device_time) ---------------------------------------------------
def _convert(value, scale):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if k.endswith("_ms") or "_ms_" in k or k in ("duration", "start_s", "end_s"):
                    v = v / scale
                elif k in RATE_KEYS:
                    v = v * scale
            else:
                v = _convert(v, scale)
            out[k] = v
        return out
    if isinstance(value, list):
        return [_convert(v, scale) for v in value]
    return value


def to_device_time(result, scale):
    out = _convert(result, scale)
    out["device_time"] = {"emulated": True, "time_scale": scale,
                          "note": "emulated engine: durations / time_scale and rates x "
                                  "time_scale, i.e. what the device would show"}
    return out


async def time_scale(url):
    """The lab emulator's time scale (``GET /lab/truth``), None for a real engine."""
    try:
        status, _, body = await Http(url.rstrip("/"), 5.0).get("/lab/truth", 5.0)
        doc = json.loads(body) if status == 200 else None
    except (OSError, asyncio.TimeoutError, StreamError, ValueError):
        return None
    scale = doc.get("time_scale") if isinstance(doc, dict) else None
    if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0:
        return float(scale)
    return None


def finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


# -- command line ---------------------------------------------------------------------------------
def _ints(text, flag, levels=None):
    try:
        vals = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"{flag}: not an integer or a comma-separated list: {text!r}") \
            from None
    if levels is not None and len(vals) == 1:
        vals = vals * len(levels)
    if levels is not None and len(vals) != len(levels):
        raise ConfigError(f"{flag}: {len(vals)} values for {len(levels)} concurrency levels "
                          f"({text!r})")
    return vals


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="specdec-bench", description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--model")
    ap.add_argument("--prompts", required=True, help="the prompt set as JSON")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--requests", default=None)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--prompt-offset", default="0")
    ap.add_argument("--prompt-ids", action="append", default=None, metavar="LEVEL=ID,ID")
    ap.add_argument("--ramp-tokens", type=int, default=0)
    ap.add_argument("--no-fill", action="store_true")
    ap.add_argument("--endpoint", choices=sorted(ENDPOINTS), default="chat")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--max-failed", type=float, default=0.05)
    ap.add_argument("--no-fixed-length", action="store_true")
    ap.add_argument("--no-continuous-usage", action="store_true")
    ap.add_argument("--tokenizer", default=None, help="recorded only (no tokenizer here)")
    ap.add_argument("--no-progress", action="store_true", help="accepted; there is none")
    ap.add_argument("--wall-time", action="store_true")
    ap.add_argument("--deadline", type=float, default=None, help="give up after this many s")
    ap.add_argument("--json", default="-", help="output file, - for stdout (default)")
    a = ap.parse_args(argv)
    parts = urlsplit(a.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"url: expected http(s)://host:port, got {a.url!r}")
    a.concurrency = _ints(a.concurrency, "--concurrency")
    if min(a.concurrency) < 1:
        raise ConfigError(f"--concurrency: levels must be >= 1, got {a.concurrency}")
    a.requests = _ints(a.requests, "--requests", a.concurrency) if a.requests else None
    a.prompt_offset = _ints(a.prompt_offset, "--prompt-offset", a.concurrency)
    ids = []
    for item in a.prompt_ids or []:
        level, sep, rest = item.partition("=")
        if not sep or not level.strip().isdigit() or int(level) < 1 or not rest.strip():
            raise ConfigError(f"--prompt-ids: expected LEVEL=ID,ID,..., got {item!r}")
        ids.append((int(level), tuple(i for i in rest.split(",") if i)))
    a.prompt_ids = tuple(ids)
    for flag, bad in (("--requests", a.requests and min(a.requests) < 1),
                      ("--max-tokens", a.max_tokens < 2), ("--warmup", a.warmup < 0),
                      ("--prompt-offset", min(a.prompt_offset) < 0),
                      ("--ramp-tokens", a.ramp_tokens < 0 or a.ramp_tokens == 1),
                      ("--max-failed", not 0.0 <= a.max_failed < 1.0),
                      ("--timeout", a.timeout <= 0)):
        if bad:
            raise ConfigError(f"{flag}: out of range")
    a.fill, a.fixed_length = not a.no_fill, not a.no_fixed_length
    a.continuous_usage, a.unique_prefix, a.progress = not a.no_continuous_usage, True, False
    a.request_timeout_s, a.max_failed_fraction = a.timeout, a.max_failed
    a.connect_timeout_s, a.trtllm_poll_s, a.warmup_max_tokens = 10.0, 0.5, 16
    return a


def load_prompts(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
        ok = all(isinstance(p, dict) and {"id", "category", "prompt"} <= set(p)
                 for p in doc["measured"] + doc["warmup"]) and doc["measured"] and doc["warmup"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--prompts {path}: cannot read the prompt set: {_one_line(exc)}") \
            from None
    if not ok:
        raise ConfigError(f"--prompts {path}: not a prompt set (measured, warmup: id, "
                          "category, prompt)")
    doc.setdefault("source", path)
    return doc


async def _main(a):
    try:
        res = await asyncio.wait_for(run_bench(a, load_prompts(a.prompts)), a.deadline)
    except asyncio.TimeoutError:
        raise BenchError(f"no result within {a.deadline:.0f}s (engine hung?)") from None
    scale = None if a.wall_time else await time_scale(a.url)
    return res if scale is None else to_device_time(res, scale)


def main(argv=None):
    try:
        a = parse_args(argv)
        res = asyncio.run(_main(a))
    except ConfigError as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(finite(res), allow_nan=False, separators=(",", ":"))
    if a.json == "-":
        sys.stdout.write(MARKER + text + "\n")
    else:
        with open(a.json, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
