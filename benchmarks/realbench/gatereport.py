"""The gate and tune sections' tables, printed from the results file alone (pure): every figure
says how many records it rests on, from which commits and seeds, and whether the issue's bar
is met, NOT met, or incomplete."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from realbench.results import Results, tags, tally
from realbench.truth import (
    RULES,
    TARGET_AGREEMENT,
    TARGET_FACTOR,
    TARGET_RUNS,
    Truth,
    agreement,
    bootstrap,
    ratios,
    rule_side,
    truth_of,
)
from specdec.plan.types import K_MAX, GatePolicy

TUNE_TARGET = 0.95
_FIG = {RULES[0]: ("c=1 throughput gain", "c1", 1), RULES[1]: ("c=1 TPOT p50 reduction",
                                                                "tpot", -1),
        RULES[2]: ("c=8 throughput change", "c8", 1)}


def _pct(ratio: float, sign: int) -> str:
    return f"{(ratio - 1.0) * sign:+.1%}"


def _ci(ci: tuple[float, float], sign: int) -> str:
    lo, hi = sorted(((ci[0] - 1.0) * sign, (ci[1] - 1.0) * sign))
    return f"{lo:+.1%}..{hi:+.1%}"


def truth_table(t: Truth, pol: GatePolicy) -> list[str]:
    out = ["| rule | truth | 95% CI (bootstrap over blocks) | θ (log ratio to threshold) | "
           "side of the zone |", "|---|---|---|---|---|"]
    for name in RULES:
        what, key, sign = _FIG[name]
        out.append(f"| {what} | {_pct(t.ratios[key], sign)} | {_ci(t.ci[key], sign)} | "
                   f"{t.thetas[name]:+.3f} | {rule_side(name, t.thetas[name], pol)} |")
    return out


def _stats(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    return (f"mean {statistics.fmean(xs):.0f}, median {statistics.median(xs):.0f}, "
            f"max {max(xs):.0f}")


def config_report(res: Results, name: str, weights: Mapping[str, float], pol: GatePolicy,
                  factor: float, runs_target: int = TARGET_RUNS) -> tuple[list[str], list[str]]:
    """The configuration's lines and its summary row, judged by the issue's bar at least
    (a smaller ``factor`` or ``runs_target`` measures less, it never meets the bar)."""
    factor, runs_target = max(factor, TARGET_FACTOR), max(runs_target, TARGET_RUNS)
    gates, blocks = res.of("gate", name), res.of("truth", name)
    lab = next((str(r["label"]) for r in gates if r.get("label")), name)
    out = [f"### gate: {lab}"]
    t = truth_of(blocks, weights, pol) if blocks else None
    per_run = [float(r["bench_s"]) for r in gates]
    goal = factor * statistics.fmean(per_run) if per_run else None
    budget = ("incomplete (no gate run yet)" if goal is None else
              "met" if t is not None and t.bench_s >= goal else
              f"incomplete ({t.bench_s if t else 0:.0f} of {goal:.0f} s)")
    if t is None:
        out.append("truth: no blocks yet")
    else:
        als = [float(a) for b in blocks if (a := (b.get("acceptance_length") or {}).get("1"))]
        out.append(f"truth: {t.blocks} blocks, {t.bench_s:.0f} bench s ({tags(blocks)}); "
                   f"budget {factor:g}x the mean gate run's bench s"
                   + (f" = {goal:.0f} s" if goal else "") + f": {budget}")
        out += truth_table(t, pol)
        out.append(f"truth: **{t.verdict}** ("
                   + ("every rule's interval on the point's side of its zone" if t.firm else
                      "an interval reaches across a zone edge: the class is not firm")
                   + (f"; c=1 acceptance length {statistics.fmean(als):.2f}" if als else "")
                   + ")")
    ag = agreement(gates, t.verdict if t else None, runs_target, TARGET_AGREEMENT,
                   budget == "met")
    rate = f"{ag.rate:.0%}" if ag.rate is not None else "-"
    counts = "; ".join(f"{what} {tally(gates, key) or '-'}" for what, key in (
        ("decisions", "decision"), ("codes", "code"), ("rounds", "rounds")))
    out.append(f"gate runs: {ag.runs} ({tags(gates)}); {counts}; bench s per run "
               f"{_stats(per_run)}")
    out.append(f"agreement with the truth: {ag.agree}/{ag.runs} = {rate} (bar "
               f"{TARGET_AGREEMENT:.0%} of >= {runs_target} runs): **{ag.status}**")
    row = "| " + " | ".join([
        lab, t.verdict if t else "-",
        *((_pct(t.ratios[k], s) for _, k, s in _FIG.values()) if t else ("-",) * 3),
        f"{t.blocks} / {t.bench_s:.0f}" if t else "0 / 0", str(ag.runs), rate,
        f"{statistics.fmean(per_run):.0f}" if per_run else "-", ag.status]) + " |"
    return out, [row]


def gate_report(res: Results, configs: Sequence[str], weights: Mapping[str, float],
                factor: float, runs_target: int = TARGET_RUNS) -> str:
    pol = GatePolicy()
    out: list[str] = []
    rows = ["| configuration | truth | c=1 gain | c=1 TPOT reduction | c=8 change | truth "
            "blocks / bench s | gate runs | agreement | bench s per gate run | status |",
            "|" + "---|" * 10]
    for name in configs:
        lines, row = config_report(res, name, weights, pol, factor, runs_target)
        out += lines + [""]
        rows += row
    return "\n".join([*out, *rows])


def idle_report(res: Results) -> str:
    recs = res.of("idle")
    if not recs:
        return "idle check: not measured yet"
    r = recs[0]
    a, b = statistics.median(r["alone_tok_s"]), statistics.median(r["beside_tok_s"])
    return "\n".join([
        f"idle check ({tags(recs)}): baseline c=1 output tok/s alone vs with a second engine "
        f"({r['second']}) up and idle, {len(r['alone_tok_s'])} runs each",
        "| measurement | value |", "|---|---|",
        f"| baseline alone, tok/s per run | {', '.join(f'{x:.2f}' for x in r['alone_tok_s'])} |",
        f"| baseline beside the idle engine | "
        f"{', '.join(f'{x:.2f}' for x in r['beside_tok_s'])} |",
        f"| ratio of medians (beside / alone) | {b / a:.3f} |",
        f"| baseline engine idle, cores busy | {r['base_idle_cores']:.3f} |",
        f"| second engine idle, cores busy | {r['second_idle_cores']:.3f} |",
        f"| second engine while the baseline is benchmarked | {r['second_cores_during']:.3f} |"])


def sweep_figures(res: Results, ks: Sequence[int], weights: Mapping[str, float]
                  ) -> dict[int, dict[str, Any]]:
    out = {}
    for k in ks:
        recs = res.of("sweep", f"ngram k={k}")
        blocks = [r["arms"] for r in recs]
        if not blocks:
            continue
        r = ratios(blocks, weights)["c1"]
        ci = bootstrap(blocks, weights, 400)["c1"] if len(blocks) > 1 else None
        out[k] = {"ratio": r, "ci": ci, "blocks": len(blocks),
                  "bench_s": sum(float(x["bench_s"]) for x in recs), "records": recs}
    return out


def tune_report(res: Results, ks: Sequence[int], weights: Mapping[str, float],
                factor: float) -> str:
    factor = max(factor, TARGET_FACTOR)  # the bar at least
    tunes, figs = res.of("tune"), sweep_figures(res, ks, weights)
    out = [f"tuner runs: {len(tunes)} ({tags(tunes)})"]
    for t in tunes:
        out.append(f"- run #{t['index']}: chose {t['label']} (c=1 k={t['k_c1']}), "
                   f"{t['bench_s']:.0f} bench s, {t['engine_starts']} engine starts, "
                   f"{t['wall_s']:.0f} s wall; points "
                   + ", ".join(f"k={p['k']}x{p['rounds']}" for p in t["measured"]))
    out += ["| k | sweep blocks | bench s | c=1 throughput / baseline | 95% CI |",
            "|---|---|---|---|---|"]
    for k, f in figs.items():
        ci = f"{f['ci'][0]:.3f}..{f['ci'][1]:.3f}" if f["ci"] else "- (one block)"
        out.append(f"| {k} | {f['blocks']} | {f['bench_s']:.0f} | {f['ratio']:.3f} | {ci} |")
    spent = sum(f["bench_s"] for f in figs.values())
    tune_s = statistics.fmean(float(t["bench_s"]) for t in tunes) if tunes else None
    every_k = set(range(1, K_MAX + 1)) <= set(figs)  # exhaustive: every k the tuner may pick
    complete = (every_k and tune_s is not None and spent >= factor * tune_s
                and len({f["blocks"] for f in figs.values()}) == 1)
    goal = f"{factor * tune_s:.0f}" if tune_s is not None else "?"
    out.append(f"sweep: {spent:.0f} bench s of {goal} ({factor:g}x the tuner's), "
               f"{len(figs)} of the {K_MAX} k measured: {'complete' if complete else 'incomplete'}"
               f" ({tags([r for f in figs.values() for r in f['records']])})")
    if not figs or not tunes:
        out.append("tuner vs sweep: **incomplete**")
        return "\n".join(out)
    best = max(figs, key=lambda k: figs[k]["ratio"])
    for t in tunes:
        k = int(t["k_c1"])
        if k not in figs:
            out.append(f"tuner run #{t['index']}: k={k} not in the sweep: **incomplete**")
            continue
        frac = figs[k]["ratio"] / figs[best]["ratio"]
        ok = "met" if frac >= TUNE_TARGET else "NOT met"
        out.append(f"tuner run #{t['index']}: k={k} gives {frac:.1%} of the best k's (k={best}) "
                   f"c=1 throughput (bar {TUNE_TARGET:.0%}): **{ok if complete else 'incomplete'}"
                   f"**" + ("" if complete else f" (so far: {ok})")
                   + f"; tuner {t['bench_s']:.0f} bench s, sweep {spent:.0f} bench s")
    return "\n".join(out)
