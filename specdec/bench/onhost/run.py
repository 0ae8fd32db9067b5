"""The run: probe the server, warm up, measure each level with its speculation counters, and
the result (schema 1, as the control node's client writes it); an emulator's figures in device
time (as `specdec.bench.device_time`)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

from .counters import Counters, add_counters, spec_delta
from .errors import BenchError, StreamError
from .http import Http
from .levels import check_level, choose, level_result, run_requests
from .probe import SpecProbe, probe_server

SCHEMA = 1
RATE_KEYS = ("request_throughput", "output_throughput", "steady_output_throughput",
             "throughput_tok_s")
CONFIG_FIELDS = ("url", "model", "concurrency", "requests", "max_tokens", "warmup",
                 "warmup_max_tokens", "prompt_offset", "endpoint", "fixed_length",
                 "continuous_usage", "unique_prefix", "request_timeout_s", "connect_timeout_s",
                 "max_failed_fraction", "progress", "trtllm_poll_s", "tokenizer", "fill",
                 "ramp_tokens", "prompt_ids")


async def run_bench(cfg, pset):
    measured_set = pset["measured"]
    counts = {c: (cfg.requests[i] if cfg.requests else len(measured_set))
              for i, c in enumerate(cfg.concurrency)}
    offsets = dict(zip(cfg.concurrency, cfg.prompt_offset))
    chosen = choose(measured_set, pset["source"], cfg.prompt_ids, counts)
    warm = [pset["warmup"][i % len(pset["warmup"])] for i in range(cfg.warmup)]
    started = datetime.now(timezone.utc).isoformat()
    base = cfg.url.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    http = Http(base, cfg.connect_timeout_s, getattr(cfg, "api_key", None),
                getattr(cfg, "ssl_context", None))
    try:
        return await _run(cfg, pset, http, (base, started, counts, offsets, chosen, warm))
    finally:
        http.close()


async def _run(cfg, pset, http, plan):
    base, started, counts, offsets, chosen, warm = plan
    measured_set = pset["measured"]
    server, served = await probe_server(http, base)
    model = _model(cfg.model, served, base)
    warm_failed = await _warmup(http, cfg, model, warm) if warm else 0
    levels, warnings, spec = await _measure(http, cfg, model, server, measured_set,
                                            (counts, offsets, chosen))
    conf = {k: getattr(cfg, k) for k in CONFIG_FIELDS}
    conf.update(concurrency=list(cfg.concurrency), requests=[counts[c] for c in cfg.concurrency],
                prompt_offset=list(cfg.prompt_offset),
                prompt_ids={str(c): [p["id"] for p in ps] for c, ps in chosen.items()})
    cats = {}  # type: dict[str, int]
    for p in measured_set:
        cats[p["category"]] = cats.get(p["category"], 0) + 1
    return {
        "schema": SCHEMA, "tool": "specdec bench", "url": cfg.url, "model": model,
        "endpoint": cfg.endpoint, "server": server, "started_at": started,
        "finished_at": datetime.now(timezone.utc).isoformat(), "config": conf,
        "prompts": {"source": pset["source"], "measured": len(measured_set), "categories": cats},
        "warmup": {"requests": len(warm), "failed": warm_failed}, "concurrency": levels,
        "spec_decode": spec,
        "tokens": {"tokenizer": cfg.tokenizer or model, "tokenizer_found": False,
                   "estimated": sum(lv["tokens_estimated"] for lv in levels.values()),
                   "counted": 0},
        "warnings": warnings,
    }


def _model(model, served, base):
    """``--model``, which the server must serve; else the only model it serves."""
    if model is None:
        if len(served) != 1:
            raise BenchError(f"{base} serves {len(served)} models ({', '.join(served) or 'none'}"
                             "); pick one with --model")
        return served[0]
    if model not in served:
        raise BenchError(f"--model {model!r} is not served at {base} (served: "
                         f"{', '.join(served) or 'none'})")
    return model


async def _warmup(http, cfg, model, warm):
    """The warmup requests (not measured): how many failed; all failing is an error."""
    wrecs = await run_requests(http, cfg, model, warm, max(cfg.concurrency), "warmup",
                               max_tokens=max(2, min(cfg.max_tokens, cfg.warmup_max_tokens)))
    bad = [r for r in wrecs if not r.ok]
    if len(bad) == len(wrecs):
        raise BenchError(f"warmup: all {len(wrecs)} requests failed ({bad[0].error_kind}: "
                         f"{bad[0].error})")
    return len(bad)


async def _measure(http, cfg, model, server, measured_set, plan):
    """Each level's requests with its speculation counters: the levels' results, the
    warnings, and the counters over all levels (None without speculation)."""
    counts, offsets, chosen = plan
    warnings, levels = [], {}  # type: list[str], dict[str, dict]
    total, any_spec, last = Counters(), False, None
    for conc in cfg.concurrency:
        n, off = counts[conc], offsets[conc]
        prompts = chosen.get(conc) or [measured_set[(off + i) % len(measured_set)]
                                       for i in range(n)]
        fill = [measured_set[(off + n + i) % len(measured_set)] for i in range(conc)]
        probe = SpecProbe(http, server["metrics"], cfg.trtllm_poll_s, last)
        await probe.start()
        recs = await run_requests(http, cfg, model, prompts, conc,
                                  f"c{conc}" + (f" o{off}" if off else ""), probe.check,
                                  fill if conc > 1 and cfg.fill else None,
                                  cfg.ramp_tokens if conc > 1 else 0)
        fig, delta = await probe.stop()
        last = probe.after
        lvl = level_result(cfg, recs, conc)
        lvl["spec_decode"] = fig
        check_level(cfg, lvl, conc, warnings)
        if fig is not None:
            any_spec, total = True, add_counters(total, delta)
        levels[str(conc)] = lvl
    empty = Counters(present=True, per_pos=None if total.per_pos is None else {})
    spec = spec_delta(empty, total) if any_spec else None
    return levels, warnings, spec


# -- device time (as specdec.bench.device_time) ---------------------------------------------------
def _convert(value, scale):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if k.endswith("_ms") or "_ms_" in k or k in ("duration", "start_s", "end_s"):
                    v = v / scale
                elif k in RATE_KEYS:
                    v = v * scale
            else:
                v = _convert(v, scale)
            out[k] = v
        return out
    if isinstance(value, list):
        return [_convert(v, scale) for v in value]
    return value


def to_device_time(result, scale):
    out = _convert(result, scale)
    out["device_time"] = {"emulated": True, "time_scale": scale,
                          "note": "emulated engine: durations / time_scale and rates x "
                                  "time_scale, i.e. what the device would show"}
    return out


async def time_scale(url, api_key=None, ssl_context=None):
    """The lab emulator's time scale (``GET /lab/truth``), None for a real engine."""
    try:
        status, _, body = await Http(url.rstrip("/"), 5.0, api_key, ssl_context).get(
            "/lab/truth", 5.0)
        doc = json.loads(body) if status == 200 else None
    except (OSError, asyncio.TimeoutError, StreamError, ValueError):
        return None
    scale = doc.get("time_scale") if isinstance(doc, dict) else None
    if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0:
        return float(scale)
    return None
