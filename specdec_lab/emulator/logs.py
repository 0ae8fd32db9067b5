"""Engine-style log lines on stdout (vLLM's and TRT-LLM's formats), thread-safe."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

__all__ = ["EngineLog"]

_LEVEL = {"INFO": "I", "WARNING": "W", "ERROR": "E", "DEBUG": "D"}


class EngineLog:
    """``engine`` is "vllm" or "trtllm". vLLM lines carry a process tag: the API server
    (this pid) or the engine core (a made-up child pid, as vLLM runs it in a subprocess)."""

    def __init__(self, engine: str, stream: TextIO | None = None) -> None:
        self.engine = engine
        self.stream = stream or sys.stdout
        self.pid = os.getpid()
        self.core_pid = self.pid + 1
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def _vllm(self, level: str, msg: str, where: str, core: bool) -> None:
        tag = f"(EngineCore_DP0 pid={self.core_pid})" if core else f"(APIServer pid={self.pid})"
        stamp = time.strftime("%m-%d %H:%M:%S")
        for i, part in enumerate(msg.splitlines() or [""]):
            if i == 0:
                self._write(f"{tag} {level} {stamp} [{where}] {part}")
            else:
                self._write(f"{tag} {part}")

    def _trt(self, level: str, msg: str) -> None:
        stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
        for part in msg.splitlines() or [""]:
            self._write(f"[{stamp}] [TRT-LLM] [{_LEVEL.get(level, 'I')}] {part}")

    def log(self, level: str, msg: str, where: str = "api_server.py:1", core: bool = False) -> None:
        if self.engine == "vllm":
            self._vllm(level, msg, where, core)
        else:
            self._trt(level, msg)

    def info(self, msg: str, where: str = "api_server.py:1", core: bool = False) -> None:
        self.log("INFO", msg, where, core)

    def warning(self, msg: str, where: str = "api_server.py:1", core: bool = False) -> None:
        self.log("WARNING", msg, where, core)

    def error(self, msg: str, where: str = "core.py:708", core: bool = False) -> None:
        self.log("ERROR", msg, where, core)

    def raw(self, line: str, core: bool = False) -> None:
        """A line without level/timestamp (uvicorn, tracebacks)."""
        if self.engine == "vllm":
            tag = f"(EngineCore_DP0 pid={self.core_pid})" if core else f"(APIServer pid={self.pid})"
            self._write(f"{tag} {line}")
        else:
            self._write(line)

    def uvicorn(self, msg: str) -> None:
        self.raw(f"INFO:     {msg}")
