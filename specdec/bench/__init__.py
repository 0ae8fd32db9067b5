"""OpenAI-compatible benchmark client, statistics, metric scrapers and the built-in prompt set.

Library use (the deploy's verify step)::

    from specdec.bench import BenchConfig, run_bench_sync
    result = run_bench_sync(BenchConfig(url="http://127.0.0.1:8000", concurrency=(1, 8),
                                        requests=12, max_tokens=24, warmup=1))
    # or, in async code: result = await run_bench_async(cfg)

or as a subprocess: ``python3 -m specdec.cli bench URL [--model M] [--concurrency 1,8]
[--requests N] [--max-tokens N] [--warmup N] [--prompt-offset K] [--prompts FILE]
[--endpoint chat|completions] --json OUT``: exit 0 and OUT written (atomically) on success; exit 1,
one line on stderr and no OUT on any failure (unreachable URL, wrong model, not an OpenAI server,
too many failed requests, malformed SSE, server restarted mid-run, …).

Both raise/print `specdec.errors.BenchError` (or `ConfigError` for bad arguments). The result is
a dict: ``concurrency`` → level → vLLM-style keys (``median_tpot_ms``, ``output_throughput``,
``p99_ttft_ms``, …) and the gate's (``tpot_ms_p50``, ``ttft_ms_p50``, ``throughput_tok_s``), plus
``steady_output_throughput``, ``errors``, ``spec_decode`` (per level) and ``requests`` (per-request
records paired by ``index``/``prompt_id`` in `specdec.gate.decide`); top-level ``spec_decode`` (all
levels;
None when the server has no speculation counters), ``server`` and ``warnings``. Definitions are in
`specdec.bench.client`. Modules: ``client`` (the run), ``config`` (`BenchConfig`), ``transport``
(httpx), ``onhost`` (the measurement core, also shipped to hosts as one stdlib zipapp), ``remote``
(upload, run and collect it beside the engine: ``specdec_bench_mode``).

For gate rounds, pass ``prompt_offset = round * requests`` so each round measures new prompts
(both arms of a round use the same offset).
"""

from specdec.bench.client import BenchConfig, run_bench, run_bench_async, run_bench_sync
from specdec.bench.prompts import PromptSet, builtin_prompts, load_prompts

__all__ = [
    "BenchConfig",
    "PromptSet",
    "builtin_prompts",
    "load_prompts",
    "run_bench",
    "run_bench_async",
    "run_bench_sync",
]
