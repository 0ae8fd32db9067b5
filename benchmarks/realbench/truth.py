"""The truth the gate is held to, and how its runs are scored (pure).

**The truth** of one configuration is the long interleaved measurement (`realbench.gatebench`:
blocks of both arms back to back, the first arm alternating, each arm the gate's round-1 bench
at c=1 and c=8 with 4 requests per arm at c=1, both arms the same prompts: the set's next 4,
so a block may miss a category and 13 blocks cover the 52 prompts once). Its figures are plain
estimators over all blocks, independent of the gate's model:

* throughput at a level: per arm the stratified token rate ``Σ_h W_h·tok̄_h / Σ_h W_h·s̄_h``
  (``s``: a request's end-to-end seconds; at c=8, with 8 in flight throughout, the steady-state
  rate / 8 by Little's law), ``W_h`` the prompt set's category counts (the population the
  gate's rules are about); the figure is the ratio candidate / baseline;
* TPOT p50: per arm the weighted median of the requests' TPOT (weight ``W_h / n_h``), ratio;
* an interval from a bootstrap over blocks (``BOOT`` resamples, fixed seed: the report is
  reproducible from the file); one block has no interval, so its class is never firm.

**Classified** with the `GatePolicy` as `specdec.gate.decide` reads it: each rule's distance
θ = log(ratio / threshold ratio), positive on the keep side (TPOT: the reduction); a keep rule's
zone is |θ| ≤ ``indifference``, the c=8 rule's [−indifference, 0). The truth is **keep** when
every rule is above its zone, **disable** when any rule is below it (one failed rule disables,
so the gate must answer disable whatever the others do), else **zone**: either answer is
allowed. A gate run agrees when its decision equals a keep / disable truth.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.plan.types import GatePolicy

BOOT = 1000
BOOT_SEED = 20261203
TARGET_RUNS = 20
TARGET_AGREEMENT = 0.95
TARGET_FACTOR = 10.0  # the truth's (and the sweep's) bench seconds, in gate (tuner) runs
RULES = ("throughput_gain_c1", "tpot_p50_reduction_c1", "no_regression_c8")

Block = Mapping[str, Mapping[str, Sequence[Sequence[Any]]]]  # arm -> level -> obs


def rate(obs: Sequence[Sequence[Any]], weights: Mapping[str, float]) -> float:
    """The stratified token rate of one arm's requests (tokens per second per sequence)."""
    cats = {o[0] for o in obs}
    w = {c: weights.get(c, 0.0) for c in cats}
    if sum(w.values()) <= 0:
        w = dict.fromkeys(cats, 1.0)
    tok = sec = 0.0
    for c, wt in w.items():
        mine = [o for o in obs if o[0] == c]
        tok += wt * statistics.fmean(float(o[1]) for o in mine)
        sec += wt * statistics.fmean(float(o[2]) for o in mine)
    if sec <= 0:
        raise ValueError("no measured seconds")
    return tok / sec


def median_tpot(obs: Sequence[Sequence[Any]], weights: Mapping[str, float]) -> float:
    """The weighted median TPOT (weight W_h / n_h per request of category h)."""
    have = [o for o in obs if o[3]]
    if not have:
        raise ValueError("no TPOT")
    n: dict[str, int] = {}
    for o in have:
        n[o[0]] = n.get(o[0], 0) + 1
    wsum = sum(weights.get(c, 0.0) for c in n) or float(len(n))
    pts = sorted((float(o[3]), (weights.get(o[0], 0.0) or wsum / len(n)) / n[o[0]])
                 for o in have)
    half, acc = sum(w for _, w in pts) / 2, 0.0
    for v, w in pts:
        acc += w
        if acc >= half - 1e-12:
            return v
    return pts[-1][0]


def _pool(blocks: Sequence[Block], arm: str, level: str) -> list[Sequence[Any]]:
    return [o for b in blocks for o in b.get(arm, {}).get(level, [])]


def ratios(blocks: Sequence[Block], weights: Mapping[str, float]) -> dict[str, float]:
    """Candidate / baseline over the pooled blocks: c=1 and c=8 throughput, c=1 TPOT p50."""
    out: dict[str, float] = {}
    for level, key in (("1", "c1"), ("8", "c8")):
        c, b = _pool(blocks, "candidate", level), _pool(blocks, "baseline", level)
        if c and b:
            out[key] = rate(c, weights) / rate(b, weights)
    c, b = _pool(blocks, "candidate", "1"), _pool(blocks, "baseline", "1")
    if c and b:
        out["tpot"] = median_tpot(c, weights) / median_tpot(b, weights)
    return out


def thetas(r: Mapping[str, float], pol: GatePolicy) -> dict[str, float]:
    """Each rule's distance θ from its threshold, positive on the keep side."""
    out = {}
    if "c1" in r:
        out[RULES[0]] = math.log(r["c1"] / (1.0 + pol.keep_min_throughput_gain))
    if "tpot" in r:
        out[RULES[1]] = -(math.log(r["tpot"]) - math.log(1.0 - pol.keep_min_tpot_reduction))
    if "c8" in r:
        out[RULES[2]] = math.log(r["c8"] / (1.0 - pol.max_regression_c8))
    return out


def rule_side(name: str, theta: float, pol: GatePolicy) -> str:
    """pass / fail / zone for one rule's true distance."""
    m = pol.indifference
    if name == RULES[2]:
        return "pass" if theta >= 0 else ("fail" if theta < -m else "zone")
    return "pass" if theta > m else ("fail" if theta < -m else "zone")


def classify(th: Mapping[str, float], pol: GatePolicy) -> str:
    """keep (every rule above its zone) / disable (any rule below it) / zone."""
    if set(th) != set(RULES):
        raise ValueError(f"a truth needs every rule, got {sorted(th)}")
    sides = [rule_side(k, v, pol) for k, v in th.items()]
    if "fail" in sides:
        return "disable"
    return "keep" if all(s == "pass" for s in sides) else "zone"


@dataclass(frozen=True)
class Truth:
    ratios: dict[str, float]
    ci: dict[str, tuple[float, float]]  # 95% bootstrap interval of each ratio
    thetas: dict[str, float]
    verdict: str  # keep | disable | zone
    firm: bool  # both ends of every rule's interval classify the same way as the point
    blocks: int
    bench_s: float


def bootstrap(blocks: Sequence[Block], weights: Mapping[str, float], n: int = BOOT,
              seed: int = BOOT_SEED) -> dict[str, tuple[float, float]]:
    """Percentile 95% intervals of the ratios, resampling whole blocks."""
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(n):
        pick = [blocks[rng.randrange(len(blocks))] for _ in blocks]
        try:
            for k, v in ratios(pick, weights).items():
                draws.setdefault(k, []).append(v)
        except ValueError:
            continue
    out = {}
    for k, vs in draws.items():
        vs.sort()
        out[k] = (vs[int(0.025 * (len(vs) - 1))], vs[int(0.975 * (len(vs) - 1))])
    return out


def _ci_thetas(ci: Mapping[str, tuple[float, float]], pol: GatePolicy) -> list[dict[str, float]]:
    lo = {k: v[0] for k, v in ci.items()}
    hi = {k: v[1] for k, v in ci.items()}
    return [thetas(lo, pol), thetas(hi, pol)]


def truth_of(records: Sequence[Mapping[str, Any]], weights: Mapping[str, float],
             pol: GatePolicy, boot: int = BOOT) -> Truth | None:
    """The truth from the truth blocks' records (None: none yet)."""
    blocks = [r["arms"] for r in records]
    if not blocks:
        return None
    r = ratios(blocks, weights)
    th = thetas(r, pol)
    ci = bootstrap(blocks, weights, boot) if len(blocks) > 1 else {k: (v, v)
                                                                   for k, v in r.items()}
    verdict = classify(th, pol)
    firm = len(blocks) > 1 and all(k in t and rule_side(k, t[k], pol) == rule_side(k, v, pol)
                                   for t in _ci_thetas(ci, pol) for k, v in th.items())
    return Truth(r, ci, th, verdict, firm, len(blocks),
                 sum(float(x.get("bench_s") or 0.0) for x in records))


@dataclass(frozen=True)
class Agreement:
    runs: int
    agree: int
    decisions: dict[str, int]
    status: str  # met | NOT met | incomplete (n of 20) | n/a (...)

    @property
    def rate(self) -> float | None:
        return self.agree / self.runs if self.runs else None


def agreement(runs: Sequence[Mapping[str, Any]], verdict: str | None,
              target: int = TARGET_RUNS, share: float = TARGET_AGREEMENT,
              truth_complete: bool = True) -> Agreement:
    """How many gate runs' decisions equal the truth, and whether the issue's bar is met."""
    dec: dict[str, int] = {}
    for r in runs:
        dec[str(r["decision"])] = dec.get(str(r["decision"]), 0) + 1
    agree = sum(1 for r in runs if r["decision"] == verdict)
    n = len(runs)
    if verdict is None:
        status = f"incomplete (no truth yet; {n} of {target} runs)"
    elif verdict == "zone":
        status = "n/a (truth inside the indifference zone: either decision is allowed)"
    elif n < target:
        status = f"incomplete ({n} of {target})"
    elif not truth_complete:
        status = "incomplete (truth budget)"
    else:
        status = "met" if agree >= share * n else "NOT met"
    return Agreement(n, agree, dec, status)
