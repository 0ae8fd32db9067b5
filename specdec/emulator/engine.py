"""The running engine: core + real-time scheduler + metrics + ground truth, for the HTTP layer.

`EngineService.generate` submits a parsed request and yields `Event`s (one per engine step that
produced tokens for it) as the scheduler publishes them; the server turns them into SSE chunks or
one JSON response. Request-level metrics (TTFT, TPOT, e2e) and the truth record are completed by
the server through `finish`, because only it knows when bytes reached the socket.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from specdec.emulator.core import EngineCore, SeqOutput, StepResult
from specdec.emulator.memory import MemoryReport
from specdec.emulator.metrics import IterStats, VllmMetrics
from specdec.emulator.openai import GenRequest
from specdec.emulator.runtime import RunContext, ServeConfig
from specdec.emulator.scheduler import Scheduler
from specdec.emulator.truth import RequestRecord, Truth

__all__ = ["EngineService", "Event", "RequestState"]


@dataclass(frozen=True)
class Event:
    choice: int
    out: SeqOutput
    t: float  # perf_counter when the scheduler published it


@dataclass
class RequestState:
    gen: GenRequest
    record: RequestRecord
    ids: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)  # tokens per choice
    finish: list[str | None] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    first_out: float | None = None
    prev_out: dict[int, float] = field(default_factory=dict)
    aborted: bool = False

    @property
    def completion_tokens(self) -> int:
        return sum(self.completion)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens once per distinct prompt (``n`` > 1 shares one prompt)."""
        seen: dict[int, int] = {}
        for seq in self.gen.seqs:
            seen.setdefault(seq.prompt_key, seq.prompt_tokens)
        return sum(seen.values())


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
        self.vllm: VllmMetrics | None = None
        if cfg.engine == "vllm":
            self.vllm = VllmMetrics(self.name, spec_k=spec_k, cache_info={
                "block_size": "16", "cache_dtype": setup.kv_cache_dtype,
                "enable_prefix_caching": str(setup.prefix_caching),
                "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
                "num_gpu_blocks": str(mem.num_blocks)})
        self.iter_stats = IterStats(cfg.iter_perf_stats)
        self.truth = Truth(ctx.time_scale, {
            "engine": cfg.engine, "device": ctx.device.id, "model": setup.target.id,
            "power_mode": ctx.device.power_mode, "bandwidth_gbs": ctx.device.bandwidth_gbs,
            "method": setup.method if setup.speculative else "none",
            "num_speculative_tokens": spec_k,
            "draft": setup.drafter.id if setup.drafter else None,
        })
        self._interval = _Interval(spec_k)
        self._stats_thread = threading.Thread(target=self._stats_loop, name="stat-logger",
                                              daemon=True)
        self.scheduler = Scheduler(self.core, time_scale=ctx.time_scale, faults=ctx.faults,
                                   on_step=self._on_step, on_idle=self._follow_power,
                                   fault_counter=lambda: self.completed_requests)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self.scheduler.start()
        if self.cfg.engine == "vllm" and not self.cfg.non_default_args.get("disable_log_stats"):
            self._stats_thread.start()

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
                if prev is not None and self.vllm is not None:
                    self.vllm.itl.observe(self.vllm.lv, t - prev)
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
        m = self.vllm
        if m is None or status != 200 or st.aborted:
            return
        lv = m.lv
        for i, reason in enumerate(st.finish):
            m.success.inc((*lv, reason or "abort"))
            m.gen_hist.observe(lv, st.completion[i])
            m.prompt_hist.observe(lv, st.gen.prompt_tokens[i])
        m.prefix_queries.inc(lv, st.prompt_tokens)
        m.prefix_hits.inc(lv, sum(st.cached))
        if first is not None:
            m.ttft.observe(lv, first - rec.arrival)
            m.queue.observe(lv, 0.0)
            m.prefill_time.observe(lv, first - rec.arrival)
        m.e2e.observe(lv, end - rec.arrival)
        if first is not None and last is not None:
            m.decode_time.observe(lv, last - first)
            n = max(st.completion) if st.completion else 0
            if n > 1:
                m.tpot.observe(lv, (last - first) / (n - 1))

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
        with self._lock:
            self._interval.add(res)
        m = self.vllm
        if m is not None:
            lv = m.lv
            m.running.set(lv, res.running)
            m.waiting.set(lv, res.waiting)
            m.kv_usage.set(lv, res.kv_usage)
            if res.preemptions:
                m.preemptions.inc(lv, res.preemptions)
            m.prompt_tokens.inc(lv, res.new_prompt_tokens)
            m.generation_tokens.inc(lv, res.generated_tokens)
            m.iter_tokens.observe(lv, res.prefill_tokens + res.generated_tokens)
            if m.spec_k and res.drafts:
                m.drafts.inc(lv, res.drafts)
                m.draft_tokens.inc(lv, res.draft_tokens)
                m.accepted.inc(lv, res.accepted)
                for pos, v in enumerate(res.accepted_per_pos):
                    if v:
                        m.per_pos.inc((*lv, str(pos)), v)
        if self.iter_stats.enabled:
            self.iter_stats.push(self._iter_entry(res, wall))

    def _iter_entry(self, res: StepResult, wall: float) -> dict[str, Any]:
        ms = wall * 1000.0
        scale = wall / res.duration_s if res.duration_s > 0 else 0.0
        blocks = max(1, self.mem.kv_tokens // 32)
        used = min(blocks, round(res.kv_usage * blocks))
        gen = max(1, res.generation_requests)
        entry: dict[str, Any] = {
            "cpuMemUsage": 0,
            "gpuMemUsage": int((self.mem.weights_gib + self.mem.kv_gib) * 1024**3),
            "pinnedMemUsage": 0,
            "iter": res.iteration - 1,
            "iterLatencyMS": round(ms, 4),
            "newActiveRequestsQueueLatencyMS": 0.0,
            "numActiveRequests": res.running + sum(1 for o in res.outputs if o.finished),
            "numCompletedRequests": sum(1 for o in res.outputs if o.finished),
            "numNewActiveRequests": res.context_requests,
            "numQueuedRequests": res.waiting,
            "maxNumActiveRequests": self.cfg.setup.max_num_seqs,
            "maxBatchSizeStatic": self.cfg.setup.max_num_seqs,
            "maxBatchSizeRuntime": self.cfg.setup.max_num_seqs,
            "maxNumTokensStatic": self.cfg.setup.batched_tokens,
            "maxNumTokensRuntime": self.cfg.setup.batched_tokens,
            "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
            "kvCacheStats": {
                "allocNewBlocks": 0, "allocTotalBlocks": used, "cacheHitRate": 0.0,
                "freeNumBlocks": blocks - used, "maxNumBlocks": blocks, "missedBlocks": 0,
                "reusedBlocks": 0, "tokensPerBlock": 32, "usedNumBlocks": used,
            },
            "inflightBatchingStats": {
                "avgNumDecodedTokensPerIter": round(
                    (res.generated_tokens - res.context_requests) / gen, 4)
                if res.generation_requests else 0.0,
                "microBatchId": 0,
                "numContextRequests": res.context_requests,
                "numCtxTokens": res.prefill_tokens,
                "numGenRequests": res.generation_requests,
                "numPausedRequests": 0,
                "numScheduledRequests": res.context_requests + res.generation_requests,
            },
        }
        if self.cfg.setup.speculative:
            draft_ms = res.cost.draft_s * scale * 1000.0
            entry["specDecodingStats"] = {
                "acceptanceLength": round((res.accepted + res.drafts) / res.drafts, 4)
                if res.drafts else 0.0,
                "draftOverhead": round(draft_ms / ms, 4) if ms > 0 else 0.0,
                "iterLatencyMS": round(draft_ms, 4),
                "numAcceptedTokens": res.accepted,
                "numDraftTokens": res.draft_tokens,
                "numRequestsWithDraftTokens": res.drafts,
            }
        return entry

    def running_waiting(self) -> tuple[int, int]:
        return self.scheduler.counts()

    # -- vLLM's periodic stat log (every 10 emulated seconds, at least 1 s apart) ---------------
    def _stats_loop(self) -> None:
        period = max(1.0, 10.0 * self.ctx.time_scale)
        last = time.perf_counter()
        while not self.ctx.stop.wait(period):
            now = time.perf_counter()
            with self._lock:
                iv, self._interval = self._interval, _Interval(self._interval.k)
            running, waiting = self.running_waiting()
            if iv.steps == 0 and running == 0 and waiting == 0:
                last = now
                continue
            span = (now - last) / self.ctx.time_scale  # emulated seconds
            last = now
            log = self.ctx.log
            log.info(
                f"Engine 000: Avg prompt throughput: {iv.prompt / span:.1f} tokens/s, Avg "
                f"generation throughput: {iv.generated / span:.1f} tokens/s, Running: {running} "
                f"reqs, Waiting: {waiting} reqs, GPU KV cache usage: {iv.kv_usage * 100:.1f}%, "
                "Prefix cache hit rate: 0.0%", where="loggers.py:123")
            if iv.drafts:
                rates = ", ".join(f"{v / iv.drafts:.3f}" for v in iv.per_pos)
                log.info(
                    f"SpecDecoding metrics: Mean acceptance length: "
                    f"{1 + iv.accepted / iv.drafts:.2f}, Accepted throughput: "
                    f"{iv.accepted / span:.2f} tokens/s, Drafted throughput: "
                    f"{iv.draft_tokens / span:.2f} tokens/s, Accepted: {iv.accepted} tokens, "
                    f"Drafted: {iv.draft_tokens} tokens, Per-position acceptance rate: {rates}, "
                    f"Avg Draft acceptance rate: {100 * iv.accepted / iv.draft_tokens:.1f}%",
                    where="metrics.py:96")


@dataclass
class _Interval:
    """Counters between two periodic stat log lines."""

    k: int
    steps: int = 0
    prompt: int = 0
    generated: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    kv_usage: float = 0.0
    per_pos: list[int] = field(default_factory=list)

    def add(self, res: StepResult) -> None:
        self.steps += 1
        self.prompt += res.new_prompt_tokens
        self.generated += res.generated_tokens
        self.drafts += res.drafts
        self.draft_tokens += res.draft_tokens
        self.accepted += res.accepted
        self.kv_usage = res.kv_usage
        if len(self.per_pos) < self.k:
            self.per_pos += [0] * (self.k - len(self.per_pos))
        for i, v in enumerate(res.accepted_per_pos[:self.k]):
            self.per_pos[i] += v
