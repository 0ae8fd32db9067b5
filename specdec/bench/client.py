"""Async OpenAI-compatible streaming benchmark client (`specdec bench`).

Definitions (see docs in `specdec.bench`; they follow `vllm bench serve` where it is sound):

* ``t_send`` is when the request is on the wire: httpx's ``trace`` event for the request body
  sent (``http11.send_request_body.complete``, or HTTP/2's), not when the coroutine was
  scheduled (at c=8 the client's own event loop would add its queueing to TTFT); every content
  chunk (non-empty ``delta.content`` or ``text``) is timestamped on arrival with
  ``time.perf_counter()``.
* TTFT = t(first content chunk) − t_send; E2EL = t(last content chunk) − t_send (the trailing
  usage-only chunk and ``[DONE]`` are not tokens); N = ``usage.completion_tokens``;
  TPOT = (E2EL − TTFT)/(N − 1), only for N > 1. Without usage, N is the output text counted
  with the model's tokenizer when it is on the control node (`specdec.bench.tokens`), else the
  chunk count marked *estimated* (``tokens_source``; the level's ``tokens_estimated``).
* ITL keys (``*_itl_ms``) are inter-*chunk* gaps, pooled over requests, as vLLM reports them;
  under speculation a chunk carries several tokens, so gate on TPOT, never on ITL.
* ``throughput_tok_s`` = ``output_throughput`` = Σ N over successful requests / (last completion
  − first send) of the level: what `vllm bench serve` and the emulator's ``/lab/truth`` call
  throughput (failed requests add time, not tokens).
* ``steady_output_throughput``: tokens produced inside the steady window / its length. The window
  opens when the first ``C`` requests have all produced a token (ramp-up done) and closes at the
  first completion after the last request was sent (from then on fewer than ``C`` requests run:
  the drain tail). Token times are exact with ``continuous_usage_stats`` (each chunk carries the
  running ``completion_tokens``), else interpolated linearly between a request's first and last
  chunk. None when the window is empty (requests ≤ C).
* At C > 1 the clients keep C requests in flight until the last measured request ends (extra,
  unmeasured requests on the next prompts, cancelled then), so every measured request ran at
  full concurrency: their Σtokens/ΣE2EL is the steady-state rate (the gate's c=8 figure).

Per level the client scrapes the server's speculation counters before and after (vLLM
Prometheus text; TRT-LLM iteration stats, polled during the level) and reports acceptance.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx

from specdec.bench.config import SCHEMA, BenchConfig, ServerInfo
from specdec.bench.device_time import tls_verify
from specdec.bench.metrics import Counters, add_counters, spec_delta
from specdec.bench.onhost import errors as core_errors
from specdec.bench.onhost.levels import check_level, choose, level_result, run_requests
from specdec.bench.onhost.records import Rec
from specdec.bench.onhost.stats import finite
from specdec.bench.prompts import Prompt, PromptSet, builtin_prompts
from specdec.bench.tokens import load_counter
from specdec.bench.transport import SpecProbe, parse_sse_line, probe_server, request
from specdec.errors import BenchError, ConfigError

__all__ = [
    "BenchConfig",
    "ServerInfo",
    "parse_sse_line",
    "probe_server",
    "run_bench",
    "run_bench_async",
    "run_bench_sync",
    "to_json",
]

P = dict[str, str]  # a prompt as the measurement core keeps it: id, category, prompt


def _p(p: Prompt) -> P:
    return {"id": p.id, "category": p.category, "prompt": p.text}


# -- progress ---------------------------------------------------------------------------------
class _Progress:
    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self.enabled = enabled
        self.stream = stream

    def show(self, label: str, done: int, total: int, failed: int) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{label:>10} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done}/{total} failed {failed} ")
        self.stream.flush()

    def end(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


# -- levels -----------------------------------------------------------------------------------
async def _run_requests(client: httpx.AsyncClient, cfg: BenchConfig, model: str,
                        prompts: list[P], conc: int, tag: str, progress: _Progress,
                        check: Callable[[], None] | None = None,
                        counter: Callable[[str], int] | None = None,
                        fillers: list[P] | None = None,
                        ramp: int = 0) -> list[Rec]:
    """The measurement core's workers (fillers, ramp:
    `specdec.bench.onhost.levels.run_requests`) over httpx; ``counter`` counts tokens when the
    server sends no usage."""
    finished = failed = 0

    def done(rec: Rec) -> None:
        nonlocal finished, failed
        finished, failed = finished + 1, failed + (0 if rec.ok else 1)
        progress.show(tag, finished, len(prompts), failed)

    async def send(http: httpx.AsyncClient, c: BenchConfig, m: str, rec: Rec, text: str,
                   max_tokens: int) -> None:
        await request(http, c, m, rec, text, counter, max_tokens)

    recs: list[Rec] = await run_requests(client, cfg, model, prompts, conc, tag,
                                                       check, fillers, ramp, send=send,
                                                       done=done)
    progress.end()
    return recs


def _level(cfg: BenchConfig, recs: list[Rec], conc: int,
           warnings: list[str]) -> dict[str, Any]:
    """The level's figures and checks (the measurement core's, as on the host)."""
    try:
        lvl: dict[str, Any] = level_result(cfg, recs, conc)
        check_level(cfg, lvl, conc, warnings)
    except core_errors.BenchError as exc:
        raise BenchError(str(exc)) from None
    return lvl


# -- the run ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Workload:
    """What each level sends: its measured prompts (chosen by id, else ``requests`` from its
    offset, round the set), fillers after them, and the warmup prompts."""

    pset: PromptSet
    counts: dict[int, int]
    offsets: dict[int, int]
    measured_set: list[P]
    chosen: dict[int, list[P]]
    warm: list[P]

    def measured(self, conc: int) -> list[P]:
        if conc in self.chosen:
            return self.chosen[conc]
        n, off = self.counts[conc], self.offsets[conc]
        return [self.measured_set[(off + i) % len(self.measured_set)] for i in range(n)]

    def fillers(self, conc: int) -> list[P]:
        n, off = self.counts[conc], self.offsets[conc]
        return [self.measured_set[(off + n + i) % len(self.measured_set)] for i in range(conc)]


def _workload(cfg: BenchConfig) -> _Workload:
    pset = cfg.prompts or builtin_prompts()
    if isinstance(cfg.requests, tuple):
        counts = dict(zip(cfg.concurrency, cfg.requests, strict=True))
    else:
        counts = {c: cfg.requests or len(pset.measured) for c in cfg.concurrency}
    offsets = dict(zip(cfg.concurrency, cfg.prompt_offset, strict=True)) if isinstance(
        cfg.prompt_offset, tuple) else dict.fromkeys(cfg.concurrency, cfg.prompt_offset)
    measured_set = [_p(p) for p in pset.measured]
    try:
        chosen: dict[int, list[P]] = choose(measured_set, pset.source, cfg.prompt_ids, counts)
    except core_errors.ConfigError as exc:
        raise ConfigError(str(exc)) from None
    warm = [_p(pset.warmup[i % len(pset.warmup)]) for i in range(cfg.warmup)]
    return _Workload(pset, counts, offsets, measured_set, chosen, warm)


def _http_client(cfg: BenchConfig) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=max(cfg.concurrency) + 4,
                          max_keepalive_connections=max(cfg.concurrency) + 4)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
    return httpx.AsyncClient(limits=limits, headers=headers, verify=tls_verify(cfg.ca_file),
                             timeout=httpx.Timeout(None, connect=cfg.connect_timeout_s))


def _served_model(cfg: BenchConfig, server: ServerInfo) -> str:
    """``--model``, which the server must serve; else the one model it serves."""
    base = cfg.base_url
    if cfg.model is None:
        if len(server.models) != 1:
            raise ConfigError(f"{base} serves {len(server.models)} models "
                             f"({', '.join(server.models) or 'none'}); pick one with --model")
        return server.models[0]
    if cfg.model not in server.models:
        raise ConfigError(f"--model {cfg.model!r} is not served at {base} "
                         f"(served: {', '.join(server.models) or 'none'})")
    return cfg.model


async def _warm_up(client: httpx.AsyncClient, cfg: BenchConfig, model: str, warm: list[P],
                   progress: _Progress) -> int:
    """The warmup requests (short answers, at the highest level); how many failed. All failing
    is an error."""
    if not warm:
        return 0
    wcfg = replace(cfg, max_tokens=max(2, min(cfg.max_tokens, cfg.warmup_max_tokens)))
    wrecs = await _run_requests(client, wcfg, model, warm, max(cfg.concurrency), "warmup",
                                progress, counter=load_counter(None))
    bad = [r for r in wrecs if not r.ok]
    if len(bad) == len(wrecs):
        raise BenchError(f"warmup: all {len(wrecs)} requests failed "
                         f"({bad[0].error_kind}: {bad[0].error})")
    return len(bad)


async def _measure_levels(client: httpx.AsyncClient, cfg: BenchConfig, server: ServerInfo,
                          model: str, work: _Workload, counter: Callable[[str], int] | None,
                          progress: _Progress, warnings: list[str]
                          ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Each concurrency level between two counter snapshots: the levels' figures, and the
    acceptance over all levels (None when the server reports none)."""
    levels: dict[str, Any] = {}
    total = Counters()
    any_spec = False
    last: Counters | None = None
    for conc in cfg.concurrency:
        probe = SpecProbe(client, cfg.base_url, server, cfg.trtllm_poll_s, last)
        await probe.start()
        off, fill = work.offsets[conc], work.fillers(conc)
        recs = await _run_requests(client, cfg, model, work.measured(conc), conc,
                                   f"c{conc}" + (f" o{off}" if off else ""), progress,
                                   probe.check, counter, fill if conc > 1 and cfg.fill else None,
                                   cfg.ramp_tokens if conc > 1 else 0)
        fig, delta = await probe.stop()
        last = probe.after
        lvl = _level(cfg, recs, conc, warnings)
        lvl["spec_decode"] = fig
        if fig is not None:
            any_spec = True
            total = add_counters(total, delta)
        levels[str(conc)] = lvl
    spec = spec_delta(Counters(present=True, per_pos=None if total.per_pos is None else {}),
                      total) if any_spec else None
    return levels, spec


def _config(cfg: BenchConfig, work: _Workload) -> dict[str, Any]:
    """The configuration as run: per-level lists, the prompt ids chosen by id."""
    conf = asdict(replace(cfg, prompts=None))
    conf.pop("prompts")
    conf.pop("api_key")  # never in a result
    conf["requests"] = [work.counts[c] for c in cfg.concurrency]
    conf["concurrency"] = list(cfg.concurrency)
    conf["prompt_offset"] = [work.offsets[c] for c in cfg.concurrency]
    conf["prompt_ids"] = {str(c): [p["id"] for p in ps] for c, ps in work.chosen.items()}
    return conf


async def run_bench_async(cfg: BenchConfig, *, stderr: TextIO | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the result dict (see module doc) or raises `BenchError`."""
    cfg.validate()
    err = stderr if stderr is not None else sys.stderr
    show = cfg.progress if cfg.progress is not None else err.isatty()
    progress = _Progress(bool(show), err)
    work = _workload(cfg)
    started = datetime.now(UTC).isoformat()
    warnings: list[str] = []
    async with _http_client(cfg) as client:
        server = await probe_server(client, cfg.base_url)
        model = _served_model(cfg, server)
        warm_failed = await _warm_up(client, cfg, model, work.warm, progress)
        counter = load_counter(cfg.tokenizer or model)
        levels, spec = await _measure_levels(client, cfg, server, model, work, counter,
                                             progress, warnings)
    pset = work.pset
    return {
        "schema": SCHEMA,
        "tool": "specdec bench",
        "url": cfg.url,
        "model": model,
        "endpoint": cfg.endpoint,
        "server": {"kind": server.kind, "metrics": server.metrics, "version": server.version},
        "started_at": started,
        "finished_at": datetime.now(UTC).isoformat(),
        "config": _config(cfg, work),
        "prompts": {"source": pset.source, "measured": len(pset.measured),
                    "categories": pset.categories()},
        "warmup": {"requests": len(work.warm), "failed": warm_failed},
        "concurrency": levels,
        "spec_decode": spec,
        "tokens": {"tokenizer": cfg.tokenizer or model, "tokenizer_found": counter is not None,
                   "estimated": sum(lv["tokens_estimated"] for lv in levels.values()),
                   "counted": sum(lv["tokens_counted"] for lv in levels.values())},
        "warnings": warnings,
    }


def run_bench(cfg: BenchConfig, *, stderr: TextIO | None = None) -> dict[str, Any]:
    """Synchronous wrapper (for the deploy's verify step and scripts)."""
    return asyncio.run(run_bench_async(cfg, stderr=stderr))


run_bench_sync = run_bench


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(finite(result), indent=2, allow_nan=False)
