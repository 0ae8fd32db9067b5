"""Benchmark: run a release and benchmark it for one gate round (`specdec.gate.rounds`), the
baseline's cache (a baseline release measured in an earlier run stands in for round 1), and the
per-arm figures of the report."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specdec.errors import SpecdecError
from specdec.gate.rounds import RoundBench, round_bench
from specdec.verify.phases.health import wait_healthy
from specdec.verify.phases.host import Ctx, VerifyFailure
from specdec.verify.phases.process import check_process
from specdec.verify.spec import FileSpec

__all__ = ["Bench", "bench_summary"]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


def _level(result: Mapping[str, Any], conc: int) -> Mapping[str, Any]:
    levels = result.get("concurrency") or {}
    lvl = levels.get(str(conc)) if isinstance(levels, Mapping) else None
    return lvl if isinstance(lvl, Mapping) else {}


def bench_summary(result: Mapping[str, Any], levels: Sequence[int]) -> dict[str, Any]:
    """Headline figures of a bench JSON: per concurrency throughput and TPOT p50."""
    out: dict[str, Any] = {}
    for c in levels:
        lvl = _level(result, c)
        out[f"c{c}"] = {
            "throughput_tok_s": _num(lvl.get("throughput_tok_s", lvl.get("output_throughput"))),
            "tpot_ms_p50": _num(lvl.get("tpot_ms_p50", lvl.get("median_tpot_ms"))),
            "failed": lvl.get("failed"),
            "completed": lvl.get("completed"),
        }
    sd = result.get("spec_decode")
    out["spec_decode"] = dict(sd) if isinstance(sd, Mapping) else None
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip("._") or "host"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Bench:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx

    def activate(self, rid: str, label: str, files: Sequence[FileSpec] = ()) -> None:
        """Run ``rid`` (uploaded first when it is not on the host), healthy and checked."""
        ctx = self.ctx
        if ctx.running == rid:
            return
        ctx.ensure_uploaded(rid, files)
        ctx.switch(rid)
        wait_healthy(ctx, rid, label)
        check_process(ctx, rid, label)

    def measure(self, arm: str, rid: str, rb: RoundBench, n: int, name: str = ""
                ) -> tuple[dict[str, Any], float]:
        """Benchmark what runs (``rid``) as ``arm`` of round ``n``: (result, seconds)."""
        ctx = self.ctx
        ctx.arm(ctx.spec.bench.timeout_s)
        base = ctx.spec.work_dir or Path(".")
        out = base / f"{_safe(ctx.spec.plan.host)}.{name or arm}.{rid}.r{n}.bench.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = ctx.io.monotonic()
        try:
            res = ctx.io.bench(ctx.base_url, ctx.spec.plan.served_model_name, out, rb)
        except (SpecdecError, OSError, ValueError, subprocess.SubprocessError) as exc:
            raise VerifyFailure("bench", f"benchmark of the {name or arm} ({rid}) failed: "
                                f"{_one_line(exc)}") from None
        took = ctx.io.monotonic() - t0
        summ = bench_summary(res, rb.levels)
        for c in rb.levels:
            lvl = summ[f"c{c}"]
            if not lvl["throughput_tok_s"]:
                raise VerifyFailure("bench", f"benchmark of the {name or arm} ({rid}) measured "
                                    f"no throughput at concurrency {c}")
            ctx.measure("bench", f"{name or arm}.c{c}.throughput_tok_s",
                        lvl["throughput_tok_s"], unit="tok/s", release=rid, round=n)
            ctx.measure("bench", f"{name or arm}.c{c}.tpot_ms_p50", lvl["tpot_ms_p50"],
                        unit="ms", release=rid, round=n)
        ctx.event(f"benchmarked the {name or arm} ({rid}), round {n}, in {took:.1f}s")
        res = dict(res)
        res["_file"] = str(out)
        return res, took

    def baseline(self, rid: str, files: Sequence[FileSpec]) -> tuple[dict[str, Any], float]:
        """Round 1 of the baseline: cached from an earlier run, or measured now."""
        cached = self.cached_baseline(rid)
        if cached is not None:
            return cached, 0.0
        self.activate(rid, "baseline", files)
        pol = self.ctx.spec.plan.gate
        res, took = self.measure("baseline", rid, round_bench(self.ctx.spec.bench, pol,
                                                              "baseline", 0), 1)
        self.store_baseline(rid, res)
        return res, took

    def cached_baseline(self, rid: str) -> dict[str, Any] | None:
        ctx = self.ctx
        if ctx.spec.reverify or ctx.spec.cache_dir is None:
            return None
        path = ctx.spec.cache_dir / f"{rid}.json"
        try:
            res = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(res, dict) or not isinstance(res.get("concurrency"), dict):
            return None
        summ = bench_summary(res, ctx.levels)
        if any(not summ[f"c{c}"]["throughput_tok_s"] for c in ctx.levels):
            return None
        want = round_bench(ctx.spec.bench, ctx.spec.plan.gate, "baseline", 0)
        cfg = res.get("config")
        got = ((cfg.get("requests"), cfg.get("max_tokens"), cfg.get("prompt_offset"))
               if isinstance(cfg, Mapping) else None)
        if got is not None and got != (list(want.requests), want.max_tokens,
                                       list(want.offsets)):
            ctx.event(f"cached baseline of {rid} was measured with other bench settings; "
                      "measuring again")
            return None
        where = (res.get("runner") or {}).get("where", "control")
        if where != ctx.spec.bench_mode:  # across a link TTFT and E2EL differ
            ctx.event(f"cached baseline of {rid} was measured from {where}; measuring again")
            return None
        scale = dict(ctx.spec.plan.env).get("SPECDEC_EMU_TIME_SCALE")
        basis = (res.get("device_time") or {}).get("time_scale")
        if (scale is None) != (basis is None) or (
                basis is not None and float(basis) != float(str(scale))):
            ctx.event(f"cached baseline of {rid} is in another time basis; measuring again")
            return None
        res["_file"] = str(path)
        for c in ctx.levels:
            ctx.measure("bench", f"baseline.c{c}.throughput_tok_s",
                        summ[f"c{c}"]["throughput_tok_s"], unit="tok/s", release=rid,
                        cached=True)
            ctx.measure("bench", f"baseline.c{c}.tpot_ms_p50", summ[f"c{c}"]["tpot_ms_p50"],
                        unit="ms", release=rid, cached=True)
        ctx.event(f"reused the cached baseline benchmark of {rid}")
        res["_cached"] = True
        return res

    def store_baseline(self, rid: str, res: Mapping[str, Any]) -> None:
        cache = self.ctx.spec.cache_dir
        if cache is None:
            return
        try:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".{rid}.json.tmp"
            tmp.write_text(json.dumps({k: v for k, v in res.items() if not k.startswith("_")},
                                      indent=1))
            tmp.replace(cache / f"{rid}.json")
        except OSError:
            self.ctx.event("could not write the baseline cache")

    def summarise(self, arm: str, rid: str, results: Sequence[Mapping[str, Any]]) -> None:
        """Per-arm figures for the report: means over the rounds that measured each level."""
        levels = self.ctx.levels
        summs = [bench_summary(r, levels) for r in results]
        out: dict[str, Any] = {"release": rid, "cached": bool(results and
                                                              results[0].get("_cached")),
                               "rounds": len(results),
                               "files": [str(r.get("_file", "")) for r in results]}
        for c in levels:
            k = f"c{c}"
            lvl: dict[str, Any] = {}
            for key in ("throughput_tok_s", "tpot_ms_p50"):
                vals = [s[k][key] for s in summs if s[k][key] is not None]
                lvl[key] = sum(vals) / len(vals) if vals else None
            out[k] = lvl
        out["spec_decode"] = summs[-1]["spec_decode"] if summs else None
        out["device_time"] = results[-1].get("device_time") if results else None
        out["runner"] = results[-1].get("runner") if results else None  # where the client ran
        self.ctx.report[arm] = out
