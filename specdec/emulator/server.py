"""The HTTP server (stdlib ``ThreadingHTTPServer``): vLLM's and trtllm-serve's OpenAI API.

Routes (both engines unless noted): ``GET /health``, ``GET /version``, ``GET /v1/models``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (SSE with ``stream``), ``GET /metrics``
(vLLM: Prometheus text; trtllm-serve: JSON iteration stats, drained on read), ``GET|POST /ping``
(vLLM), ``GET /health_generate`` (trtllm-serve), and the lab's ``GET /lab/truth`` and
``POST /lab/truth/reset``. `Handler` is the plumbing and the dispatch; the generation routes
are in `http_generation`, the others that answer about the engine in `http_info`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specdec.emulator import http_generation, http_info
from specdec.emulator.engine import EngineService
from specdec.emulator.openai import ApiError
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

    def access_log(self, status: int) -> None:
        """uvicorn's access log line (unless ``--disable-uvicorn-access-log``)."""
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

    def send_body(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", ctype)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()
        self.access_log(status)

    def send_json(self, status: int, obj: Any) -> None:
        self.send_body(status, json.dumps(obj).encode())

    def send_api_error(self, err: ApiError) -> None:
        body = err.body()
        if self.trt:
            body = {"object": "error", **body["error"]}
        self.send_json(err.status, body)

    def read_body(self) -> bytes:
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def hang(self) -> None:
        """hang_after: the connection was accepted; it is never answered."""
        self.server.ctx.stop.wait()
        self.close_connection = True

    def authorized(self) -> bool:
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
            http_info.lab(self, path)
            return
        if self.svc.hung:
            self.hang()
            return
        if not self.authorized():
            self.send_json(401, {"error": "Unauthorized"})
            return
        if path == "/health" or (path == "/ping" and not self.trt):
            self.send_body(200, b"", "application/json")
        elif path == "/version":
            self.send_json(200, {"version": self.server.cfg.engine_version})
        elif path == "/v1/models":
            self.send_json(200, http_info.models(self))
        elif path == "/metrics":
            http_info.metrics(self)
        elif path == "/health_generate" and self.trt:
            http_info.health_generate(self)
        elif path in ("/v1/completions", "/v1/chat/completions"):
            self.send_json(405, {"detail": "Method Not Allowed"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        arrival = time.perf_counter()
        path = self.path.split("?", 1)[0]
        raw = self.read_body()
        if path.startswith("/lab/"):
            http_info.lab(self, path)
            return
        if self.svc.hung:
            self.hang()
            return
        if not self.authorized():
            self.send_json(401, {"error": "Unauthorized"})
            return
        if path == "/ping" and not self.trt:
            self.send_body(200, b"")
        elif path in ("/v1/completions", "/v1/chat/completions"):
            http_generation.generate(
                self, "chat" if path.endswith("chat/completions") else "completion", raw,
                arrival)
        elif path in ("/health", "/v1/models", "/metrics", "/version"):
            self.send_json(405, {"detail": "Method Not Allowed"})
        else:
            self.send_json(404, {"detail": "Not Found"})


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



