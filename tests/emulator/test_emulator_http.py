"""The engine emulator as a process: `python3 -m specdec_lab.emulator vllm serve ...` and
`... trtllm-serve ...` on 127.0.0.1 with a free port and a small time scale; every endpoint,
streaming and non-streaming, ground truth, and each fault. Only PIDs started here are killed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specdec.catalog import load_catalog
from tests.hostfiles import engine_yaml_on_host
from tests.waiting import wait_until

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
HEAD8 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SPEC8 = json.dumps({"method": "eagle3", "model": HEAD8, "num_speculative_tokens": 3,
                    "draft_tensor_parallel_size": 1})
SECRET = "hf_emulator_test_secret_token_value"
GOLDEN = Path(__file__).resolve().parent.parent / "golden"
SCALE = "0.02"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Emu:
    """One emulator process (started, and stopped, by the test that owns it)."""

    def __init__(self, tmp: Path, argv: list[str], *, device: str = "agx-orin-64gb",
                 fault: str | None = None, scale: str = SCALE, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SPECDEC_EMU_", "HF_", "VLLM_"))}
        token = tmp / "hf_token"
        token.write_text(SECRET + "\n")
        e.update({"HF_HOME": str(tmp / "hf"), "HF_TOKEN_PATH": str(token),
                  "SPECDEC_EMU_DEVICE": device, "SPECDEC_EMU_TIME_SCALE": scale,
                  "PYTHONUNBUFFERED": "1"})
        if fault:
            e["SPECDEC_EMU_FAULT"] = fault
        e.update(env or {})
        self.log_path = tmp / f"emu-{self.port}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specdec_lab.emulator", *argv, "--host", "127.0.0.1",
             "--port", str(self.port)],
            env=e, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 30.0) -> Emu:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"emulator exited {self.proc.returncode}:\n{self.log}")
            try:
                if httpx.get(self.base + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"emulator not ready after {timeout}s:\n{self.log}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()
        return self.proc.returncode


def vllm_argv(*extra: str, model: str = LLAMA8) -> list[str]:
    return ["vllm", "serve", model, "--served-model-name", "llama8b", "--max-model-len", "8192",
            "--max-num-seqs", "8", "--gpu-memory-utilization", "0.65", *extra]


def chat(base: str, content: str = "Tell me about memory bandwidth.", **kw: Any) -> dict[str, Any]:
    body = {"model": "llama8b", "messages": [{"role": "user", "content": content}],
            "temperature": 0, **kw}
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def stream(base: str, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """SSE events (parsed) and raw data lines of one streaming request."""
    events, raw = [], []
    with httpx.stream("POST", base + path, json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            raw.append(line)
            if line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events, raw


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


def roofline_s() -> float:
    """Device seconds of one batch-1 step of Llama-3.1-8B on an AGX Orin, from the timing
    model's inputs (the catalog): its decode weights read at the device's bandwidth x vLLM's
    achievable fraction there."""
    cat = load_catalog()
    dev, target = cat.devices["agx-orin-64gb"], cat.models[LLAMA8]
    return target.decode_gib * 2**30 / (dev.bandwidth_gbs * 1e9 * dev.bandwidth_efficiency["vllm"])


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emu]:
    emu = Emu(tmp_path_factory.mktemp("vllm"),
              vllm_argv("--speculative-config", SPEC8)).wait_ready()
    yield emu
    assert emu.stop() == 0
    assert SECRET not in emu.log
    assert "Shutting down" in emu.log


# -- vLLM -----------------------------------------------------------------------------------------
def test_vllm_simple_endpoints(vllm: Emu) -> None:
    b = vllm.base
    assert httpx.get(b + "/health").status_code == 200
    assert httpx.get(b + "/ping").status_code == 200
    assert httpx.post(b + "/ping").status_code == 200
    assert httpx.get(b + "/version").json() == {"version": "0.19.0"}  # AGX's default image
    models = httpx.get(b + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["llama8b"]
    assert models["data"][0]["max_model_len"] == 8192 and models["data"][0]["root"] == LLAMA8
    assert httpx.get(b + "/nope").status_code == 404
    assert httpx.get(b + "/v1/chat/completions").status_code == 405
    log = vllm.log
    for marker in ("Model loading took", "Available KV cache memory", "GPU KV cache size",
                   "Maximum concurrency for 8,192 tokens", "Starting vLLM API server 0 on "
                   f"http://127.0.0.1:{vllm.port}", "Application startup complete."):
        assert marker in log


def test_vllm_chat_non_streaming_fixed_length(vllm: Emu) -> None:
    r = chat(vllm.base, max_tokens=40, ignore_eos=True)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    assert r["usage"]["completion_tokens"] == 40
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["choices"][0]["message"]["role"] == "assistant"
    assert r["choices"][0]["message"]["content"].strip()
    r = chat(vllm.base, max_tokens=25, min_tokens=25)
    assert r["usage"]["completion_tokens"] == 25
    assert r["usage"]["prompt_tokens"] > 5


def test_vllm_chat_natural_stop_is_deterministic(vllm: Emu) -> None:
    a = chat(vllm.base, "Write a poem about the sea.", max_tokens=2000)
    b = chat(vllm.base, "Write a poem about the sea.", max_tokens=2000)
    assert a["choices"][0]["finish_reason"] == "stop"
    assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"] < 2000
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


def test_vllm_chat_streaming_with_usage(vllm: Emu) -> None:
    events, raw = stream(vllm.base, "/v1/chat/completions", {
        "model": "llama8b", "messages": [{"role": "user", "content": "Explain caching."}],
        "max_tokens": 48, "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    assert raw[-1] == "data: [DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    final = events[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 48
    content = [e for e in events[1:-1] if e["choices"]]
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    # speculation bundles several tokens into one chunk: fewer chunks than tokens
    assert 48 / 4 <= len(content) < 48


def test_vllm_stream_without_usage_has_no_usage_chunk(vllm: Emu) -> None:
    events, _ = stream(vllm.base, "/v1/chat/completions", {
        "model": "llama8b", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8, "ignore_eos": True, "stream": True})
    assert all(e["choices"] for e in events) and all("usage" not in e for e in events)


def test_vllm_completions(vllm: Emu) -> None:
    r = httpx.post(vllm.base + "/v1/completions", json={
        "model": "llama8b", "prompt": "def fib(n):", "max_tokens": 30, "ignore_eos": True,
        "temperature": 0}, timeout=30).json()
    assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 30
    assert isinstance(r["choices"][0]["text"], str)
    events, raw = stream(vllm.base, "/v1/completions", {
        "model": "llama8b", "prompt": "def fib(n):", "max_tokens": 30, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}})
    assert raw[-1] == "data: [DONE]" and events[-1]["usage"]["completion_tokens"] == 30
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"])


def test_vllm_request_errors(vllm: Emu) -> None:
    b = vllm.base + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    r = httpx.post(b, json={"model": "gpt-4", "messages": msgs})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = httpx.post(b, json={"model": "llama8b", "messages": msgs, "max_tokens": 100000})
    assert r.status_code == 400 and "maximum context length is 8192" in r.json()["error"]["message"]
    r = httpx.post(b, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_vllm_metrics_exist_from_start_up(tmp_path: Path) -> None:
    """Every labelled child is exported at zero before the first request, as the release's
    logger creates it: a request_success counter per finished reason of the release."""
    for version, reasons in (("0.9.2", ["stop", "length", "abort"]),
                             ("0.32.0", ["stop", "length", "abort", "error", "repetition"])):
        emu = Emu(tmp_path, vllm_argv(), env={"SPECDEC_EMU_ENGINE_VERSION": version})
        try:
            text = httpx.get(emu.wait_ready().base + "/metrics").text
        finally:
            assert emu.stop() == 0
        lines = [ln for ln in text.splitlines() if ln.startswith("vllm:request_success_total{")]
        assert [ln.split('finished_reason="')[1].split('"')[0] for ln in lines] == reasons
        assert all(ln.endswith(" 0.0") for ln in lines)
        for name in ("vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds"
                     "_count", "vllm:inter_token_latency_seconds_count"):
            assert metric(text, name, model_name="llama8b", engine="0") == 0


def test_vllm_metrics_and_truth_agree(vllm: Emu) -> None:
    b = vllm.base
    assert httpx.post(b + "/lab/truth/reset").json() == {"reset": True}
    assert httpx.get(b + "/lab/truth").json()["requests"] == 0
    before = httpx.get(b + "/metrics").text
    start = time.perf_counter()
    for i in range(4):
        chat(b, f"Question {i}: how do GPUs work?", max_tokens=32, ignore_eos=True)
    elapsed = time.perf_counter() - start
    after = httpx.get(b + "/metrics").text
    lv = {"model_name": "llama8b", "engine": "0"}

    def delta(name: str, **extra: str) -> float:
        return metric(after, name, **lv, **extra) - metric(before, name, **lv, **extra)

    drafts = delta("vllm:spec_decode_num_drafts_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert delta("vllm:spec_decode_num_draft_tokens_total") == 3 * drafts > 0
    per_pos = [delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
               for p in range(3)]
    assert per_pos == sorted(per_pos, reverse=True) and sum(per_pos) == accepted
    assert delta("vllm:generation_tokens_total") == 4 * 32
    assert delta("vllm:request_success_total", finished_reason="length") == 4
    assert delta("vllm:request_success_total", finished_reason="stop") == 0
    assert delta("vllm:time_to_first_token_seconds_count") == 4
    assert "vllm:inter_token_latency_seconds_bucket" in after
    assert "vllm:num_requests_running{" in after and "vllm:kv_cache_usage_perc{" in after

    truth = httpx.get(b + "/lab/truth").json()
    assert truth["requests"] == 4 and truth["output_tokens"] == 128
    acc = truth["acceptance"]
    assert acc["drafts"] == drafts and acc["accepted_tokens"] == accepted
    assert acc["acceptance_length"] == pytest.approx(1 + accepted / drafts, abs=1e-3)
    assert 1.5 < acc["acceptance_length"] < 4.0
    # device time: the EAGLE-3 head's three forwards and the CPU's share of each step add less
    # than half again to the target's weights
    device_s = truth["step_time_s"]["model"]
    assert roofline_s() < device_s / truth["steps"] < 1.5 * roofline_s()
    # the wall never runs ahead of device time x the time scale (a busy machine only adds), and
    # the server's span lies inside this client's
    device_tpot_ms = device_s / truth["steps"] / acc["acceptance_length"] * 1000
    assert truth["unscaled"]["tpot_ms_p50"] > 0.8 * device_tpot_ms
    assert 128 / elapsed <= truth["throughput_tok_s"] <= 128 / (device_s * float(SCALE))
    for key in ("tpot_ms_p50", "ttft_ms_p50", "throughput_tok_s", "requests"):
        assert key in truth
    httpx.post(b + "/lab/truth/reset")
    assert httpx.get(b + "/lab/truth").json()["requests"] == 0
    # vLLM's periodic stat log (every 10 emulated s, >= 1 s wall) reports acceptance too
    deadline = time.monotonic() + 30
    while "SpecDecoding metrics: Mean acceptance length" not in vllm.log:
        assert time.monotonic() < deadline, vllm.log[-2000:]
        time.sleep(0.1)
    assert "Avg generation throughput" in vllm.log


def test_vllm_concurrent_requests_are_batched(vllm: Emu) -> None:
    httpx.post(vllm.base + "/lab/truth/reset")
    start = threading.Barrier(6)

    def one(i: int) -> None:
        start.wait()  # arrive together even when this machine is busy
        chat(vllm.base, f"topic {i}", max_tokens=192, ignore_eos=True)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    truth = httpx.get(vllm.base + "/lab/truth").json()
    assert truth["requests"] == 6 and truth["mean_batch"] > 3


# -- API key ---------------------------------------------------------------------------------------
def test_vllm_api_key_guards_v1_only(tmp_path: Path) -> None:
    emu = Emu(tmp_path, vllm_argv("--api-key", "k-123")).wait_ready()
    try:
        assert httpx.get(emu.base + "/v1/models").status_code == 401
        ok = httpx.get(emu.base + "/v1/models", headers={"Authorization": "Bearer k-123"})
        assert ok.status_code == 200 and not any(
            "speculative" in line for line in httpx.get(emu.base + "/metrics").text.splitlines()
            if line.startswith("vllm:spec_decode"))
        assert httpx.get(emu.base + "/metrics").status_code == 200
    finally:
        assert emu.stop() == 0
    assert "k-123" not in emu.log


# -- trtllm-serve ----------------------------------------------------------------------------------
def test_trtllm_serve(tmp_path: Path) -> None:
    golden = GOLDEN / "dgx-spark-trtllm-docker"
    plan = json.loads((golden / "plan.json").read_text())
    yaml_path, env = engine_yaml_on_host(golden, plan, tmp_path)
    emu = Emu(tmp_path, ["trtllm-serve", "openai/gpt-oss-120b", "--backend", "pytorch",
                         "--max_batch_size", "16", "--max_seq_len", "16384",
                         "--kv_cache_free_gpu_memory_fraction", "0.7",
                         "--extra_llm_api_options", str(yaml_path)], device="dgx-spark",
              env={**env, "SPECDEC_EMU_ENGINE_VERSION": plan["engine_version"]})
    try:
        emu.wait_ready()
        b = emu.base
        assert httpx.get(b + "/health_generate", timeout=30).status_code == 200
        model = httpx.get(b + "/v1/models").json()["data"][0]
        assert isinstance(model.pop("created"), int)  # the time of the request (trtllm-serve)
        assert model == {"id": "openai/gpt-oss-120b", "object": "model",
                         "owned_by": "tensorrt_llm"}
        httpx.get(b + "/metrics")  # drain
        body = {"model": "openai/gpt-oss-120b", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 40, "ignore_eos": True, "temperature": 0}
        r = httpx.post(b + "/v1/chat/completions", json=body, timeout=30).json()
        assert r["usage"]["completion_tokens"] == 40
        assert r["choices"][0]["avg_decoded_tokens_per_iter"] > 1.0
        events, raw = stream(b, "/v1/chat/completions",
                             {**body, "stream": True, "stream_options": {"include_usage": True}})
        assert raw[-1] == "data: [DONE]" and events[-1]["usage"]["completion_tokens"] == 40
        # trtllm-serve's protocol forbids unknown fields
        bad = httpx.post(b + "/v1/chat/completions", json={**body, "frobnicate": 1})
        assert bad.status_code == 400 and "Extra inputs are not permitted" in bad.text
        stats = httpx.get(b + "/metrics").json()
        assert isinstance(stats, list) and stats
        spec = [s["specDecodingStats"] for s in stats if s["specDecodingStats"][
            "numRequestsWithDraftTokens"]]
        assert spec and all(s["numDraftTokens"] == 5 * s["numRequestsWithDraftTokens"]
                            for s in spec)
        assert all(0 < s["draftOverhead"] < 1 and s["acceptanceLength"] >= 1 for s in spec)
        assert all(s["iterLatencyMS"] > 0 and "kvCacheStats" in s for s in stats)
        assert httpx.get(b + "/metrics").json() == []  # drained on read
        truth = httpx.get(b + "/lab/truth").json()
        assert truth["engine"] == "trtllm" and truth["requests"] == 2
    finally:
        assert emu.stop() == 0
    assert "Uvicorn running on http://127.0.0.1" in emu.log


# -- startup failures ------------------------------------------------------------------------------
def test_does_not_fit_exits_nonzero_with_vllm_error(tmp_path: Path) -> None:
    emu = Emu(tmp_path, vllm_argv(), device="orin-nano-8gb")
    try:
        assert emu.wait_exit() == 1
    finally:
        emu.stop()
    log = emu.log
    assert "EngineCore failed to start." in log
    assert "RuntimeError: Engine core initialization failed." in log
    assert "Free memory on device cuda:0" in log or "CUDA out of memory" in log


def test_offline_needs_prefetched_weights(tmp_path: Path) -> None:
    argv = vllm_argv("--speculative-config", SPEC8)
    emu = Emu(tmp_path, argv, env={"HF_HUB_OFFLINE": "1"})
    try:
        assert emu.wait_exit() == 1
    finally:
        emu.stop()
    assert "couldn't find it in the cached files" in emu.log
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"),
           "HF_TOKEN_PATH": str(tmp_path / "hf_token"), "SPECDEC_EMU_TIME_SCALE": "0.0001"}
    for repo in (LLAMA8, HEAD8):  # what the deploy's model_prefetch role does
        subprocess.run([sys.executable, "-m", "specdec_lab.emulator.hf", "download", repo],
                       env=env, check=True, capture_output=True, timeout=60)
    emu = Emu(tmp_path, argv, env={"HF_HUB_OFFLINE": "1"}).wait_ready()
    assert emu.stop() == 0


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        emu = Emu(tmp_path, vllm_argv(), port=int(s.getsockname()[1]))
        try:
            assert emu.wait_exit() == 1
        finally:
            emu.stop()
    assert "Address already in use" in emu.log


# -- faults ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fault", "marker"), [
    ("crash_at_start", "an illegal memory access was encountered"),
    ("oom", "torch.OutOfMemoryError: CUDA out of memory"),
])
def test_fault_startup_crash(tmp_path: Path, fault: str, marker: str) -> None:
    emu = Emu(tmp_path, vllm_argv(), fault=fault)
    try:
        assert emu.wait_exit() != 0
    finally:
        emu.stop()
    assert marker in emu.log and "vLLM API server version" in emu.log


def test_fault_slow_start(tmp_path: Path) -> None:
    t0 = time.monotonic()
    emu = Emu(tmp_path, vllm_argv(), fault="slow_start:1.5")
    try:
        wait_until(lambda: "Initializing a V1 LLM engine" in emu.log, "the engine to start")
        with pytest.raises(httpx.ConnectError):  # bound, not listening: refused
            httpx.get(emu.base + "/health", timeout=1)
        emu.wait_ready()
        assert time.monotonic() - t0 >= 1.5
    finally:
        assert emu.stop() == 0


def test_fault_hang_after(tmp_path: Path) -> None:
    emu = Emu(tmp_path, vllm_argv(), fault="hang_after:2").wait_ready()
    try:
        for _ in range(2):
            chat(emu.base, max_tokens=4, ignore_eos=True)
        with pytest.raises(httpx.ReadTimeout):  # accepted, never answered
            httpx.post(emu.base + "/v1/chat/completions", timeout=httpx.Timeout(1.0, connect=1),
                       json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(emu.base + "/health", timeout=httpx.Timeout(0.5, connect=1))
        assert emu.proc.poll() is None
    finally:
        assert emu.stop() == 0


def test_fault_5xx_burst(tmp_path: Path) -> None:
    emu = Emu(tmp_path, vllm_argv(), fault="5xx_burst:2:2").wait_ready()
    try:
        codes = []
        for _ in range(5):
            r = httpx.post(emu.base + "/v1/chat/completions", timeout=30, json={
                "messages": [{"role": "user", "content": "x"}], "max_tokens": 4})
            codes.append(r.status_code)
        assert codes == [200, 500, 500, 200, 200]
        assert httpx.get(emu.base + "/lab/truth").json()["failed"] == 2
    finally:
        assert emu.stop() == 0


def test_fault_slowdown(tmp_path: Path) -> None:
    # ~5 ms steps (AGX Orin, Llama-3.1-8B, x0.05), each completed request adds 100%
    emu = Emu(tmp_path, vllm_argv(), fault="slowdown:1.0", scale="0.05").wait_ready()
    try:
        steps, tpots = [], []
        for i in range(5):
            httpx.post(emu.base + "/lab/truth/reset")
            chat(emu.base, f"q{i}", max_tokens=8, ignore_eos=True)
            truth = httpx.get(emu.base + "/lab/truth").json()
            # the engine's schedule: its steps' device time x the fault's factor x the scale
            steps.append(truth["step_time_s"]["wall"] / truth["steps"] * 1000)
            tpots.append(truth["tpot_ms_p50"])
            assert roofline_s() < truth["step_time_s"]["model"] / truth["steps"] \
                < 1.1 * roofline_s()  # batch 1, plain decoding: the weights, once a step
        assert steps[1] == pytest.approx(2 * steps[0], rel=0.01)
        assert steps[4] == pytest.approx(5 * steps[0], rel=0.01)
        # what the client saw: a step per token (no speculation), never ahead of the schedule
        assert all(t > 0.9 * s for t, s in zip(tpots, steps, strict=True)), (tpots, steps)
    finally:
        assert emu.stop() == 0


def test_sigterm_mid_stream_exits_cleanly(tmp_path: Path) -> None:
    emu = Emu(tmp_path, vllm_argv()).wait_ready()
    outcome: list[str] = []

    def long_request() -> None:
        try:
            chat(emu.base, max_tokens=4000, ignore_eos=True)  # ~8 s at this time scale
            outcome.append("answered")
        except (httpx.HTTPError, AssertionError):
            outcome.append("cut")

    thread = threading.Thread(target=long_request, daemon=True)
    thread.start()
    wait_until(lambda: metric(httpx.get(emu.base + "/metrics").text, "vllm:num_requests_running")
               == 1, "the request to run")
    assert emu.stop() == 0  # SIGTERM, not the kill after 10 s
    thread.join(30)
    assert outcome == ["cut"]  # the engine stopped mid-stream, it did not drain the request
