"""A tiny OpenAI-compatible server on 127.0.0.1 (a thread in the test process, no extra PIDs).

``mode`` picks the flavour or the fault:

* ``vllm``: Prometheus ``/metrics`` with spec-decode counters; ``vllm-nospec`` without them;
* ``trtllm``: JSON iteration stats on ``/metrics`` (drained on read) and ``/health_generate``;
* ``openai``: no ``/metrics`` at all;
* faults: ``500``, ``errstream`` (error object inside a 200 stream), ``badsse``, ``slow``
  (sleeps before answering), ``drop`` (closes the connection mid-stream), ``backwards``
  (counters reset at the end of the second level), ``notopenai`` (404 everywhere),
  ``short`` (ignores min_tokens: fewer tokens than asked), ``nousage3`` (three tokens per chunk
  and no usage at all, whatever stream_options asks), ``ttft`` (the first token comes
  ``TTFT_S`` after the request was read, then one token per chunk).

Speculation counters: per request of N tokens, d = N // 2 drafts of 3 draft tokens each with
exactly one accepted token at position 0, so acceptance length 2.0, rate 1/3, per position
[1, 0, 0].
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TTFT_S = 0.05


@dataclass
class State:
    mode: str
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    pos0: int = 0
    metrics_calls: int = 0
    iters: list[dict[str, Any]] = field(default_factory=list)
    iter_no: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    key: str | None = None  # when set, every request must carry "Authorization: Bearer <key>"
    unauthorized: int = 0

    def prom(self) -> str:
        lab = 'model_name="m",engine="0"'
        lines = ["# HELP vllm:num_requests_running running",
                 "# TYPE vllm:num_requests_running gauge",
                 f"vllm:num_requests_running{{{lab}}} 0.0"]
        if self.mode == "vllm-nospec":
            return "\n".join(lines) + "\n"
        for name, v in (("num_drafts", self.drafts), ("num_draft_tokens", self.draft_tokens),
                        ("num_accepted_tokens", self.accepted)):
            lines += [f"# TYPE vllm:spec_decode_{name} counter",
                      f"vllm:spec_decode_{name}_total{{{lab}}} {float(v)}",
                      f"vllm:spec_decode_{name}_created{{{lab}}} 1.7e9"]
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
        for p, v in enumerate((self.pos0, 0, 0)):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},'
                         f'position="{p}"}} {float(v)}')
        return "\n".join(lines) + "\n"


def make_handler(st: State) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _denied(self) -> bool:
            if st.key is None or self.headers.get("Authorization") == f"Bearer {st.key}":
                return False
            with st.lock:
                st.unauthorized += 1
            self._send(401, b'{"error": "Unauthorized"}')
            return True

        def do_GET(self) -> None:
            mode = st.mode
            if self._denied():
                return
            if mode == "notopenai":
                self._send(404, b"<html>not found</html>", "text/html")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())
            elif self.path == "/version":
                self._send(200, b'{"version": "0.0-fake"}')
            elif self.path == "/metrics" and mode == "trtllm":
                with st.lock:
                    out, st.iters = st.iters, []
                self._send(200, json.dumps(out).encode())
            elif self.path == "/metrics" and mode != "openai":
                with st.lock:
                    st.metrics_calls += 1
                    if mode == "backwards" and st.metrics_calls == 5:
                        st.drafts = st.draft_tokens = st.accepted = st.pos0 = 0
                    text = st.prom()
                self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/health_generate" and mode == "trtllm":
                self._send(200, b"")
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n))
            if self._denied():
                return
            mode = st.mode
            with st.lock:
                st.bodies.append({"path": self.path, **req})
            if req.get("model") != "m":
                self._send(404, json.dumps({"error": {"message": "The model does not exist."}})
                           .encode())
                return
            if mode == "500":
                self._send(500, b'{"error": {"message": "engine dead"}}')
                return
            if mode == "slow":
                time.sleep(1.0)
            if mode == "ttft":
                time.sleep(TTFT_S)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            toks = int(req["max_tokens"]) - (2 if mode == "short" else 0)
            chat = self.path.endswith("/chat/completions")
            cont = bool((req.get("stream_options") or {}).get("continuous_usage_stats"))
            per = 3 if mode == "nousage3" else 1 if mode == "ttft" else 2
            if mode == "nousage3":
                cont = False
            if chat:
                ev0 = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                self.wfile.write(f"data: {json.dumps(ev0)}\n\n".encode())
            sent = 0
            while sent < toks:
                if mode == "errstream" and sent == 2:
                    self.wfile.write(b'data: {"error": {"message": "boom", "code": 500}}\n\n')
                    return
                if mode == "badsse" and sent == 2:
                    self.wfile.write(b"data: {nope\n\n")
                    return
                if mode == "drop" and sent == 2:
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                step = min(per, toks - sent)  # several tokens per chunk, like speculation
                sent += step
                text = " the" * step
                ch: dict[str, Any] = ({"index": 0, "delta": {"content": text}} if chat
                                      else {"index": 0, "text": text})
                ch["finish_reason"] = "length" if sent == toks else None
                ev: dict[str, Any] = {"choices": [ch]}
                if cont:
                    ev["usage"] = {"prompt_tokens": 7, "completion_tokens": sent,
                                   "total_tokens": 7 + sent}
                self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.002)
            d = toks // 2
            with st.lock:
                st.drafts += d
                st.draft_tokens += 3 * d
                st.accepted += d
                st.pos0 += d
                st.iter_no += 1
                st.iters.append({"iter": st.iter_no, "timestamp": str(st.iter_no),
                                 "specDecodingStats": {"numDraftTokens": 3 * d,
                                                       "numAcceptedTokens": d,
                                                       "numRequestsWithDraftTokens": d}})
            ev2 = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": toks,
                                            "total_tokens": 7 + toks}}
            if mode != "nousage3":
                self.wfile.write(f"data: {json.dumps(ev2)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    return H


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed its stream (a cancelled filler request) is not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(mode: str, key: str | None = None) -> Iterator[tuple[str, State]]:
    st = State(mode, key=key)
    srv = _Server(("127.0.0.1", 0), make_handler(st))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", st
    finally:
        srv.shutdown()
        srv.server_close()


def _serve_forever(mode: str, q: Any, key: str | None = None) -> None:
    srv = _Server(("127.0.0.1", 0), make_handler(State(mode, key=key)))
    srv.daemon_threads = True
    q.put(srv.server_address[1])
    srv.serve_forever()


@contextmanager
def serve_process(mode: str, key: str | None = None) -> Iterator[str]:
    """The same server in a child process (timing tests: no GIL shared with the client)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_serve_forever, args=(mode, q, key), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{q.get(timeout=10)}"
    finally:
        proc.terminate()
        proc.join(5)
