"""A concurrency level: its requests (workers, fillers, ramp), its figures and checks, and the
prompts it measures."""

from __future__ import annotations

import asyncio
import contextlib

from .errors import BenchError, ConfigError
from .records import Rec, request
from .stats import summarize


async def run_requests(http, cfg, model, prompts, conc, tag, check=None, fillers=None, ramp=0,
                       max_tokens=None, send=None, done=None):
    """``conc`` workers; fillers keep ``conc`` requests in flight until the last measured one
    ends (then cancelled); ``ramp``: one unmeasured request of that many tokens per worker
    first. ``send`` (default `request`) is the transport; ``done(rec)`` follows each measured
    request (the control node's client passes both)."""
    max_tokens = max_tokens or cfg.max_tokens
    request_ = send or request
    recs = [Rec(i, p) for i, p in enumerate(prompts)]
    state = {"next": 0, "finished": 0, "fill": 0}
    all_done = asyncio.Event()
    ramps = fillers or prompts

    def text(label, p):
        return f"[{label}] {p['prompt']}" if cfg.unique_prefix else p["prompt"]

    async def filler():
        i = state["fill"]
        state["fill"] += 1
        p = fillers[i % len(fillers)]
        await request_(http, cfg, model, Rec(-1, p), text(f"{tag} fill #{i}", p), max_tokens)

    async def worker(w):
        if ramp:
            p = ramps[w % len(ramps)]
            await request_(http, cfg, model, Rec(-1, p), text(f"{tag} ramp #{w}", p), ramp)
        while state["next"] < len(recs):
            rec = recs[state["next"]]
            state["next"] += 1
            await request_(http, cfg, model, rec, text(f"{tag} #{rec.index}", rec.prompt),
                           max_tokens)
            state["finished"] += 1
            if done is not None:
                done(rec)
            if check is not None:
                check()
        if state["finished"] == len(recs):
            all_done.set()
        while fillers and not all_done.is_set():
            task = asyncio.ensure_future(filler())
            waiter = asyncio.ensure_future(all_done.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()  # closes the connection: the server aborts the request
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            waiter.cancel()

    await asyncio.gather(*(worker(w) for w in range(min(conc, len(recs)))))
    return recs


def _steady(recs, conc):
    if conc > 1 and len(recs) <= conc:
        return None
    firsts = [r.first for r in recs[:conc] if r.first is not None]
    if not firsts:
        return None
    w0, last_send = max(firsts), max(r.send for r in recs)
    ends = [r.end for r in recs if r.end is not None and r.end >= last_send]
    if not ends:
        return None
    w1 = min(ends) if conc > 1 else max(ends)
    return (w0, w1) if w1 > w0 else None


def _stats_keys(out, metric, values):
    s = summarize(values)
    for key, stat in (("mean", "mean"), ("median", "median"), ("std", "std"), ("p90", "p90"),
                      ("p99", "p99")):
        out[f"{key}_{metric}_ms"] = s[stat]
    out[f"n_{metric}"] = s["n"]


def level_result(cfg, recs, conc):
    ok = [r for r in recs if r.ok]
    errors = {}  # type: dict[str, int]
    for r in recs:
        if r.error_kind:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    t0 = min(r.send for r in recs)
    duration = max((r.end or r.send) for r in recs) - t0
    tokens = sum(r.tokens for r in ok)
    lvl = {"concurrency": conc, "num_requests": len(recs), "completed": len(ok),
           "failed": len(recs) - len(ok), "errors": errors,
           "first_error": next((r.error for r in recs if r.error), None), "duration": duration,
           "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok),
           "total_output_tokens": tokens,
           "request_throughput": len(ok) / duration if duration > 0 else None,
           "output_throughput": tokens / duration if duration > 0 else None}
    win = _steady(recs, conc)
    lvl["steady_output_throughput"] = lvl["steady_window"] = None
    if win is not None:
        w0, w1 = win
        wt = sum(r.cum_at(w1) - r.cum_at(w0) for r in ok)
        lvl["steady_output_throughput"] = wt / (w1 - w0)
        lvl["steady_window"] = {"start_s": w0 - t0, "end_s": w1 - t0, "tokens": wt,
                                "exact_token_times": all(r.exact for r in ok)}
    _stats_keys(lvl, "ttft", [r.ttft_ms for r in ok if r.ttft_ms is not None])
    _stats_keys(lvl, "tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None])
    _stats_keys(lvl, "itl", [(b - a) * 1000 for r in ok for a, b in zip(r.times, r.times[1:])])
    _stats_keys(lvl, "e2el", [r.e2el_ms for r in ok if r.e2el_ms is not None])
    tpc = [(r.tokens - 1) / (r.chunks - 1) for r in ok if r.chunks > 1]
    lvl["mean_tokens_per_chunk"] = sum(tpc) / len(tpc) if tpc else None
    lvl["tpot_ms_p50"], lvl["ttft_ms_p50"] = lvl["median_tpot_ms"], lvl["median_ttft_ms"]
    lvl["e2el_ms_p50"], lvl["throughput_tok_s"] = lvl["median_e2el_ms"], lvl["output_throughput"]
    lvl["length_mismatches"] = sum(1 for r in ok if r.tokens != cfg.max_tokens)
    lvl["usage_missing"] = sum(1 for r in ok if not r.usage_seen)
    lvl["tokens_counted"] = sum(1 for r in ok if r.tokens_source == "tokenizer")
    lvl["tokens_estimated"] = sum(1 for r in ok if r.tokens_source == "estimated")
    cats = {}  # type: dict[str, list[Rec]]
    for r in ok:
        cats.setdefault(r.prompt["category"], []).append(r)
    lvl["per_category"] = {}
    for c, rs in sorted(cats.items()):
        ch = [(r.tokens - 1) / (r.chunks - 1) for r in rs if r.chunks > 1]
        lvl["per_category"][c] = {
            "completed": len(rs),
            "tpot_ms_p50": summarize([r.tpot_ms for r in rs if r.tpot_ms is not None])["median"],
            "mean_tokens_per_chunk": sum(ch) / len(ch) if ch else None}
    lvl["requests"] = [r.record(t0) for r in recs]
    return lvl


def check_level(cfg, lvl, conc, warnings):
    n, failed = lvl["num_requests"], lvl["failed"]
    if failed and failed / n > cfg.max_failed_fraction:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(lvl["errors"].items()))
        raise BenchError(f"concurrency {conc}: {failed}/{n} requests failed ({kinds}; first: "
                         f"{lvl['first_error']}); allowed fraction {cfg.max_failed_fraction:g}")
    if cfg.fixed_length and lvl["length_mismatches"]:
        warnings.append(f"concurrency {conc}: {lvl['length_mismatches']} of {lvl['completed']} "
                        f"responses had completion_tokens != max_tokens={cfg.max_tokens} (the "
                        "server may ignore ignore_eos/min_tokens)")
    if lvl["tokens_counted"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_counted']} responses had no usage; "
                        "their text was counted with the model's tokenizer")
    if lvl["tokens_estimated"]:
        warnings.append(f"concurrency {conc}: {lvl['tokens_estimated']} responses had no usage "
                        "and no tokenizer is on this machine: tokens estimated (chunks); the "
                        "gate will not decide on these counts")



def choose(measured_set, source, prompt_ids, counts):
    """``--prompt-ids``: per level, exactly these measured prompts (``counts`` follows)."""
    by_id = {p["id"]: p for p in measured_set}
    chosen = {}
    for conc, ids in prompt_ids:
        missing = [i for i in ids if i not in by_id]
        if missing or conc not in counts:
            raise ConfigError(f"--prompt-ids {conc}={','.join(ids)}: "
                              + (f"no measured prompt {missing[0]!r} in {source}"
                                 if missing else f"{conc} is not a --concurrency level"))
        chosen[conc] = [by_id[i] for i in ids]
        counts[conc] = len(ids)
    return chosen
