"""Metrics: a small Prometheus text-format registry with vLLM's metric names, and TRT-LLM's
iteration-stats queue (JSON, drained on read)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from specdec.engines.ranges import Fact, FactTable

__all__ = ["FINISH_REASONS", "Counter", "Gauge", "Histogram", "IterStats", "Registry",
           "VllmMetrics"]

LabelValues = tuple[str, ...]

# vLLM's finished reasons (`FINISH_REASON_STRINGS`, vllm/v1/engine/__init__.py in each wheel): the
# logger creates a vllm:request_success child for every one at start-up (`for reason in
# FinishReason: counter_request_success_base.labels(...)`, vllm/v1/metrics/loggers.py 0.9.2 :257,
# 0.11.0 :305, 0.14.0 :608, 0.19.0 :650, 0.31.0 :734, 0.32.0 :813, 0.33.0 :813). A reason is dated
# at the first pinned release it was read in (the releases between are judged by the older).
_BASE_REASONS = ("stop", "length", "abort")
FINISH_REASONS: FactTable[tuple[str, ...]] = FactTable("finish_reasons", (
    Fact(_BASE_REASONS, "0.9.2 vllm/v1/engine/__init__.py:22, 0.11.0 :21", until="0.14.0"),
    Fact((*_BASE_REASONS, "error"), "0.14.0 vllm/v1/engine/__init__.py:23 (PR #26813)",
         since="0.14.0", until="0.19.0"),
    Fact((*_BASE_REASONS, "error", "repetition"),
         "0.19.0 vllm/v1/engine/__init__.py:29, 0.32.0 :36, 0.33.0 :37 (PR #35451)",
         since="0.19.0"),
))


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_esc(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Metric:
    type = "untyped"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._created: dict[LabelValues, float] = {}

    def _touch(self, lv: LabelValues) -> None:
        if len(lv) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {lv}")
        self._created.setdefault(lv, time.time())

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} {self.type}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    type = "counter"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, doc, labelnames)
        self._v: dict[LabelValues, float] = {}

    def inc(self, lv: LabelValues, amount: float = 1.0) -> None:
        with self._lock:
            self._touch(lv)
            self._v[lv] = self._v.get(lv, 0.0) + amount

    def value(self, lv: LabelValues) -> float:
        return self._v.get(lv, 0.0)

    def samples(self) -> list[str]:
        with self._lock:
            out = []
            for lv, v in self._v.items():
                out.append(f"{self.name}_total{_labels(self.labelnames, lv)} {_fmt(v)}")
                out.append(f"{self.name}_created{_labels(self.labelnames, lv)} "
                           f"{_fmt(self._created[lv])}")
            return out


class Gauge(_Metric):
    type = "gauge"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, doc, labelnames)
        self._v: dict[LabelValues, float] = {}

    def set(self, lv: LabelValues, value: float) -> None:
        with self._lock:
            self._touch(lv)
            self._v[lv] = float(value)

    def samples(self) -> list[str]:
        with self._lock:
            return [f"{self.name}{_labels(self.labelnames, lv)} {_fmt(v)}"
                    for lv, v in self._v.items()]


class Histogram(_Metric):
    type = "histogram"

    def __init__(self, name: str, doc: str, labelnames: Sequence[str],
                 buckets: Iterable[float]) -> None:
        super().__init__(name, doc, labelnames)
        self.buckets = tuple(sorted(buckets)) + (float("inf"),)
        self._counts: dict[LabelValues, list[int]] = {}
        self._sum: dict[LabelValues, float] = {}

    def start(self, lv: LabelValues) -> None:
        """The labelled child at zero (what prometheus_client's ``.labels()`` exports)."""
        with self._lock:
            self._touch(lv)
            self._counts.setdefault(lv, [0] * len(self.buckets))
            self._sum.setdefault(lv, 0.0)

    def observe(self, lv: LabelValues, value: float) -> None:
        self.start(lv)
        with self._lock:
            counts = self._counts[lv]
            for i, b in enumerate(self.buckets):
                if value <= b:
                    counts[i] += 1
            self._sum[lv] += value

    def samples(self) -> list[str]:
        with self._lock:
            out = []
            for lv, counts in self._counts.items():
                for b, c in zip(self.buckets, counts, strict=True):
                    le = f'le="{_fmt(b)}"'
                    out.append(f"{self.name}_bucket{_labels(self.labelnames, lv, le)} {_fmt(c)}")
                out.append(f"{self.name}_count{_labels(self.labelnames, lv)} {_fmt(counts[-1])}")
                out.append(f"{self.name}_sum{_labels(self.labelnames, lv)} "
                           f"{_fmt(self._sum[lv])}")
                out.append(f"{self.name}_created{_labels(self.labelnames, lv)} "
                           f"{_fmt(self._created[lv])}")
            return out


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def add(self, m: _Metric) -> Any:
        self._metrics.append(m)
        return m

    def render(self) -> str:
        lines: list[str] = []
        for m in self._metrics:
            lines += m.header()
            lines += m.samples()
        return "\n".join(lines) + "\n"


_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)


class VllmMetrics:
    """vLLM V1's Prometheus metrics (names, labels and buckets as in vllm/v1/metrics). Every
    labelled child exists from start-up, as the release's logger creates them
    (`create_metric_per_engine` and the finished reasons above), at zero."""

    def __init__(self, model_name: str, *, spec_k: int, cache_info: dict[str, str],
                 finish_reasons: Sequence[str]) -> None:
        self.lv: LabelValues = (model_name, "0")
        ln = ("model_name", "engine")
        r = self.registry = Registry()
        info = r.add(Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                           tuple(cache_info)))
        info.set(tuple(cache_info.values()), 1.0)
        self.running = r.add(Gauge("vllm:num_requests_running",
                                   "Number of requests in model execution batches.", ln))
        self.waiting = r.add(Gauge("vllm:num_requests_waiting",
                                   "Number of requests waiting to be processed.", ln))
        self.kv_usage = r.add(Gauge("vllm:kv_cache_usage_perc",
                                    "KV-cache usage. 1 means 100 percent usage.", ln))
        self.preemptions = r.add(Counter("vllm:num_preemptions",
                                         "Cumulative number of preemption from the engine.", ln))
        self.prompt_tokens = r.add(Counter("vllm:prompt_tokens",
                                           "Number of prefill tokens processed.", ln))
        self.generation_tokens = r.add(Counter("vllm:generation_tokens",
                                               "Number of generation tokens processed.", ln))
        self.prefix_queries = r.add(Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", ln))
        self.prefix_hits = r.add(Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            ln))
        self.success = r.add(Counter("vllm:request_success",
                                     "Count of successfully processed requests.",
                                     (*ln, "finished_reason")))
        self.prompt_hist = r.add(Histogram("vllm:request_prompt_tokens",
                                           "Number of prefill tokens processed.", ln,
                                           _TOKEN_BUCKETS))
        self.gen_hist = r.add(Histogram("vllm:request_generation_tokens",
                                        "Number of generation tokens processed.", ln,
                                        _TOKEN_BUCKETS))
        self.iter_tokens = r.add(Histogram("vllm:iteration_tokens_total",
                                           "Histogram of number of tokens per engine_step.", ln,
                                           (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                            8192, 16384)))
        self.ttft = r.add(Histogram("vllm:time_to_first_token_seconds",
                                    "Histogram of time to first token in seconds.", ln,
                                    _TTFT_BUCKETS))
        self.itl = r.add(Histogram("vllm:inter_token_latency_seconds",
                                   "Histogram of inter-token latency in seconds.", ln,
                                   _ITL_BUCKETS))
        self.tpot = r.add(Histogram("vllm:request_time_per_output_token_seconds",
                                    "Histogram of time_per_output_token_seconds per request.",
                                    ln, _ITL_BUCKETS))
        self.e2e = r.add(Histogram("vllm:e2e_request_latency_seconds",
                                   "Histogram of e2e request latency in seconds.", ln,
                                   _E2E_BUCKETS))
        self.queue = r.add(Histogram("vllm:request_queue_time_seconds",
                                     "Histogram of time spent in WAITING phase for request.", ln,
                                     _E2E_BUCKETS))
        self.prefill_time = r.add(Histogram("vllm:request_prefill_time_seconds",
                                            "Histogram of time spent in PREFILL phase for "
                                            "request.", ln, _E2E_BUCKETS))
        self.decode_time = r.add(Histogram("vllm:request_decode_time_seconds",
                                           "Histogram of time spent in DECODE phase for request.",
                                           ln, _E2E_BUCKETS))
        self.spec_k = spec_k
        if spec_k:
            self.drafts = r.add(Counter("vllm:spec_decode_num_drafts",
                                        "Number of spec decoding drafts.", ln))
            self.draft_tokens = r.add(Counter("vllm:spec_decode_num_draft_tokens",
                                              "Number of draft tokens.", ln))
            self.accepted = r.add(Counter("vllm:spec_decode_num_accepted_tokens",
                                          "Number of accepted tokens.", ln))
            self.per_pos = r.add(Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                         "Accepted tokens per draft position.",
                                         (*ln, "position")))
            self.drafts.inc(self.lv, 0)
            self.draft_tokens.inc(self.lv, 0)
            self.accepted.inc(self.lv, 0)
            for i in range(spec_k):
                self.per_pos.inc((*self.lv, str(i)), 0)
        for c in (self.preemptions, self.prompt_tokens, self.generation_tokens,
                  self.prefix_queries, self.prefix_hits):
            c.inc(self.lv, 0)
        for reason in finish_reasons:
            self.success.inc((*self.lv, reason), 0)
        for h in (self.prompt_hist, self.gen_hist, self.iter_tokens, self.ttft, self.itl,
                  self.tpot, self.e2e, self.queue, self.prefill_time, self.decode_time):
            h.start(self.lv)
        for g in (self.running, self.waiting, self.kv_usage):
            g.set(self.lv, 0)

    def render(self) -> str:
        return self.registry.render()


class IterStats:
    """TRT-LLM ``/metrics``: per-iteration stats, kept up to ``maxlen`` and drained on read."""

    def __init__(self, enabled: bool, maxlen: int = 1000) -> None:
        self.enabled = enabled
        self._q: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def push(self, entry: dict[str, Any]) -> None:
        if self.enabled:
            with self._lock:
                self._q.append(entry)

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            out = list(self._q)
            self._q.clear()
            return out
