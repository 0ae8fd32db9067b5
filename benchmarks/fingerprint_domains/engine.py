"""The emulator: its pure engine core step by step, and the emulator process over HTTP."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fingerprint_domains.adapters import engine_step_fields
from fingerprint_domains.common import Domain, error, line, pmap

CATS = ("chat", "code", "summarization", "repetitive")
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B",
          "meta-llama/Llama-3.2-3B-Instruct", "RedHatAI/Qwen3-8B-quantized.w4a16")
METHODS = ("none", "eagle3", "draft_model", "ngram", "mtp", "suffix")
EXTRAS: tuple[dict[str, Any], ...] = (
    {}, {"kv": 3000}, {"k_by_batch": ((1, 2, 4), (3, 256, 1))}, {"max_concurrency": 2},
    {"temperature": 0.7}, {"enforce_eager": True}, {"max_num_batched_tokens": 256},
    {"prefix": True}, {"max_num_seqs": 2},
)


def engine_cases(quick: bool) -> list[tuple[int, str, dict[str, Any]]]:
    from specdec.catalog import load_catalog

    cat = load_catalog()
    out = []
    for dev in sorted(cat.devices):
        for model in MODELS:
            for method in METHODS:
                for k in (1, 3, 5):
                    for conc in (1, 4, 8):
                        i = len(out)
                        if method == "none" and k > 1:
                            continue
                        draft = (cat.models[model].drafts or (None,))[0] \
                            if method == "draft_model" else None
                        c = {"device": dev, "model": model, "method": method, "k": k,
                             "draft": draft, "conc": conc, "seed": i % 3,
                             **EXTRAS[i % len(EXTRAS)]}
                        out.append((i, json.dumps(c, sort_keys=True), c))
    return out[::10] if quick else out


def _steps(c: dict[str, Any]) -> dict[str, Any]:
    from specdec_lab.emulator.core import EngineCore, SeqRequest, SimPrompt, simulate
    from specdec_lab.emulator.setup import setup_for

    kw = {k: c[k] for k in ("k_by_batch", "max_concurrency", "enforce_eager",
                            "max_num_batched_tokens") if k in c}
    s = setup_for(c["device"], c["model"], c["method"], c["k"], c["draft"],
                  max_num_seqs=c.get("max_num_seqs", 8), seed=c["seed"],
                  prefix_caching=bool(c.get("prefix")), **kw)
    core = EngineCore(s.engine_model(kv_capacity_tokens=c.get("kv", 200_000)))
    n = c["conc"] + 2
    for i in range(n):
        j = i % 2 if c.get("prefix") else i
        core.add(SeqRequest(prompt_key=1000003 * j + c["seed"], prompt_tokens=40 + 97 * j % 300,
                            category=CATS[j % 4], max_tokens=24 + 8 * (i % 3),
                            min_tokens=0 if i % 4 == 3 else 24, ignore_eos=i % 4 != 3,
                            temperature=c.get("temperature", 0.0),
                            seed=None if "temperature" not in c else 7 + i,
                            prefix_blocks=(11, 12, 13 + j) if c.get("prefix") else ()))
    steps = []
    while core.has_work() and len(steps) < 400:
        r = core.step()
        if r is None:
            break
        steps.append(engine_step_fields(r))
    out: dict[str, Any] = {"steps": steps}
    if c["conc"] != 4:
        prompts = [SimPrompt(key=31 * i + 5, prompt_tokens=60 + 53 * i % 400,
                             category=CATS[i % 4]) for i in range(8)]
        out["simulate"] = simulate(s.engine_model(), prompts, concurrency=c["conc"],
                                   num_requests=2 * c["conc"] + 1, max_tokens=32)
    return out


def _chunk(chunk: Sequence[tuple[int, str, dict[str, Any]]]) -> list[tuple[str, bool]]:
    out = []
    for _, key, c in chunk:
        try:
            out.append(line(key, _steps(c)))
        except Exception as exc:
            out.append(line(key, error(exc)))
    return out


def engine_steps(dom: Domain, quick: bool, jobs: int) -> None:
    dom.extend(pmap(_chunk, engine_cases(quick), jobs, chunk=60))


# -- the emulator over HTTP -------------------------------------------------------------------
_IDS = re.compile(r"\b(chatcmpl-|cmpl-|modelperm-)[0-9a-f]{32}\b")
_CREATED = re.compile(r'"created": ?\d+')
_WALL = re.compile(r"seconds|_time|latency|process_|python_|_perc|kv_cache_usage|_created$",
                   re.I)


def _untimed(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _untimed(v) for k, v in o.items()
                if not re.search(r"_ms|_s$|throughput|^duration$", k)}
    return o


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(port: int, method: str, path: str, body: Any = None, raw: bytes | None = None
          ) -> dict[str, Any]:
    if path in ("/metrics", "/lab/truth"):
        time.sleep(0.2)  # the engine's statistics settle after the last response
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
    r = conn.getresponse()
    text = r.read().decode("utf-8", "replace")
    conn.close()
    text = _CREATED.sub('"created": 0', _IDS.sub(r"\1ID", text))
    if path == "/metrics" and text.startswith("["):  # TRT-LLM iteration stats: counts only
        text = json.dumps([{k: v for k, v in s.get("specDecodingStats", {}).items()
                            if isinstance(v, int)} for s in json.loads(text)])
    elif path == "/metrics":
        text = "\n".join(ln for ln in text.splitlines()
                          if not _WALL.search(re.split(r"[{ ]", ln)[0]))
    elif path == "/lab/truth":
        text = json.dumps(_untimed(json.loads(text)))
    drop = ("date", "content-length") if path in ("/metrics", "/lab/truth") else ("date",)
    return {"status": r.status, "reason": r.reason, "body": text,
            "headers": [(k.lower(), v) for k, v in r.getheaders() if k.lower() not in drop]}


def _requests(model: str, trt: bool) -> list[tuple[str, str, Any]]:
    msgs = [{"role": "user", "content": "Explain memory bandwidth in two sentences."}]
    chat = {"model": model, "messages": msgs, "max_tokens": 24, "temperature": 0,
            "ignore_eos": True}
    comp = {"model": model, "prompt": "def fib(n):", "max_tokens": 20, "temperature": 0,
            "ignore_eos": True}
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    reqs = [("GET", p, None) for p in ("/health", "/v1/models", "/version", "/nope",
                                       "/health_generate")]
    reqs += [("GET", "/metrics", None), ("POST", "/v1/chat/completions", chat),
             ("POST", "/v1/completions", comp),
             ("POST", "/v1/chat/completions", {**chat, **usage}),
             ("POST", "/v1/completions", {**comp, **usage}),
             ("POST", "/v1/chat/completions", {**chat, "stream": True, "max_tokens": 8}),
             ("POST", "/v1/chat/completions", {**chat, "max_tokens": 400, "ignore_eos": False}),
             ("POST", "/v1/chat/completions", {**chat, "temperature": 0.8, "seed": 11}),
             ("POST", "/v1/chat/completions", {**chat, "model": "gpt-4"}),
             ("POST", "/v1/chat/completions", {**chat, "max_tokens": 10 ** 6}),
             ("POST", "/v1/chat/completions", b"{not json"),
             ("GET", "/v1/chat/completions", None), ("GET", "/metrics", None),
             ("GET", "/lab/truth", None)]
    if trt:
        reqs.append(("POST", "/v1/chat/completions", {**chat, "frobnicate": 1}))
    return reqs


def _host(device: str, data: dict[str, Any]) -> Any:
    from specdec.plan.planner import make_plan

    return make_plan("emu", {"specdec_device": device, "specdec_runtime": "native", **data})


def emulator_http(dom: Domain, repo: Path) -> None:
    """Each setup: a plan's engine command line (its engine.yaml for trtllm-serve) run by
    ``python3 -m specdec_lab.emulator`` on loopback, then a fixed sequence of requests."""
    from specdec.render.files import engine_argv, render

    setups = [("agx-vllm-eagle3", "agx-orin-64gb", {"specdec_model": "meta-llama/Llama-3.1-8B"
               "-Instruct", "specdec_method": "eagle3", "specdec_num_speculative_tokens": 3}),
              ("nano-vllm-ngram", "orin-nano-8gb", {"specdec_model": "Qwen/Qwen3-0.6B"}),
              ("spark-trtllm-ngram", "dgx-spark", {"specdec_engine": "trtllm",
               "specdec_model": "Qwen/Qwen3-8B", "specdec_method": "ngram",
               "specdec_num_speculative_tokens": 3})]
    for name, device, data in setups:
        tmp = Path(tempfile.mkdtemp(prefix="fp-emu-"))
        try:
            plan = _host(device, data)
            yaml_path = tmp / "engine.yaml"
            files = {f.path.rsplit("/", 1)[-1]: f.content for f in render(plan).files}
            if "engine.yaml" in files:
                yaml_path.write_text(files["engine.yaml"])
            argv = engine_argv(plan, str(yaml_path))
            dom.add(name, _serve(repo, tmp, device, plan, argv))
        except Exception as exc:
            dom.add(name, error(exc))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _serve(repo: Path, tmp: Path, device: str, plan: Any, argv: list[str]) -> dict[str, Any]:
    port = _free_port()
    (tmp / "hf_token").write_text("hf_fingerprintEmulatorToken000000000\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECDEC_", "HF_", "VLLM_", "HUGGING"))}
    env.update(PYTHONPATH=str(repo), HF_HOME=str(tmp / "hf"), HF_TOKEN_PATH=str(tmp / "hf_token"),
               SPECDEC_EMU_DEVICE=device, SPECDEC_EMU_TIME_SCALE="0.001", SPECDEC_EMU_SEED="7",
               SPECDEC_EMU_ENGINE_VERSION=plan.engine_version, PYTHONUNBUFFERED="1")
    log = (tmp / "log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "specdec_lab.emulator", *argv, "--host",
                             "127.0.0.1", "--port", str(port)], cwd=repo, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                return {"error": "EmulatorExited", "message": f"exit {proc.returncode}"}
            try:
                if _call(port, "GET", "/health")["status"] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    return {"error": "EmulatorNotReady", "message": "no /health in 60 s"}
                time.sleep(0.05)
        return {"argv": argv[:1] + [a.replace(str(tmp), "<TMP>") for a in argv[1:]],
                "exchanges": [{"request": [m, p, b if not isinstance(b, bytes) else b.decode()],
                               **_call(port, m, p, raw=b if isinstance(b, bytes) else None,
                                       body=None if isinstance(b, bytes) else b)}
                              for m, p, b in _requests(plan.served_model_name,
                                                       plan.engine == "trtllm")]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
