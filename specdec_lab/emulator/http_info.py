"""The routes that answer about the engine: ``GET /v1/models``, ``GET /metrics``,
``GET /health_generate`` (trtllm-serve) and the lab's ``/lab/truth`` routes."""

from __future__ import annotations

import queue
import time
import uuid
from typing import Any

from specdec_lab.emulator.core import SeqRequest
from specdec_lab.emulator.http_base import BaseHandler

__all__ = ["health_generate", "lab", "metrics", "models"]


def models(h: BaseHandler) -> dict[str, Any]:
    """The ``/v1/models`` body: one entry per served model name."""
    cfg = h.cfg
    now = int(time.time())
    data = []
    for name in cfg.served_model_names:
        if h.trt:
            data.append({"id": name, "object": "model", "created": now,
                         "owned_by": "tensorrt_llm"})
            continue
        data.append({
            "id": name, "object": "model", "created": now, "owned_by": "vllm",
            "root": cfg.model_ref, "parent": None,
            "max_model_len": cfg.setup.model_len,
            "permission": [{
                "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                "created": now, "allow_create_engine": False, "allow_sampling": True,
                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None,
                "is_blocking": False}],
        })
    return {"object": "list", "data": data}


def metrics(h: BaseHandler) -> None:
    """vLLM: Prometheus text; trtllm-serve: JSON iteration stats, drained on read."""
    svc = h.svc
    if h.trt:
        h.send_json(200, svc.iter_stats.drain())
    else:
        assert svc.vllm is not None
        h.send_body(200, svc.vllm.render().encode(),
                    "text/plain; version=0.0.4; charset=utf-8")


def health_generate(h: BaseHandler) -> None:
    """trtllm-serve's ``/health_generate``: 200 once a one-token request comes back."""
    sink: queue.Queue[Any] = queue.Queue()
    req = SeqRequest(prompt_key=0, prompt_tokens=8, category="chat", max_tokens=1,
                     ignore_eos=True, temperature=0.0)
    h.svc.scheduler.submit([req], sink)
    item = sink.get()
    h.send_body(200 if item is not None else 500, b"")


def lab(h: BaseHandler, path: str) -> None:
    """The lab's ground truth: ``GET /lab/truth`` and ``POST /lab/truth/reset``."""
    truth = h.svc.truth
    if path == "/lab/truth" and h.command in ("GET", "HEAD"):
        h.send_json(200, truth.summary())
    elif path == "/lab/truth/reset" and h.command == "POST":
        truth.reset()
        h.send_json(200, {"reset": True})
    else:
        h.send_json(404, {"detail": "Not Found"})
