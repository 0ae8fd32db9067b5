"""The running engine: core + real-time scheduler + metrics + ground truth, for the HTTP layer.

`EngineService.generate` submits a parsed request and yields `Event`s (one per engine step that
produced tokens for it) as the scheduler publishes them; the server turns them into SSE chunks or
one JSON response. Request-level metrics (TTFT, TPOT, e2e) and the truth record are completed by
the server through `finish`, because only it knows when bytes reached the socket. The metrics
and vLLM's stat log are kept by `EngineStats` (`engine_stats`).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterator
from typing import Any

from specdec_lab.emulator.core import EngineCore, StepResult
from specdec_lab.emulator.engine_stats import EngineStats
from specdec_lab.emulator.memory import MemoryReport
from specdec_lab.emulator.metrics import IterStats, VllmMetrics
from specdec_lab.emulator.openai import GenRequest
from specdec_lab.emulator.request import Event, RequestState
from specdec_lab.emulator.runtime import RunContext, ServeConfig
from specdec_lab.emulator.scheduler import Scheduler
from specdec_lab.emulator.truth import RequestRecord, Truth

__all__ = ["EngineService"]


class EngineService:
    def __init__(self, cfg: ServeConfig, ctx: RunContext, mem: MemoryReport) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.mem = mem
        setup = cfg.setup
        self.model = setup.engine_model(kv_capacity_tokens=mem.kv_tokens)
        self.core = EngineCore(self.model)
        self.name = cfg.served_model_names[0]
        self._lock = threading.Lock()
        self.request_number = 0  # generation requests received (5xx_burst counts these)
        self.completed_requests = 0  # generation requests answered (hang_after counts these)
        spec_k = setup.k if setup.speculative else 0
        self.stats = EngineStats(cfg, ctx, mem, self.name, spec_k, counts=self.running_waiting)
        self.vllm: VllmMetrics | None = self.stats.vllm
        self.iter_stats: IterStats = self.stats.iter_stats
        self.truth = Truth(ctx.time_scale, {
            "engine": cfg.engine, "device": ctx.device.id, "model": setup.target.id,
            "power_mode": ctx.device.power_mode, "bandwidth_gbs": ctx.device.bandwidth_gbs,
            "method": setup.method if setup.speculative else "none",
            "num_speculative_tokens": spec_k,
            "draft": setup.drafter.id if setup.drafter else None,
        })
        self.scheduler = Scheduler(self.core, time_scale=ctx.time_scale, faults=ctx.faults,
                                   on_step=self._on_step, on_idle=self._follow_power,
                                   fault_counter=lambda: self.completed_requests)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self.scheduler.start()
        self.stats.start()

    def stop(self) -> None:
        self.scheduler.stop()

    @property
    def hung(self) -> bool:
        return self.ctx.faults.hung(self.completed_requests)

    def next_request(self) -> int:
        with self._lock:
            self.request_number += 1
            return self.request_number

    # -- requests -------------------------------------------------------------------------------
    def generate(self, gen: GenRequest, arrival: float, sink: queue.Queue[Any] | None = None
                 ) -> tuple[RequestState, Iterator[Event]]:
        """Submit ``gen``; its events as they are published (``sink``: the queue they arrive
        on, when the caller needs to end the wait itself)."""
        st = RequestState(gen=gen, record=RequestRecord(arrival=arrival,
                                                        category=gen.categories[0]))
        n = len(gen.choice_of)
        st.completion = [0] * n
        st.finish = [None] * n
        st.cached = [0] * n
        sink = sink if sink is not None else queue.Queue()
        st.ids = self.scheduler.submit(list(gen.seqs), sink)
        index = {sid: i for i, sid in enumerate(st.ids)}
        return st, self._events(st, sink, index)

    def _events(self, st: RequestState, sink: queue.Queue[Any],
                index: dict[int, int]) -> Iterator[Event]:
        left = len(index)
        try:
            while left:
                item = sink.get()
                if item is None:  # shutdown
                    st.aborted = True
                    return
                out, t = item
                i = index[out.seq_id]
                st.completion[i] = out.generated
                st.cached[i] = out.cached_tokens
                st.record.drafts += 1 if out.draft_tokens else 0
                st.record.draft_tokens += out.draft_tokens
                st.record.accepted += out.accepted
                if st.first_out is None:
                    st.first_out = t
                prev = st.prev_out.get(i)
                if prev is not None:
                    self.stats.inter_token(t - prev)
                st.prev_out[i] = t
                if out.finished:
                    st.finish[i] = out.finish_reason
                    left -= 1
                yield Event(choice=i, out=out, t=t)
        finally:
            if left:
                st.aborted = True
                self.scheduler.abort([sid for sid, i in index.items() if st.finish[i] is None])

    def finish(self, st: RequestState, *, first: float | None, last: float | None,
               end: float, status: int = 200) -> None:
        """Record a finished (or failed) request in the truth and the request metrics."""
        rec = st.record
        rec.first, rec.last, rec.end = first, last, end
        rec.tokens = st.completion_tokens
        rec.status = status if not st.aborted else 499
        self.truth.add(rec)
        with self._lock:
            self.completed_requests += 1
        if status == 200 and not st.aborted:
            self.stats.request_done(st, first=first, last=last, end=end)

    # -- engine steps (scheduler thread) --------------------------------------------------------
    def _follow_power(self) -> None:
        """A power-mode change on the host changes the bandwidth of the next steps (the core
        reads its model at each step; swapping it is atomic)."""
        if not self.ctx.refresh_power():
            return
        dev = self.ctx.device
        model = self.core.model
        self.core.model = dataclasses.replace(
            model, timing=dataclasses.replace(model.timing, device=dev))
        self.truth.info.update(power_mode=dev.power_mode, bandwidth_gbs=dev.bandwidth_gbs)

    def _on_step(self, res: StepResult, wall: float, published: float) -> None:
        self._follow_power()
        self.truth.step(batch=res.context_requests + res.generation_requests, drafts=res.drafts,
                        draft_tokens=res.draft_tokens, accepted=res.accepted,
                        per_pos=res.accepted_per_pos, preemptions=res.preemptions,
                        wall_s=wall, model_s=res.duration_s)
        self.stats.step(res, wall)

    def running_waiting(self) -> tuple[int, int]:
        return self.scheduler.counts()
