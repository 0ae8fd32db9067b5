"""The gate's estimators: stratified, paired, with a random-effects interval (pure; no numpy).

A gate round benchmarks both arms (baseline, candidate) on the same prompts; a request of the
candidate is paired with the baseline's request of the same prompt in the same round. The
quantities the seed's rule names are population figures over the prompt set, so they are
estimated *stratified* by prompt category (the acceptance of speculation depends mostly on the
category: n-gram drafts almost nothing on chat and almost everything on repetitive text), with
the category weights ``W_h`` of the prompt set, not the few prompts a round happened to draw:

* a rate ratio (throughput at a level): ``Σ_h W_h·tok̄_c,h / Σ_h W_h·s̄_c,h`` over the same for
  the baseline, with ``s`` a request's end-to-end seconds. At concurrency 1 this is the level's
  throughput; at concurrency C with every measured request run at full concurrency (the bench
  keeps C requests in flight until the last measured one ends) it is the steady-state
  throughput by Little's law (X = C·tokens / E[latency] in a closed loop).
* a median ratio (TPOT p50): the median of the mixture over categories of the paired per-request
  log ratios ``d = log(TPOT_c/TPOT_b)``, each category a normal with its own mean and the pooled
  spread. Its sensitivity to a category's mean is that category's share of the mixture density
  at the median, so a bimodal mixture (n-gram) is judged by the categories at the median.

Uncertainty, on the log scale, has two parts:

* per request: the pooled within-category variance of ``d`` (never below
  ``2·request_noise²``), divided per category by its number of pairs and weighted by ``W_h``;
* per run: ``2·run_noise²`` per round (each round is two runs, one per arm, whose speed can
  shift as a whole: clocks, temperature), divided by the number of rounds; it cannot be
  estimated from one round, so the policy states it. From two rounds on, when the rounds
  disagree more than that model allows, their observed spread is used instead.

Intervals are ``estimate ± z·SE`` with ``z`` the normal quantile the caller chooses (the gate's
sequential design uses a Bonferroni split of its error over the rounds it may run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Estimate", "Pair", "Spread", "median_ratio", "pooled_spread", "rate_ratio"]


@dataclass(frozen=True)
class Pair:
    """One prompt measured in both arms of one round (``value``: TPOT seconds or None)."""

    category: str
    round: int
    base_tokens: float
    base_seconds: float
    cand_tokens: float
    cand_seconds: float
    base_value: float | None = None
    cand_value: float | None = None

    @property
    def rate_log_ratio(self) -> float:
        return math.log((self.cand_tokens / self.cand_seconds)
                        / (self.base_tokens / self.base_seconds))

    @property
    def value_log_ratio(self) -> float | None:
        if not self.base_value or not self.cand_value:
            return None
        return math.log(self.cand_value / self.base_value)


@dataclass(frozen=True)
class Spread:
    """Pooled within-category sum of squares of per-pair log ratios and its degrees of freedom."""

    ss: float = 0.0
    df: int = 0

    def __add__(self, other: Spread) -> Spread:
        return Spread(self.ss + other.ss, self.df + other.df)

    @property
    def var(self) -> float | None:
        return self.ss / self.df if self.df > 0 else None


@dataclass(frozen=True)
class Estimate:
    ratio: float  # candidate / baseline
    lo: float
    hi: float
    se: float  # of the log ratio
    n: int  # pairs
    rounds: int
    method: str
    weights: dict[str, float]  # category weights used


def _by_cat(values: Sequence[tuple[str, float]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for cat, v in values:
        out.setdefault(cat, []).append(v)
    return out


def pooled_spread(values: Sequence[tuple[str, float]]) -> Spread:
    """Within-category sum of squares of ``(category, value)`` and its degrees of freedom."""
    ss, df = 0.0, 0
    for vs in _by_cat(values).values():
        if len(vs) > 1:
            m = math.fsum(vs) / len(vs)
            ss += math.fsum((v - m) ** 2 for v in vs)
            df += len(vs) - 1
    return Spread(ss, df)


def _weights(cats: Sequence[str], population: Mapping[str, float] | None) -> dict[str, float]:
    """Category weights restricted to the measured categories, summing to 1."""
    present = sorted(set(cats))
    if population:
        w = {c: float(population.get(c, 0.0)) for c in present}
        if sum(w.values()) > 0:
            tot = sum(w.values())
            return {c: v / tot for c, v in w.items() if v > 0}
    counts = _by_cat([(c, 1.0) for c in cats])
    return {c: len(v) / len(cats) for c, v in counts.items()}


def _se(weights: Mapping[str, float], counts: Mapping[str, int], within_var: float,
        run_var: float, rounds: int, per_round: Sequence[float]) -> float:
    var = run_var / rounds + math.fsum(w * w * within_var / counts[c]
                                       for c, w in weights.items())
    if len(per_round) >= 2:
        m = math.fsum(per_round) / len(per_round)
        between = math.fsum((x - m) ** 2 for x in per_round) / (len(per_round) - 1)
        var = max(var, between / len(per_round))
    return math.sqrt(var)


def _within(spread: Spread, request_noise: float) -> float:
    floor = 2.0 * request_noise ** 2
    v = spread.var
    return floor if v is None else max(floor, v)


def _stratified_rate(pairs: Sequence[Pair], weights: Mapping[str, float]) -> float:
    acc = {k: [0.0, 0.0, 0.0, 0.0, 0] for k in weights}
    for p in pairs:
        a = acc.get(p.category)
        if a is None:
            continue
        a[0] += p.base_tokens
        a[1] += p.base_seconds
        a[2] += p.cand_tokens
        a[3] += p.cand_seconds
        a[4] += 1
    bt = math.fsum(w * acc[c][0] / acc[c][4] for c, w in weights.items())
    bs = math.fsum(w * acc[c][1] / acc[c][4] for c, w in weights.items())
    ct = math.fsum(w * acc[c][2] / acc[c][4] for c, w in weights.items())
    cs = math.fsum(w * acc[c][3] / acc[c][4] for c, w in weights.items())
    return (ct / cs) / (bt / bs)


def rate_ratio(pairs: Sequence[Pair], population: Mapping[str, float] | None, z: float,
               run_noise: float, request_noise: float, spread: Spread | None = None
               ) -> Estimate:
    """Stratified ratio of token rates candidate/baseline with its interval (``z``·SE).

    ``spread``: the pooled within-category spread to use (default: these pairs' own).
    """
    if not pairs:
        raise ValueError("need at least one pair")
    w = _weights([p.category for p in pairs], population)
    used = [p for p in pairs if p.category in w]
    point = _stratified_rate(used, w)
    d = [(p.category, p.rate_log_ratio) for p in used]
    own = pooled_spread(d)
    rounds = sorted({p.round for p in used})
    per_round = []
    for r in rounds:
        rp = [p for p in used if p.round == r]
        if {p.category for p in rp} == set(w):
            per_round.append(math.log(_stratified_rate(rp, w)))
    counts = {c: len(v) for c, v in _by_cat(d).items()}
    # d log(ratio) / d log(category's seconds): its share of the candidate's time
    secs = {c: math.fsum(p.cand_seconds / p.cand_tokens for p in used if p.category == c)
            / counts[c] for c in w}
    tot = math.fsum(w[c] * secs[c] for c in w)
    share = {c: w[c] * secs[c] / tot for c in w}
    se = _se(share, counts, _within(spread or own, request_noise), 2.0 * run_noise ** 2,
             len(rounds), per_round)
    lp = math.log(point)
    return Estimate(point, math.exp(lp - z * se), math.exp(lp + z * se), se, len(used),
                    len(rounds), f"stratified-rate({len(used)} pairs, {len(rounds)} rounds)", w)


def _norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _mixture_median(means: Mapping[str, float], weights: Mapping[str, float],
                    sd: float) -> float:
    lo = min(means.values()) - 10 * sd
    hi = max(means.values()) + 10 * sd
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        f = math.fsum(w * _norm_cdf((mid - means[c]) / sd) for c, w in weights.items())
        if f < 0.5:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def median_ratio(pairs: Sequence[Pair], population: Mapping[str, float] | None, z: float,
                 run_noise: float, request_noise: float) -> Estimate:
    """Median of the paired per-request value ratio (TPOT) over the category mixture."""
    vals = [(p, p.value_log_ratio) for p in pairs]
    used = [(p, v) for p, v in vals if v is not None]
    if not used:
        raise ValueError("need at least one pair with values")
    w = _weights([p.category for p, _ in used], population)
    used = [(p, v) for p, v in used if p.category in w]
    d = [(p.category, v) for p, v in used]
    by = _by_cat(d)
    means = {c: math.fsum(v) / len(v) for c, v in by.items()}
    own = pooled_spread(d)
    within = _within(own, request_noise)
    sd_point = math.sqrt(own.var) if own.var else math.sqrt(within)
    sd_point = max(sd_point, 1e-4)
    med = _mixture_median(means, w, sd_point)
    dens = {c: wt * _norm_pdf((med - means[c]) / sd_point) for c, wt in w.items()}
    tot = math.fsum(dens.values())
    if tot <= 0:  # the median sits in a gap between categories: weigh the nearest ones
        near = min(abs(med - m) for m in means.values())
        dens = {c: w[c] for c, m in means.items() if abs(med - m) <= near + 1e-12}
        tot = math.fsum(dens.values())
    infl = {c: v / tot for c, v in dens.items()}
    rounds = sorted({p.round for p, _ in used})
    per_round = []
    for r in rounds:
        rd = [(c, v) for (p, v), (c, _) in zip(used, d, strict=True) if p.round == r]
        rb = _by_cat(rd)
        if set(rb) == set(w):
            rm = {c: math.fsum(v) / len(v) for c, v in rb.items()}
            per_round.append(_mixture_median(rm, w, sd_point))
    counts = {c: len(v) for c, v in by.items()}
    se = _se({c: infl.get(c, 0.0) for c in w}, counts, within, 2.0 * run_noise ** 2,
             len(rounds), per_round)
    return Estimate(math.exp(med), math.exp(med - z * se), math.exp(med + z * se), se,
                    len(used), len(rounds),
                    f"stratified-median({len(used)} pairs, {len(rounds)} rounds)", w)
