"""The emulator's HTTP server and the handler plumbing its routes are given (`BaseHandler`)."""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specdec.engines.vllm.facts import api_key_rule
from specdec_lab.emulator.engine import EngineService
from specdec_lab.emulator.openai import ApiError
from specdec_lab.emulator.runtime import RunContext, ServeConfig

__all__ = ["BaseHandler", "EmulatorHTTPServer"]


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


class BaseHandler(BaseHTTPRequestHandler):
    """The plumbing of one HTTP exchange: the engine served, reading, sending, errors, log."""

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY as uvicorn sets it: SSE chunks must not wait for Nagle's algorithm.
    disable_nagle_algorithm = True
    server: EmulatorHTTPServer
    timeout = 300

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
        """vLLM's --api-key / VLLM_API_KEY check at the emulated release: only its guarded
        path prefixes (the others stay open, as in vLLM), its scheme comparison."""
        keys = self.cfg.api_keys
        guards, any_case = api_key_rule(self.cfg.engine_version)
        if not keys or not self.path.startswith(guards):
            return True
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        ok_scheme = scheme.lower() == "bearer" if any_case else scheme == "Bearer"
        return ok_scheme and token in keys
