"""Gate decisions, the tune's curve fits and search, the fleet reports."""

from __future__ import annotations

import math
import random
from typing import Any

from fingerprint_domains.common import Domain, error

CATS = {"chat": 16, "code": 16, "summarization": 12, "repetitive": 8}
ORDER = list(CATS)
N_TOK = 64


# -- gate -----------------------------------------------------------------------------------------
def _level(tpot: float, speedup: dict[str, float], n: int, noise: float, rng: random.Random,
           run: float, estimated: bool) -> dict[str, Any]:
    """Requests whose TPOT is ``tpot / speedup[category]`` (categories in turn), as the bench
    writes them (the shape `tests/unit/test_gate.py` uses)."""
    reqs = []
    for i in range(n):
        cat = ORDER[i % len(ORDER)]
        t = tpot / speedup.get(cat, 1.0) * math.exp(rng.gauss(0, noise)) * run
        chunks = max(2, round(N_TOK / (1 + speedup.get(cat, 1.0))))
        reqs.append({"index": i, "prompt_id": f"{cat}-{i}", "category": cat, "tpot_ms": t,
                     "ttft_ms": 20.0, "e2el_ms": 20.0 + t * (N_TOK - 1), "output_tokens": N_TOK,
                     "chunks": chunks, "chunk_hist": [0, chunks // 2, chunks - chunks // 2],
                     "tokens_source": "estimated" if estimated else "usage", "error": None})
    e2e = sum(r["e2el_ms"] for r in reqs) / 1000
    return {"throughput_tok_s": n * N_TOK / e2e, "requests": reqs,
            "tpot_ms_p50": sorted(r["tpot_ms"] for r in reqs)[n // 2],
            "tokens_estimated": n if estimated else 0}


def _result(s1: float | dict[str, float], s8: float | None, seed: int, n1: int = 4,
            n8: int = 8, noise: float = 0.03, run_noise: float = 0.02,
            estimated: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)
    sp1 = s1 if isinstance(s1, dict) else dict.fromkeys(ORDER, s1)
    runs = [math.exp(rng.gauss(0, run_noise)) for _ in range(2)]
    levels = {"1": _level(50.0, sp1, n1, noise, rng, runs[0], estimated)}
    if s8 is not None:
        levels["8"] = _level(60.0, dict.fromkeys(ORDER, s8), n8, noise, rng, runs[1], False)
    return {"config": {"max_tokens": N_TOK, "endpoint": "chat", "requests": [n1, n8]},
            "prompts": {"categories": CATS}, "concurrency": levels}


def _policies() -> list[Any]:
    from specdec.plan.types import GatePolicy

    return [GatePolicy(), GatePolicy(indifference=0.07, run_noise=0.02, max_rounds=6),
            GatePolicy(confidence=0.99, keep_min_throughput_gain=0.2, max_regression_c8=0.05)]


def gate(dom: Domain, quick: bool) -> None:
    from gateloop import abab as decide_adaptive

    from specdec.gate.decide import decide

    s1s: list[Any] = [0.8, 1.0, 1.1, 1.2, 1.3, 1.45, 1.6, 2.0,
                      {"chat": 1.0, "code": 1.15, "summarization": 2.0, "repetitive": 3.0}]
    n = 0
    for pi, pol in enumerate(_policies()):
        for si, s1 in enumerate(s1s):
            for s8 in (None, 0.7, 0.85, 0.95, 1.0, 1.3):
                for rounds in (1, 2, 3, 4):
                    for seed in (1, 2):
                        n += 1
                        if quick and n % 8:
                            continue
                        base = [_result(1.0, 1.0 if s8 else None, 100 * seed + r, n1=2)
                                for r in range(rounds)]
                        cand = [_result(s1, s8 if r == 0 or seed == 1 else None,
                                        100 * seed + r + 50, estimated=(si == 3 and r == 2))
                                for r in range(rounds)]
                        try:
                            out = decide(base, cand, pol).to_dict()
                        except Exception as exc:
                            out = error(exc)
                        dom.add(f"decide p{pi} s1={s1} s8={s8} rounds={rounds} seed={seed}", out)
    for pi, pol in enumerate(_policies()):
        for s1 in s1s[::2]:
            for s8 in (0.85, 1.0):
                dom.add(f"adaptive p{pi} s1={s1} s8={s8}", _adaptive(decide_adaptive, pol, s1, s8))


def _adaptive(decide_adaptive: Any, pol: Any, s1: Any, s8: float) -> dict[str, Any]:
    """`decide_adaptive` with rounds generated on demand: its calls, looks and decision."""
    calls: list[Any] = []
    looks: list[str] = []

    def run_round(arm: str, i: int, levels: tuple[int, ...]) -> dict[str, Any]:
        calls.append([arm, i, list(levels)])
        cand = arm == "candidate"
        r = _result(s1 if cand else 1.0, s8 if cand else 1.0, 7 * i + cand)
        r["concurrency"] = {k: v for k, v in r["concurrency"].items() if int(k) in levels}
        return r

    try:
        out = decide_adaptive(run_round, pol, lambda d: looks.append(d.decision)).to_dict()
    except Exception as exc:
        out = error(exc)
    return {**out, "calls": calls, "looks": looks}


# -- tune -----------------------------------------------------------------------------------------
ALPHAS = ({"chat": 0.7, "code": 0.8, "summarization": 0.6, "repetitive": 0.9},
          {"chat": 0.3, "code": 0.5, "summarization": 0.2, "repetitive": 0.8},
          {"chat": 0.85, "code": 0.85, "summarization": 0.85, "repetitive": 0.85},
          {"chat": 0.1, "code": 0.2, "summarization": 0.1, "repetitive": 0.6},
          {"chat": 0.55, "code": 0.95, "summarization": 0.4, "repetitive": 0.99})
METHOD_SETS = ((("eagle3", "head/eagle3"),), (("eagle3", "head/eagle3"), ("ngram", None)),
               (("draft_model", "org/draft"), ("ngram", None)), (("ngram", None),))


def _bench(alpha: dict[str, float], k: int, step: tuple[float, float],
           c8_factor: float) -> dict[str, Any]:
    """A bench result at k: chunk sizes from a chain acceptance (position i accepted with
    probability alpha^(i+1)), a step time a + b*k (c=8 steps ``c8_factor`` slower)."""
    levels = {}
    for conc, factor in ((1, 1.0), (8, c8_factor)):
        reqs = []
        for i in range(8):
            cat = ORDER[i % 4]
            a = alpha[cat] if k else 0.0
            probs = [a ** j * (1 - a) for j in range(k)] + [a ** k]
            hist = [0] + [round(40 * p) for p in probs]
            chunks = max(2, sum(hist) + 1)
            step_s = (step[0] + step[1] * k) * factor * (1 + 0.01 * (i % 3))
            tokens = sum(s * c for s, c in enumerate(hist)) + 1
            reqs.append({"category": cat, "output_tokens": tokens, "ttft_ms": 30.0 + i,
                         "e2el_ms": 30.0 + i + (chunks - 1) * step_s * 1000, "chunks": chunks,
                         "chunk_hist": hist, "error": None})
        levels[str(conc)] = {"requests": reqs}
    return {"concurrency": levels}


def tune(dom: Domain, quick: bool) -> None:
    from specdec.plan.types import GatePolicy
    from specdec.tune.search import Search, level_fit

    n = 0
    for mi, methods in enumerate(METHOD_SETS):
        for ai, alpha in enumerate(ALPHAS):
            for step in ((0.05, 0.002), (0.05, 0.012), (0.02, 0.02)):
                for per_batch in (False, True):
                    for seqs in (4, 256):
                        for pi, pol in enumerate((GatePolicy(), GatePolicy(
                                max_regression_c8=0.02, keep_concurrency=1))):
                            n += 1
                            if quick and n % 8:
                                continue
                            key = f"m{mi} a{ai} step={step} per_batch={per_batch} " \
                                  f"seqs={seqs} p{pi}"
                            dom.add(key, _search(methods, alpha, step, per_batch, seqs, pol,
                                                 Search, level_fit))


def _search(methods: Any, alpha: dict[str, float], step: tuple[float, float], per_batch: bool,
            seqs: int, pol: Any, search: Any, level_fit: Any) -> dict[str, Any]:
    from specdec.tune.search import Config

    try:
        s = search(methods, pol, CATS, per_batch, seqs)
        c8 = 1.0 + 0.05 * seqs / 256
        s.add_baseline(_bench(alpha, 0, step, c8), 3.0)
        fits = {}
        for _ in range(20):
            cfg = s.next()
            if cfg is None:
                break
            weak = {c: v * (0.8 if cfg.method == "ngram" else 1.0) for c, v in alpha.items()}
            res = _bench(weak, cfg.k, step, c8)
            fits[cfg.label()] = level_fit(res, 1)
            s.add(cfg, res, 2.5)
        out = s.choose().to_dict()
        out["fits"] = fits
        out["label"] = Config.from_dict(out["config"]).label()
        return out
    except Exception as exc:
        return error(exc)


# -- reports --------------------------------------------------------------------------------------
def _host_report(host: str, outcome: str, base: tuple[float, float, float] = (20.0, 50.0, 100.0),
                 cand: tuple[float, float, float] = (28.0, 35.0, 105.0), **extra: Any
                 ) -> dict[str, Any]:
    def arm(t: tuple[float, float, float]) -> dict[str, Any]:
        return {"c1": {"throughput_tok_s": t[0], "tpot_ms_p50": t[1]},
                "c8": {"throughput_tok_s": t[2], "tpot_ms_p50": t[1] * 2}}

    return {"host": host, "device": "agx-orin-64gb", "method": "eagle3", "draft": "x/head",
            "num_speculative_tokens": 3, "outcome": outcome, "phase": "done",
            "message": "why", "baseline": arm(base), "candidate": arm(cand),
            "acceptance": {"length": 2.1, "per_position": [0.7, 0.4, 0.2]},
            "roofline": {"baseline_pct": 71.0, "speculative_pct": 61.0},
            "power": {"power_mode": "MAXN", "power_mode_id": 0}, "measurements": [], **extra}


def _reports() -> list[dict[str, Any]]:
    from specdec.plan.types import GatePolicy
    from specdec.report.fleet import skipped_report
    from specdec.tune.search import Search, level_fit

    fixed = {"started_at": "2000-01-01T00:00:00+00:00", "finished_at": "2000-01-01T00:01:00+00:00"}
    tuned = _search(METHOD_SETS[1], ALPHAS[0], (0.05, 0.012), True, 8, GatePolicy(), Search,
                    level_fit)
    tuned.pop("fits", None)
    emu = _host_report("lab-agx", "kept")
    for a in ("baseline", "candidate"):
        emu[a]["device_time"] = {"emulated": True, "time_scale": 0.1}
    group = {"device": "dgx-spark", "message": "group pair: speculation kept on every member",
             "baseline": {"c1": {"throughput_tok_s": 10.0, "tpot_ms_p50": 100.0}},
             "candidate": {"c1": {"throughput_tok_s": 20.0, "tpot_ms_p50": 50.0}}}
    return [
        _host_report("a", "kept"), _host_report("b", "disabled", message="a|b\nc"),
        _host_report("c", "rolled_back", (20.0, 50.0, 100.0), (15.0, 70.0, 80.0),
                     previous_outcome="kept"),
        _host_report("tuned-1", "kept", tune={**tuned, "wall_seconds": 123.4},
                     k_by_batch=[[1, 2, 5], [3, 8, 1]], num_speculative_tokens=5),
        _host_report("held-1", "held", acceptance=None, roofline=None),
        emu, _host_report("a<b>&c", "not_verified", baseline=None, candidate=None),
        skipped_report("d\"e", "r1", "not deployed", **fixed),
        skipped_report("nospec", "r1", "speculation off", outcome="no_speculation", **fixed),
        {"host": "spark-01", "outcome": "kept", "method": "eagle3", **group,
         "group": {"name": "pair", "url": "http://192.0.2.41:8000", "outcome": "kept",
                   "role": "etcd, frontend, worker", "frontend": "spark-01"}},
        {"host": "spark-02", "outcome": "kept", "method": "eagle3", **group,
         "group": {"name": "pair", "url": "http://192.0.2.41:8000", "outcome": "kept",
                   "role": "worker", "frontend": "spark-01"}},
        _host_report("weird", "failed", base=(0.0, 0.0, 0.0), cand=(1.0, float("nan"), 2.0),
                     phase="health", acceptance={"length": None, "per_position": []}),
    ]


def reports(dom: Domain) -> None:
    from specdec.report.fleet import figures, index_html, summary_markdown

    reps = _reports()
    sets = {"all": reps, "none": [], "first": reps[:1], "groups": reps[9:11],
            "skipped": reps[7:9], "tuned": reps[3:4]}
    for name, rs in sets.items():
        for fmt, fn in (("markdown", summary_markdown), ("html", index_html)):
            try:
                dom.add(f"{fmt} {name}", {"text": fn(rs, "run-" + name)})
            except Exception as exc:
                dom.add(f"{fmt} {name}", error(exc))
    for r in reps:
        dom.add(f"figures {r['host']}", {"figures": figures(r)})
