"""Where `specdec watch` reads a Dynamo serving group member: its worker's system server (which
re-exports the worker's vLLM metrics, so vLLM's names apply) and, on the frontend member, the
frontend's own request counters on its HTTP port.

* worker: ``DYN_SYSTEM_PORT``'s ``/metrics`` on the member's group address (``DYN_SYSTEM_HOST``:
  the system server binds there, not on loopback); a ``dynamo.vllm`` worker registers vLLM's
  ``vllm:`` metrics there (ai-dynamo 1.6.1 ``dynamo/vllm/main.py:308-365``,
  ``register_engine_metrics_callback(..., metric_prefix_filters=["vllm:", "lmcache:"])``);
* frontend: ``/metrics`` on its HTTP port (loopback, behind the API proxy); names from
  ai-dynamo 1.6.1 ``dynamo/prometheus_names.py``: prefix ``dynamo_frontend`` (:419;
  ``DYN_METRICS_PREFIX`` overrides it, :93), ``requests_total`` (:97), ``queued_requests``
  (:103), ``inflight_requests`` (:106), ``output_tokens_total`` (:143).
"""

from __future__ import annotations

from specdec.engines.base import MetricsSource
from specdec.engines.vllm import metrics as vllm_metrics
from specdec.plan.types import DynamoPlan, Plan

__all__ = ["FRONTEND_COUNTERS", "FRONTEND_GAUGES", "sources"]

FRONTEND_COUNTERS = (("requests", "dynamo_frontend_requests_total"),
                     ("generated", "dynamo_frontend_output_tokens_total"))
FRONTEND_GAUGES = (("running", "dynamo_frontend_inflight_requests"),
                   ("waiting", "dynamo_frontend_queued_requests"))


def sources(plan: Plan, d: DynamoPlan) -> list[MetricsSource]:
    out = [vllm_metrics.engine_source(plan, "worker", d.address, d.system_port, d.vllm_version,
                                      truth=False)]
    if d.is_frontend:
        out.append(MetricsSource("frontend", "127.0.0.1", plan.engine_port, "/metrics",
                                 "prometheus", FRONTEND_COUNTERS, FRONTEND_GAUGES))
    return out
