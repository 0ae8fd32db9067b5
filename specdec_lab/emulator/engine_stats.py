"""What the running engine reports about itself: vLLM's Prometheus metrics, trtllm-serve's
iteration stats and vLLM's periodic stat log lines, fed by `EngineService` with every engine
step and every finished request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specdec.engines.version import Version
from specdec_lab.emulator.core import StepResult
from specdec_lab.emulator.memory import MemoryReport
from specdec_lab.emulator.metrics import FINISH_REASONS, IterStats, VllmMetrics
from specdec_lab.emulator.request import RequestState
from specdec_lab.emulator.runtime import RunContext, ServeConfig

__all__ = ["EngineStats"]


class EngineStats:
    """The engine's metrics; ``counts`` gives (running, waiting) for the stat log."""

    def __init__(self, cfg: ServeConfig, ctx: RunContext, mem: MemoryReport, name: str,
                 spec_k: int, counts: Callable[[], tuple[int, int]]) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.mem = mem
        self._counts = counts
        setup = cfg.setup
        self.vllm: VllmMetrics | None = None
        if cfg.engine == "vllm":
            reasons = FINISH_REASONS.at(Version.parse(cfg.engine_version))
            assert reasons is not None  # the table covers every release
            self.vllm = VllmMetrics(name, spec_k=spec_k, cache_info={
                "block_size": "16", "cache_dtype": setup.kv_cache_dtype,
                "enable_prefix_caching": str(setup.prefix_caching),
                "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
                "num_gpu_blocks": str(mem.num_blocks)}, finish_reasons=reasons.value)
        self.iter_stats = IterStats(cfg.iter_perf_stats)
        self._lock = threading.Lock()
        self._interval = _Interval(spec_k)
        self._stats_thread = threading.Thread(target=self._stats_loop, name="stat-logger",
                                              daemon=True)

    def start(self) -> None:
        if self.cfg.engine == "vllm" and not self.cfg.non_default_args.get("disable_log_stats"):
            self._stats_thread.start()

    # -- requests -------------------------------------------------------------------------------
    def inter_token(self, seconds: float) -> None:
        """One inter-token latency (vLLM's ``inter_token_latency_seconds``)."""
        if self.vllm is not None:
            self.vllm.itl.observe(self.vllm.lv, seconds)

    def request_done(self, st: RequestState, *, first: float | None, last: float | None,
                     end: float) -> None:
        """The request metrics of a request answered with 200."""
        m = self.vllm
        if m is None:
            return
        rec = st.record
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
    def step(self, res: StepResult, wall: float) -> None:
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

    # -- vLLM's periodic stat log (every 10 emulated seconds, at least 1 s apart) ---------------
    def _stats_loop(self) -> None:
        period = max(1.0, 10.0 * self.ctx.time_scale)
        last = time.perf_counter()
        while not self.ctx.stop.wait(period):
            now = time.perf_counter()
            with self._lock:
                iv, self._interval = self._interval, _Interval(self._interval.k)
            running, waiting = self._counts()
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
