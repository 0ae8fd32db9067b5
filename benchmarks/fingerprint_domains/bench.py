"""The benchmark clients' requests, byte for byte, against a capturing loopback server.

The server (a thread of its own) answers at once with deterministic SSE streams (chunk sizes from
a hash of the prompt) and, as a vLLM, speculation counters that grow with the requests it served.
The on-host client (`specdec.bench.onhost.cli.main`, the argv the deploy's rounds give it and
generated ones) and the control node's (`specdec bench`) run against it; per configuration the
fingerprint holds every request (method, path, headers, body: sorted, the Host port normalised;
fillers excluded), the paths probed, and the result without durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import random
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

from fingerprint_domains.common import Domain

MODEL = "fp-org/fp-model"
_FILL = re.compile(r"\[[^\]]* fill #\d+\]")


class Server:
    """Loopback HTTP/1.1 server in its own thread; ``flavor`` vllm (Prometheus counters,
    /version) or openai (neither)."""

    def __init__(self) -> None:
        self.flavor = "vllm"
        self.lock = threading.Lock()
        self.posts: list[str] = []
        self.gets: set[str] = set()
        self.counts = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.per_pos = [0, 0, 0]
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        srv = self.loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
        self.port = srv.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def take(self, flavor: str) -> dict[str, Any]:
        """What the last configuration sent; then reset for the next one (as ``flavor``)."""
        with self.lock:
            got = {"requests": sorted(self.posts), "probed": sorted(self.gets)}
            self.posts, self.gets, self.flavor = [], set(), flavor
            self.counts = dict.fromkeys(self.counts, 0)
            self.per_pos = [0, 0, 0]
        return got

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = [h for h in lines[1:] if h]
                size = next((int(h.split(":", 1)[1]) for h in hdrs
                             if h.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(size) if size else b""
                status, ctype, out = self._answer(method, path, hdrs, body)
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: "
                             f"{len(out)}\r\n\r\n".encode() + out)
                await writer.drain()
        writer.close()

    def _answer(self, method: str, path: str, hdrs: list[str],
                body: bytes) -> tuple[str, str, bytes]:
        with self.lock:
            if method == "GET":
                self.gets.add(path)
                if path == "/v1/models":
                    return "200 OK", "application/json", json.dumps(
                        {"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
                if path == "/metrics" and self.flavor == "vllm":
                    return "200 OK", "text/plain; version=0.0.4", self._metrics().encode()
                if path == "/version" and self.flavor == "vllm":
                    return "200 OK", "application/json", b'{"version": "0.19.0"}'
                return "404 Not Found", "application/json", b'{"detail": "Not Found"}'
            req = json.loads(body)
            text = req.get("prompt") or req["messages"][0]["content"]
            filler = bool(_FILL.match(text))
            if not filler:
                host = [re.sub(r"^(host:\s*[^:]+):\d+$", r"\1:PORT", h, flags=re.I) for h in hdrs]
                self.posts.append(f"{method} {path}\n" + "\n".join(host) + "\n\n"
                                  + body.decode("utf-8", "backslashreplace"))
            return "200 OK", "text/event-stream", self._sse(req, text, path, filler)

    def _metrics(self) -> str:
        lab = f'engine="0",model_name="{MODEL}"'
        out = []
        for key, name in (("drafts", "num_drafts"), ("draft_tokens", "num_draft_tokens"),
                          ("accepted", "num_accepted_tokens")):
            out += [f"# TYPE vllm:spec_decode_{name} counter",
                    f"vllm:spec_decode_{name}_total{{{lab}}} {float(self.counts[key])}"]
        out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
        out += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} '
                f"{float(v)}" for i, v in enumerate(self.per_pos)]
        return "\n".join(out) + "\n"

    def _sse(self, req: dict[str, Any], text: str, path: str, filler: bool) -> bytes:
        seed = hashlib.sha256(text.encode()).digest()
        mt = int(req.get("max_tokens") or 16)
        n = mt if req.get("ignore_eos") else max(1, min(mt, 3 + seed[0] % 40))
        chat = path.endswith("chat/completions")
        opts = req.get("stream_options") or {}
        ptok = len(text.split())
        events: list[dict[str, Any]] = []
        if chat:
            events.append({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                              "content": ""}}]})
        done = i = 0
        while done < n:
            s = min(n - done, 1 + seed[1 + i % 30] % 4)
            done, i = done + s, i + 1
            piece = " ".join(f"w{done - s + j}" for j in range(s))
            fin = ("length" if req.get("ignore_eos") or n == mt else "stop") if done == n else None
            ch: dict[str, Any] = {"index": 0, "finish_reason": fin}
            ch.update({"delta": {"content": piece}} if chat else {"text": piece})
            ev: dict[str, Any] = {"choices": [ch]}
            if opts.get("continuous_usage_stats"):
                ev["usage"] = {"prompt_tokens": ptok, "completion_tokens": done,
                               "total_tokens": ptok + done}
            events.append(ev)
            if not filler:
                self.counts["drafts"] += 1
                self.counts["draft_tokens"] += 3
                self.counts["accepted"] += s - 1
                for p in range(s - 1):
                    self.per_pos[p] += 1
        if opts.get("include_usage"):
            events.append({"choices": [], "usage": {"prompt_tokens": ptok,
                                                    "completion_tokens": n,
                                                    "total_tokens": ptok + n}})
        return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + \
            b"data: [DONE]\n\n"


_TIMED = re.compile(r"_ms|_s$|throughput|^duration$|^steady_window$|_at$")


def _untimed(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _untimed(v) for k, v in o.items() if not _TIMED.search(str(k))}
    if isinstance(o, list):
        return [_untimed(v) for v in o]
    return o


def _result(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: (_untimed(v) if k == "concurrency" else v) for k, v in doc.items()
            if k not in ("started_at", "finished_at", "url")}


def _onhost(argv: list[str]) -> dict[str, Any]:
    from specdec.bench.onhost.cli import MARKER, main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    res: dict[str, Any] = {"exit": code, "stderr": err.getvalue()}
    for ln in out.getvalue().splitlines():
        res.update(result=_result(json.loads(ln[len(MARKER):]))) if ln.startswith(MARKER) \
            else res.setdefault("stdout", []).append(ln)
    return res


def _control(argv: list[str], tmp: Path) -> dict[str, Any]:
    from specdec.cli import main

    out, err = io.StringIO(), io.StringIO()
    path = tmp / "result.json"
    path.unlink(missing_ok=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", *argv, "--no-progress", "--json", str(path)])
    res: dict[str, Any] = {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    if path.exists():
        res["result"] = _result(json.loads(path.read_text()))
    return res


def _deploy_argvs() -> list[list[str]]:
    """The argv the deploy's gate rounds give the client (`specdec.gate.rounds.round_bench`)."""
    from specdec.gate.rounds import BenchSettings, round_bench
    from specdec.plan.types import GatePolicy

    out = []
    allocs = (None, {"code": 1.0}, {"chat": 0.5, "code": 0.3, "repetitive": 0.2})
    for st in (BenchSettings(), BenchSettings(requests=6, guard_requests=4, max_tokens=24,
                                              warmup=1, ramp_tokens=8)):
        for arm in ("baseline", "candidate"):
            for rnd in range(4):
                for levels in (None, [1], [8]):
                    for ai, alloc in enumerate(allocs):
                        used = [f"code-{i:02d}" for i in range(rnd)] if ai else []
                        rb = round_bench(st, GatePolicy(), arm, rnd, levels, alloc, used)
                        out.append(rb.argv())
    return out


def _random_argv(rng: random.Random) -> list[str]:
    levels = rng.choice(["1", "8", "1,8", "2,4", "1,3,8"]).split(",")
    argv = ["--concurrency", ",".join(levels), "--max-tokens", str(rng.choice([2, 7, 32, 64])),
            "--warmup", str(rng.choice([0, 1, 3]))]
    r = rng.random()
    if r < 0.6:
        argv += ["--requests", str(rng.choice([1, 3, 9]))]
    elif r < 0.9:
        argv += ["--requests", ",".join(str(rng.choice([1, 2, 5])) for _ in levels)]
    argv += ["--prompt-offset", ",".join(str(rng.choice([0, 5, 51, 60])) for _ in levels)
             if rng.random() < 0.5 else str(rng.choice([0, 13, 104]))]
    if rng.random() < 0.2:
        argv += ["--prompt-ids", f"{levels[0]}=" + rng.choice(
            ["code-01,chat-02", "rep-03", "sum-01,code-05,chat-16", "code-02,nope-9"])]
    for flag, p in (("--no-fill", 0.3), ("--no-fixed-length", 0.3),
                    ("--no-continuous-usage", 0.3), ("--wall-time", 0.5)):
        if rng.random() < p:
            argv.append(flag)
    argv += ["--ramp-tokens", str(rng.choice([0, 0, 0, 2, 16, 16, 32, 32, 64, 1]))]
    argv += ["--endpoint", rng.choice(["chat", "completions"])]
    if rng.random() < 0.5:
        argv += ["--model", rng.choice([MODEL, MODEL, MODEL, MODEL, "other/model"])]
    return argv


def run(dom: Domain, quick: bool) -> None:
    from specdec.bench.prompts import builtin_prompts
    from specdec.bench.remote import prompts_json

    rng = random.Random(20240611)
    srv = Server()
    url = f"http://127.0.0.1:{srv.port}"
    tmp = Path(tempfile.mkdtemp(prefix="fp-bench-"))
    try:
        prompts = tmp / "prompts.json"
        prompts.write_text(prompts_json(builtin_prompts()))
        deploy = _deploy_argvs()
        cases = [("deploy", a + ["--model", MODEL]) for a in deploy[::4 if quick else 1]]
        cases += [("onhost", _random_argv(rng)) for _ in range(60 if quick else 500)]
        control = [("control", _random_argv(rng)) for _ in range(10 if quick else 60)]
        for i, (kind, argv) in enumerate(cases + control):
            flavor = "openai" if i % 3 == 2 else "vllm"
            srv.take(flavor)
            if kind == "control":
                res = _control([url, *argv], tmp)
            else:
                res = _onhost([url, "--prompts", str(prompts), *argv, "--deadline", "60"])
            res.update(srv.take(flavor))
            text = json.dumps(res).replace(f"127.0.0.1:{srv.port}", "127.0.0.1:PORT")
            res = json.loads(text.replace(str(tmp), "<TMP>"))
            outcome = res if res["exit"] == 0 else {**res, "error": f"exit {res['exit']}"}
            dom.add(f"{kind} {flavor} {' '.join(argv)}", outcome)
    finally:
        srv.stop()
        for p in sorted(tmp.rglob("*"), reverse=True):
            p.unlink()
        tmp.rmdir()
