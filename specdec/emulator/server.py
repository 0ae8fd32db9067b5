"""The HTTP server (stdlib ``ThreadingHTTPServer``): vLLM's and trtllm-serve's OpenAI API.

Routes (both engines unless noted): ``GET /health``, ``GET /version``, ``GET /v1/models``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (SSE with ``stream``), ``GET /metrics``
(vLLM: Prometheus text; trtllm-serve: JSON iteration stats, drained on read), ``GET|POST /ping``
(vLLM), ``GET /health_generate`` (trtllm-serve), and the lab's ``GET /lab/truth`` and
``POST /lab/truth/reset``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specdec.emulator.core import SeqRequest
from specdec.emulator.engine import EngineService, RequestState
from specdec.emulator.openai import ApiError, GenRequest, parse_generation, usage
from specdec.emulator.runtime import RunContext, ServeConfig
from specdec.emulator.startup import (
    EngineExit,
    bind_failure,
    trtllm_ready_lines,
    trtllm_startup,
    vllm_ready_lines,
    vllm_startup,
)

__all__ = ["EmulatorHTTPServer", "serve"]

VLLM_ROUTES = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
    ("/load", "GET"), ("/ping", "POST"), ("/ping", "GET"), ("/version", "GET"),
    ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"),
    ("/metrics", "GET"),
]


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # listen() backlog as vLLM and trtllm-serve get it from uvicorn (`Config.backlog`, default
    # 2048, encode/uvicorn uvicorn/config.py); socketserver's default of 5 drops the SYNs of a
    # burst of new connections (a client opening 8 at once waits 1 s for a retransmit).
    request_queue_size = 2048
    service: EngineService | None = None
    cfg: ServeConfig
    ctx: RunContext


def _server_for(host: str) -> type[EmulatorHTTPServer]:
    if ":" in host:
        class V6(EmulatorHTTPServer):
            address_family = socket.AF_INET6
        return V6
    return EmulatorHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY as uvicorn sets it: SSE chunks must not wait for Nagle's algorithm.
    disable_nagle_algorithm = True
    server: EmulatorHTTPServer
    timeout = 300

    # -- plumbing -------------------------------------------------------------------------------
    @property
    def svc(self) -> EngineService:
        assert self.server.service is not None
        return self.server.service

    @property
    def cfg(self) -> ServeConfig:
        return self.server.cfg

    @property
    def trt(self) -> bool:
        return self.server.cfg.engine == "trtllm"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _access(self, status: int) -> None:
        if self.cfg.non_default_args.get("disable_uvicorn_access_log"):
            return
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        self.server.ctx.log.uvicorn(
            f'{host}:{port} - "{self.command} {self.path} {self.request_version}" '
            f"{status} {phrase}")

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", ctype)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, err: ApiError) -> None:
        body = err.body()
        if self.trt:
            body = {"object": "error", **body["error"]}
        self._json(err.status, body)

    def _read_body(self) -> bytes:
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _hang(self) -> None:
        """hang_after: the connection was accepted; it is never answered."""
        self.server.ctx.stop.wait()
        self.close_connection = True

    def _authorized(self) -> bool:
        keys = self.cfg.api_keys
        if not keys or not self.path.startswith(("/v1", "/v2", "/inference", "/cohere")):
            return True
        auth = self.headers.get("authorization", "")
        return auth.startswith("Bearer ") and auth[7:] in keys

    # -- dispatch -------------------------------------------------------------------------------
    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path.startswith("/lab/"):
            self._lab(path)
            return
        if self.svc.hung:
            self._hang()
            return
        if not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if path == "/health" or (path == "/ping" and not self.trt):
            self._send(200, b"", "application/json")
        elif path == "/version":
            self._json(200, {"version": self.server.cfg.engine_version})
        elif path == "/v1/models":
            self._json(200, self._models())
        elif path == "/metrics":
            if self.trt:
                self._json(200, self.svc.iter_stats.drain())
            else:
                assert self.svc.vllm is not None
                self._send(200, self.svc.vllm.render().encode(),
                           "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/health_generate" and self.trt:
            self._health_generate()
        elif path in ("/v1/completions", "/v1/chat/completions"):
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        arrival = time.perf_counter()
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        if path.startswith("/lab/"):
            self._lab(path)
            return
        if self.svc.hung:
            self._hang()
            return
        if not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if path == "/ping" and not self.trt:
            self._send(200, b"")
        elif path in ("/v1/completions", "/v1/chat/completions"):
            self._generate("chat" if path.endswith("chat/completions") else "completion", raw,
                           arrival)
        elif path in ("/health", "/v1/models", "/metrics", "/version"):
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._json(404, {"detail": "Not Found"})

    # -- simple routes --------------------------------------------------------------------------
    def _models(self) -> dict[str, Any]:
        now = int(time.time())
        data = []
        for name in self.cfg.served_model_names:
            if self.trt:
                data.append({"id": name, "object": "model", "created": now,
                             "owned_by": "tensorrt_llm"})
                continue
            data.append({
                "id": name, "object": "model", "created": now, "owned_by": "vllm",
                "root": self.cfg.model_ref, "parent": None,
                "max_model_len": self.cfg.setup.model_len,
                "permission": [{
                    "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                    "created": now, "allow_create_engine": False, "allow_sampling": True,
                    "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                    "allow_fine_tuning": False, "organization": "*", "group": None,
                    "is_blocking": False}],
            })
        return {"object": "list", "data": data}

    def _lab(self, path: str) -> None:
        truth = self.svc.truth
        if path == "/lab/truth" and self.command in ("GET", "HEAD"):
            self._json(200, truth.summary())
        elif path == "/lab/truth/reset" and self.command == "POST":
            truth.reset()
            self._json(200, {"reset": True})
        else:
            self._json(404, {"detail": "Not Found"})

    def _health_generate(self) -> None:
        import queue

        sink: queue.Queue[Any] = queue.Queue()
        req = SeqRequest(prompt_key=0, prompt_tokens=8, category="chat", max_tokens=1,
                         ignore_eos=True, temperature=0.0)
        self.svc.scheduler.submit([req], sink)
        item = sink.get()
        self._send(200 if item is not None else 500, b"")

    # -- generation -----------------------------------------------------------------------------
    def _generate(self, kind: str, raw: bytes, arrival: float) -> None:
        svc = self.svc
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError as exc:
                raise ApiError(400, f"JSON decode error: {exc}") from None
            gen = parse_generation(
                kind, body, engine=self.cfg.engine, served_names=self.cfg.served_model_names,
                max_model_len=self.cfg.setup.model_len, tokenizer=self.cfg.setup.target.tokenizer,
                default_temperature=self.cfg.default_temperature)
        except ApiError as err:
            self._error(err)
            return
        number = svc.next_request()
        if self.server.ctx.faults.is_5xx(number):
            st = RequestState(gen=gen, record=_record(arrival, gen))
            self._error(ApiError(500, "EngineCore encountered an issue. See stack trace (above) "
                                      "for the root cause.", type_="InternalServerError"))
            svc.finish(st, first=None, last=None, end=time.perf_counter(), status=500)
            return
        st, events = svc.generate(gen, arrival)
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        if gen.stream:
            self._stream(kind, gen, st, events, rid)
        else:
            self._complete(kind, gen, st, events, rid)

    def _choice_extra(self, st: RequestState, i: int, steps: dict[int, int]) -> dict[str, Any]:
        if not self.trt:
            return {}
        n = st.completion[i]
        return {"avg_decoded_tokens_per_iter": round(n / max(1, steps.get(i, 1)), 4)}

    def _complete(self, kind: str, gen: GenRequest, st: RequestState, events: Any,
                  rid: str) -> None:
        texts: dict[int, list[str]] = {}
        steps: dict[int, int] = {}
        first = last = None
        for ev in events:
            texts.setdefault(ev.choice, []).extend(ev.out.tokens)
            steps[ev.choice] = steps.get(ev.choice, 0) + 1
            first = first if first is not None else ev.t
            last = ev.t
        if st.aborted:
            self._error(ApiError(500, "Engine shut down", type_="InternalServerError"))
            self.svc.finish(st, first=first, last=last, end=time.perf_counter(), status=500)
            return
        choices = []
        for i in range(len(gen.choice_of)):
            text = "".join(texts.get(i, []))
            c: dict[str, Any] = {"index": i}
            if kind == "chat":
                c["message"] = {"role": "assistant", "content": text, "reasoning_content": None,
                                "tool_calls": []}
            else:
                c["text"] = text
            c.update({"logprobs": None, "finish_reason": st.finish[i], "stop_reason": None})
            c.update(self._choice_extra(st, i, steps))
            choices.append(c)
        body = {
            "id": rid, "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": gen.model, "choices": choices,
            "usage": usage(st.prompt_tokens, st.completion_tokens,
                           sum(st.cached) if self.trt else None),
        }
        self._json(200, body)
        self.svc.finish(st, first=first, last=last, end=time.perf_counter())

    def _stream(self, kind: str, gen: GenRequest, st: RequestState, events: Any,
                rid: str) -> None:
        created = int(time.time())
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)

        def write(payload: str) -> None:
            data = payload.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def chunk(choices: list[dict[str, Any]], use: dict[str, Any] | None = None) -> str:
            d: dict[str, Any] = {"id": rid, "object": obj, "created": created,
                                 "model": gen.model, "choices": choices}
            if use is not None:
                d["usage"] = use
            return "data: " + json.dumps(d) + "\n\n"

        first = last = None
        seen: set[int] = set()
        steps: dict[int, int] = {}
        try:
            for ev in events:
                i = ev.choice
                steps[i] = steps.get(i, 0) + 1
                out = ev.out
                text = "".join(out.tokens)
                parts = []
                if kind == "chat":
                    if i not in seen:
                        parts.append(chunk([{"index": i, "delta": {"role": "assistant",
                                                                   "content": ""},
                                             "logprobs": None, "finish_reason": None}]))
                    c: dict[str, Any] = {"index": i, "delta": {"content": text},
                                         "logprobs": None, "finish_reason": out.finish_reason}
                else:
                    c = {"index": i, "text": text, "logprobs": None,
                         "finish_reason": out.finish_reason, "stop_reason": None}
                if out.finished:
                    c.update(self._choice_extra(st, i, steps))
                seen.add(i)
                use = None
                if gen.include_usage and gen.continuous_usage:
                    use = usage(gen.prompt_tokens[i], out.generated)
                parts.append(chunk([c], use))
                write("".join(parts))
                last = time.perf_counter()
                if first is None:
                    first = last
            if st.aborted:
                err = ApiError(500, "Engine shut down", type_="InternalServerError")
                write("data: " + json.dumps(err.body()) + "\n\n")
            elif gen.include_usage:
                write(chunk([], usage(st.prompt_tokens, st.completion_tokens,
                                      sum(st.cached) if self.trt else None)))
            write("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            events.close()  # client went away: abort its sequences
            self.close_connection = True
            self.svc.finish(st, first=first, last=last, end=time.perf_counter(), status=499)
            return
        self.svc.finish(st, first=first, last=last, end=time.perf_counter(),
                        status=500 if st.aborted else 200)


def _record(arrival: float, gen: GenRequest) -> Any:
    from specdec.emulator.truth import RequestRecord

    return RequestRecord(arrival=arrival, category=gen.categories[0] if gen.categories else "chat")


def _bind(server: EmulatorHTTPServer, cfg: ServeConfig, ctx: RunContext) -> None:
    try:
        server.server_bind()
    except OSError as exc:
        server.server_close()
        raise bind_failure(ctx, cfg.engine, cfg.host, cfg.port, exc) from None


def serve(cfg: ServeConfig, ctx: RunContext) -> int:
    """Start up (log, delays, memory check), serve until SIGTERM/SIGINT; the exit status."""
    ctx.install_signals()
    host = "" if cfg.host in ("", "0.0.0.0") else cfg.host
    server = _server_for(host)((host, cfg.port), Handler, bind_and_activate=False)
    server.cfg = cfg
    server.ctx = ctx
    try:
        if cfg.engine == "vllm":  # vLLM binds its socket before loading, listens when ready
            _bind(server, cfg, ctx)
            mem = vllm_startup(cfg, ctx)
        else:
            mem = trtllm_startup(cfg, ctx)
            _bind(server, cfg, ctx)
    except EngineExit as exc:
        server.server_close()
        return exc.code
    service = EngineService(cfg, ctx, mem)
    server.service = service
    service.start()
    server.server_activate()
    if cfg.engine == "vllm":
        vllm_ready_lines(cfg, ctx, VLLM_ROUTES)
    else:
        trtllm_ready_lines(cfg, ctx)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="http", daemon=True)
    thread.start()
    ctx.stop.wait()
    ctx.log.uvicorn("Shutting down")
    server.shutdown()
    service.stop()
    server.server_close()
    ctx.log.uvicorn("Waiting for application shutdown.")
    ctx.log.uvicorn("Application shutdown complete.")
    if cfg.engine == "vllm":
        ctx.log.uvicorn(f"Finished server process [{ctx.log.pid}]")
    return 0



