"""Section ``clients``: ``specdec bench`` against ``vllm bench serve`` (the release's own client,
from the lab venv) on one running server, the same requests, clients interleaved.

Both send, per request, the same chat completion: the same user message (``[r<repeat> c<C>
#<i>] <prompt>``, identical for both clients, so both get the same greedy output and the same
drafts; the server runs with ``--no-enable-prefix-caching`` so the second client's prefill is
not served from the first's cache), temperature 0, top_p 1, 64 tokens with ``ignore_eos`` and
``min_tokens``, streamed with ``include_usage`` and ``continuous_usage_stats``; at most C in
flight, no warm-up requests, no fillers (``fill=False``: vLLM's client drains the last C
requests too). ``vllm bench serve`` gets the custom dataset without applying the chat template
itself (``--skip-chat-template``: by default its custom dataset renders the template into the
user message, so the server would template it twice) and unshuffled (``--disable-shuffle``).
Checked through a recording proxy: the bodies differ only in ``max_tokens`` (vLLM's client
says ``max_completion_tokens``) and in the user content being a string (specdec) or one text
part (vLLM's client), which vLLM renders alike.

Definitions (vLLM 0.32.0, ``vllm/benchmarks/lib/endpoint_request_func.py``
``async_request_openai_chat_completions``, ``vllm/benchmarks/serve.py`` ``calculate_metrics``):
TTFT = first SSE chunk that has ``choices`` (the role chunk, ``content: ""``) − send; every later
``choices`` chunk adds a gap to ITL; latency = the last ``choices`` chunk; N =
``usage.completion_tokens``; TPOT = (latency − TTFT)/(N − 1); output tok/s = ΣN / the run's wall
time. specdec bench (`specdec.bench.onhost.records`): TTFT and E2EL from non-empty content
chunks, the same N and TPOT formula, ITL = gaps between content chunks.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from realbench.engine import SERVED, Server
from realbench.prompts import tagged, write_jsonl
from specdec.bench import BenchConfig, run_bench_sync
from specdec.bench.prompts import PromptSet

NO_PREFIX_CACHE = ("--no-enable-prefix-caching",)
METRICS = (("TPOT p50 ms", "median_tpot_ms"), ("ITL p50 ms", "median_itl_ms"),
           ("output tok/s", "output_throughput"), ("TTFT p50 ms", "median_ttft_ms"))
TOLERANCE = 0.05


def _specdec(srv: Server, pset: PromptSet, c: int, n: int, max_tokens: int) -> dict[str, Any]:
    res = run_bench_sync(BenchConfig(
        url=srv.url, model=SERVED, concurrency=(c,), requests=n, max_tokens=max_tokens,
        warmup=0, prompts=pset, unique_prefix=False, fill=False, progress=False))
    lv = res["concurrency"][str(c)]
    return {k: lv[k] for _, k in METRICS} | {
        "tokens": lv["total_output_tokens"], "duration": lv["duration"],
        "acceptance_length": (lv.get("spec_decode") or {}).get("acceptance_length")}


def vllm_bench_argv(venv: Path, srv: Server, model: Path, data: Path, out: Path, c: int,
                    n: int, max_tokens: int) -> list[str]:
    extra = {"top_p": 1.0, "min_tokens": max_tokens,
             "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    return [str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
            "--base-url", srv.url, "--endpoint", "/v1/chat/completions", "--model", SERVED,
            "--tokenizer", str(model), "--dataset-name", "custom", "--dataset-path", str(data),
            "--custom-output-len", str(max_tokens), "--skip-chat-template", "--disable-shuffle",
            "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
            "--temperature", "0", "--extra-body", json.dumps(extra), "--num-warmups", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50",
            "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir",
            str(out.parent), "--result-filename", out.name]


def _vllm(venv: Path, srv: Server, model: Path, pset: PromptSet, c: int, n: int,
          max_tokens: int, work: Path, tag: str) -> dict[str, Any]:
    data = write_jsonl(pset, work / f"{tag}.jsonl")
    out = work / f"{tag}.vllm.json"
    argv = vllm_bench_argv(venv, srv, model, data, out, c, n, max_tokens)
    env = {"HF_HUB_OFFLINE": "1", "HOME": str(work), "PATH": "/usr/bin:/bin",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    proc = subprocess.run(["nice", "-n", "10", *argv], env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise SystemExit(f"vllm bench serve failed (exit {proc.returncode}): {tail}")
    res = json.loads(out.read_text())
    itls = [x for req in res.get("itls", []) for x in req[1:]]  # each request's role-chunk gap
    return {k: res[k] for _, k in METRICS} | {
        "tokens": res["total_output_tokens"], "duration": res["duration"],
        "acceptance_length": res.get("spec_decode_acceptance_length"),
        "itl_p50_no_first_gap_ms": statistics.median(itls) * 1000 if itls else None,
        "first_gaps_ms": [req[0] * 1000 for req in res.get("itls", []) if req]}


def run(venv: Path, srv: Server, model: Path, pset: PromptSet, levels: tuple[int, ...],
        repeats: int, max_tokens: int, work: Path, log: Any = print) -> list[dict[str, Any]]:
    """Interleaved runs (specdec, vllm, specdec, vllm, ...) per level and repeat."""
    n = len(pset.measured)
    runs = []
    for r in range(1, repeats + 1):
        for c in levels:
            tag = f"r{r} c{c}"
            ps = tagged(pset, tag)
            for client in ("specdec", "vllm"):
                log(f"[clients {srv.arm} {r}/{repeats}] c={c} {client} bench", flush=True)
                fig = (_specdec(srv, ps, c, n, max_tokens) if client == "specdec" else
                       _vllm(venv, srv, model, ps, c, n, max_tokens, work,
                             f"{srv.arm}-{tag.replace(' ', '-')}-{client}"))
                runs.append({"arm": srv.arm, "c": c, "repeat": r, "client": client, **fig})
    return runs


def _med(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [x[key] for x in runs if x.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(runs: list[dict[str, Any]]) -> str:
    out = ["| arm | c | metric | specdec bench (median) | vllm bench serve (median) | "
           "ratio specdec/vllm | within 5% | per run specdec / vllm |", "|" + "---|" * 8]
    for arm, c in dict.fromkeys((x["arm"], x["c"]) for x in runs):
        sel = [x for x in runs if x["arm"] == arm and x["c"] == c]
        a = [x for x in sel if x["client"] == "specdec"]
        b = [x for x in sel if x["client"] == "vllm"]
        for label, key in METRICS:
            ma, mb = _med(a, key), _med(b, key)
            if ma is None or mb is None:
                continue
            ratio = ma / mb
            per = (" ".join(f"{x[key]:.1f}" for x in a) + " / "
                   + " ".join(f"{x[key]:.1f}" for x in b))
            ok = "yes" if abs(ratio - 1) <= TOLERANCE else "no"
            out.append(f"| {arm} | {c} | {label} | {ma:.2f} | {mb:.2f} | {ratio:.3f} | {ok} | "
                       f"{per} |")
        nf = _med(b, "itl_p50_no_first_gap_ms")
        gaps = [g for x in b for g in x["first_gaps_ms"]]
        if nf is not None and gaps:
            out.append(f"| {arm} | {c} | vllm ITL p50 without each request's first gap | - | "
                       f"{nf:.2f} | {(_med(a, 'median_itl_ms') or 0) / nf:.3f} | - | first "
                       f"gap (role chunk to first token) median {statistics.median(gaps):.3f} "
                       "ms |")
        toks = sorted({int(x["tokens"]) for x in a + b})
        als = [f"{x['acceptance_length']:.2f}" for x in a + b if x.get("acceptance_length")]
        out.append(f"| {arm} | {c} | output tokens per run; acceptance length | "
                   f"{', '.join(map(str, toks))} | | | | {' '.join(als) or '-'} |")
    return "\n".join(out)
