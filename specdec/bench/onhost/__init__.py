"""`specdec bench` beside the engine: a stdlib-only client the deploy uploads to a host.

    python3 -I onhost.pyz http://127.0.0.1:8000 --model M --prompts prompts.json --json -

It measures what the control node's client (`specdec.bench.client`, httpx) measures, with the
same definitions, prompts, levels, fillers and ramp, and writes the same JSON (schema 1), so the
gate cannot tell them apart; only the network between client and engine is gone (loopback).
Python 3.8+, nothing outside the standard library, no import from the rest of the specdec
package: a Jetson's or Spark's python3 (or the engine image's) runs it as uploaded, one zipapp
of this package's modules (`specdec.bench.remote.pyz`). The prompt set travels beside it as
JSON (``--prompts``, written from the package's ``prompts.yaml``).

This package is also the measurement core of the control node's client, which imports it:
records and their JSON (`records.Rec`), SSE events (`records.parse_sse_line`, `records._event`,
`records.finish`), a level's figures and checks (`levels.level_result`, `levels.check_level`),
statistics (`stats.summarize`), speculation counters (`counters`) and the server probe
(`probe.probe_server`, `probe.SpecProbe`). So those are defined once; only transport (httpx
there, asyncio streams here) differs.

Modules (only relative imports between them, only the standard library outside): ``errors``,
``stats``, ``http`` (HTTP/1.1 over asyncio streams), ``counters`` (vLLM and TRT-LLM speculation
counters), ``records`` (one request: record, SSE events, the request; the definitions),
``probe`` (the server and its counters per level), ``levels`` (workers, a level's figures and
checks), ``run`` (the run, device time), ``cli`` (command line; ``__main__`` runs it).
"""

from __future__ import annotations

from .cli import MARKER, load_prompts, main, parse_args
from .counters import (
    Counters,
    TrtllmAccumulator,
    add_counters,
    diff_counters,
    parse_vllm,
    spec_delta,
    trtllm_entries,
)
from .errors import BenchError, ConfigError, StreamError
from .levels import check_level, choose, level_result, run_requests
from .probe import SpecProbe, probe_server
from .records import ENDPOINTS, Rec, finish, http_error, parse_sse_line, request
from .run import RATE_KEYS, SCHEMA, run_bench, time_scale, to_device_time
from .stats import finite, percentile, summarize

__all__ = [
    "ENDPOINTS",
    "MARKER",
    "RATE_KEYS",
    "SCHEMA",
    "BenchError",
    "ConfigError",
    "Counters",
    "Rec",
    "SpecProbe",
    "StreamError",
    "TrtllmAccumulator",
    "add_counters",
    "check_level",
    "choose",
    "diff_counters",
    "finish",
    "finite",
    "http_error",
    "level_result",
    "load_prompts",
    "main",
    "parse_args",
    "parse_sse_line",
    "parse_vllm",
    "percentile",
    "probe_server",
    "request",
    "run_bench",
    "run_requests",
    "spec_delta",
    "summarize",
    "time_scale",
    "to_device_time",
    "trtllm_entries",
]
