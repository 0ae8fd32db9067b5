"""Serving vLLM's and trtllm-serve's OpenAI API over HTTP: startup, dispatch, shutdown.

Routes (both engines unless noted): ``GET /health``, ``GET /version``, ``GET /v1/models``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (SSE with ``stream``), ``GET /metrics``
(vLLM: Prometheus text; trtllm-serve: JSON iteration stats, drained on read), ``GET|POST /ping``
(vLLM), ``GET /health_generate`` (trtllm-serve), and the lab's ``GET /lab/truth`` and
``POST /lab/truth/reset``. `Handler` is the dispatch (its plumbing, which the routes are given, is
`http_base.BaseHandler`); the generation routes are in `http_generation`, the others that
answer about the engine in `http_info`.
"""

from __future__ import annotations

import socket
import threading
import time

from specdec_lab.emulator import http_generation, http_info
from specdec_lab.emulator.engine import EngineService
from specdec_lab.emulator.http_base import BaseHandler, EmulatorHTTPServer
from specdec_lab.emulator.runtime import RunContext, ServeConfig
from specdec_lab.emulator.startup import (
    EngineExit,
    bind_failure,
    trtllm_ready_lines,
    trtllm_startup,
    vllm_ready_lines,
    vllm_startup,
)

__all__ = ["Handler", "serve"]

VLLM_ROUTES = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
    ("/load", "GET"), ("/ping", "POST"), ("/ping", "GET"), ("/version", "GET"),
    ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"),
    ("/metrics", "GET"),
]


def _server_for(host: str) -> type[EmulatorHTTPServer]:
    if ":" in host:
        class V6(EmulatorHTTPServer):
            address_family = socket.AF_INET6
        return V6
    return EmulatorHTTPServer


class Handler(BaseHandler):
    """Dispatch: each method and path to its route."""

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



