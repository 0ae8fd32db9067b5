"""trtllm-serve's iteration stats as `specdec watch` reads them (``GET /metrics``: a JSON list
that drains on read; empty unless ``enable_iter_perf_stats``, which specdec's engine.yaml sets).

Field names (JSON camelCase of the C++ ``IterationStats``; NVIDIA/TensorRT-LLM
``cpp/tensorrt_llm/nanobind/executor/bindings.cpp`` binds them, ``JsonSerialization::toJsonStr``
writes them; docs/research/watch.md §2, not verified at the 1.2.1 tag):

* ``specDecodingStats.{numDraftTokens, numAcceptedTokens, numRequestsWithDraftTokens}``, per
  iteration (PyExecutor: acceptance length = (accepted + requests with drafts) / requests with
  drafts);
* ``inflightBatchingStats.numGenRequests`` (decoding requests this iteration) and
  ``avgNumDecodedTokensPerIter`` (tokens decoded per such request: ``fillIterationStats`` in
  ``cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp``), ``numQueuedRequests``,
  ``numCompletedRequests``, ``iterLatencyMS``.

``GET /metrics`` drains a bounded queue (``iter_stats_max_iterations``): there must be one reader
per server, polling faster than the queue fills; ``iter`` numbers tell what was missed.
"""

from __future__ import annotations

from specdec.engines.base import MetricsSource
from specdec.plan.types import Plan

__all__ = ["COUNTERS", "GAUGES", "engine_source"]

_IFB = "inflightBatchingStats"
COUNTERS = (
    ("drafts", "specDecodingStats.numRequestsWithDraftTokens"),
    ("draft_tokens", "specDecodingStats.numDraftTokens"),
    ("accepted", "specDecodingStats.numAcceptedTokens"),
    ("steps", f"{_IFB}.numGenRequests"),
    ("generated", f"{_IFB}.numGenRequests*{_IFB}.avgNumDecodedTokensPerIter"),
    ("requests", "numCompletedRequests"),
)
GAUGES = (("running", f"{_IFB}.numGenRequests"), ("waiting", "numQueuedRequests"))


def engine_source(plan: Plan) -> MetricsSource:
    """trtllm-serve's ``/metrics`` on its own port on loopback (behind the API proxy)."""
    return MetricsSource("engine", "127.0.0.1", plan.engine_port, "/metrics", "json-iterations",
                         COUNTERS, GAUGES, weight="iterLatencyMS", truth=True)
