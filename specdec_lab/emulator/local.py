"""Start the engine emulator on a free loopback port (tests and benchmarks of the bench client).

`emulator(engine, model, args, env)` is a context manager: it starts
``python3 -m specdec_lab.emulator vllm serve MODEL …`` (or ``trtllm-serve``) as a child process on
127.0.0.1, waits for ``/health``, yields the base URL and terminates exactly that PID.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from specdec.errors import BenchError

__all__ = ["emulator", "free_port", "lab_truth", "reset_truth"]

def free_port(below: int | None = None) -> int:
    """A free loopback TCP port (``below``: one under that number, e.g. for Dynamo's i16 port)."""
    for _ in range(200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 0 if below is None else random.randrange(20000, below)))
            except OSError:
                continue
            port: int = s.getsockname()[1]
            return port
    raise BenchError(f"no free loopback port below {below}")


@contextlib.contextmanager
def emulator(
    engine: str,
    model: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    startup_timeout_s: float = 60.0,
    log_path: str | None = None,
) -> Iterator[str]:
    """Run the emulator (``engine`` "vllm" or "trtllm-serve"); yield its base URL."""
    port = free_port()
    tool = [engine, "serve", model] if engine == "vllm" else [engine, model]
    argv = [*tool, *args, "--host", "127.0.0.1", "--port", str(port)]
    cmd = [sys.executable, "-m", "specdec_lab.emulator", *argv]
    full_env = {**os.environ, **(env or {})}
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                raise BenchError(f"emulator exited with status {proc.returncode} during startup")
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"emulator not healthy after {startup_timeout_s:g} s")
            time.sleep(0.05)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if log is not subprocess.DEVNULL:
            log.close()  # type: ignore[union-attr]


def lab_truth(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/lab/truth", timeout=10.0)
    r.raise_for_status()
    data: dict[str, Any] = r.json()
    return data


def reset_truth(url: str) -> None:
    httpx.post(url + "/lab/truth/reset", timeout=10.0).raise_for_status()
