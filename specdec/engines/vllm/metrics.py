"""vLLM's own Prometheus names for what `specdec watch` reads (V1 engine, every pinned release).

Sources (the wheels of each pinned release, name strings; docs/research/watch.md §1):

* speculation counters, ``vllm/v1/spec_decode/metrics.py``: ``vllm:spec_decode_num_drafts``
  (0.9.2 :138, 0.11.0 :150, 0.14.0 :154, 0.19.0 :155, 0.31.0 :229), ``…_num_draft_tokens``,
  ``…_num_accepted_tokens`` (the next lines); declared without ``_total``, exposed with it by
  prometheus_client; they exist only when a ``speculative_config`` is set;
* ``vllm/v1/metrics/loggers.py``: ``vllm:generation_tokens`` (every token a request received,
  accepted drafts included: ``IterationStats.num_generation_tokens``), ``vllm:request_success``
  (per ``finished_reason``), the gauges ``vllm:num_requests_running`` ("requests in model
  execution batches") and ``vllm:num_requests_waiting`` (0.9.2 :174/:180 … 0.31.0 :509/:519).

A release that runs the plan's method on the V0 engine (0.9.2 with a draft model) exports
``vllm:spec_decode_num_*_total`` as a sum of running totals (``vllm/engine/metrics.py``
:586-602 adds the sampler's cumulative counts every log interval), so no difference of them is
a token count: the watch says it cannot read acceptance there.
"""

from __future__ import annotations

from specdec.engines.base import MetricsSource
from specdec.engines.vllm import facts
from specdec.plan.types import Plan

__all__ = ["COUNTERS", "GAUGES", "V0_CAVEAT", "engine_source"]

COUNTERS = (
    ("drafts", "vllm:spec_decode_num_drafts_total"),
    ("draft_tokens", "vllm:spec_decode_num_draft_tokens_total"),
    ("accepted", "vllm:spec_decode_num_accepted_tokens_total"),
    ("generated", "vllm:generation_tokens_total"),
    ("requests", "vllm:request_success_total"),
)
GAUGES = (("running", "vllm:num_requests_running"), ("waiting", "vllm:num_requests_waiting"))
V0_CAVEAT = ("vLLM {v} runs {m} on its V0 engine, whose vllm:spec_decode_*_total counters add "
             "running totals (vllm/engine/metrics.py:586-602): acceptance cannot be read")


def caveat(plan: Plan, version: str) -> str | None:
    """Why the release's speculation counters are no token counts (V0), or None."""
    if plan.speculative and facts.vllm_facts(version).method(plan.method).value == "v0":
        return V0_CAVEAT.format(v=version, m=plan.method)
    return None


def engine_source(plan: Plan, role: str, address: str, port: int, version: str,
                  truth: bool) -> MetricsSource:
    """vLLM's ``/metrics`` (Prometheus text) at ``address:port``."""
    return MetricsSource(role, address, port, "/metrics", "prometheus", COUNTERS, GAUGES,
                         truth=truth, caveat=caveat(plan, version))
