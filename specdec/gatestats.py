"""The gate's estimators: per arm, stratified by prompt category, with their variance (pure).

A gate round benchmarks both arms (baseline: speculation off; candidate) at each level the
gate still needs. The seed's rule names population figures over the prompt set, so each arm's
figure is estimated *stratified* by prompt category with the category weights ``W_h`` of the
prompt set (the acceptance of speculation depends mostly on the category: n-gram drafts almost
nothing on chat and almost everything on repetitive text):

* a token rate (throughput at a level): ``Σ_h W_h·tok̄_h / Σ_h W_h·s̄_h`` with ``s`` a request's
  end-to-end seconds. At concurrency 1 this is the level's throughput; at concurrency C with
  every measured request run at full concurrency (the bench keeps C requests in flight until
  the last measured one ends) it is the steady-state throughput / C (Little's law).
* a median (TPOT p50): the median of the mixture over categories of per-request log TPOTs,
  each category a normal with its own mean and spread. Its sensitivity to a category's mean is
  that category's share of the mixture density at the median, so a two-peaked mixture (n-gram)
  is judged by the categories at the median.

An arm whose requests miss a category is estimated pooled (one category): the baseline's
per-token speed does not depend on the prompt's category (there is no drafting), which is why
the gate may measure fewer baseline requests than candidate ones.

Variance, on the log scale, has two parts:

* per request: for each category, the model ``request_noise² + intrinsic`` (``intrinsic``: the
  variance a request's own chunk sizes imply for its seconds per token: tokens per engine step
  vary with acceptance, so a request of S steps has ``CV²/S``), pooled with the observed
  within-category variance, the model counting as ``PRIOR_DF`` degrees of freedom;
* per run: ``run_noise²`` per arm and run (a run's speed shifts as a whole: clocks,
  temperature), weighted by each round's share of the figure (rounds may measure different
  categories); one round cannot estimate it, so the policy states it; from two rounds on, the
  spread of the rounds' mean residuals beyond what the requests explain is pooled with it the
  same way.

Each figure also says where one more request would lower its variance most
(`ArmFigure.allocation_score`: influence × spread, Neyman's allocation), which the gate uses
to choose the candidate's categories in the next round.

Intervals are ``estimate ± z·SE``; the caller chooses ``z``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["PRIOR_DF", "ArmFigure", "Estimate", "Obs", "arm_median", "arm_rate", "compare",
           "weights_for"]

PRIOR_DF = 4.0  # weight of the noise model against observed spread, in degrees of freedom


@dataclass(frozen=True)
class Obs:
    """One measured request of one arm at one level (``tpot``: seconds per token or None)."""

    category: str
    round: int
    tokens: float
    seconds: float
    tpot: float | None = None
    intrinsic: float = 0.0  # variance of log(seconds per token) implied by its chunk sizes
    key: str = ""  # prompt id (reports only)

    @property
    def log_time(self) -> float:
        return math.log(self.seconds / self.tokens)


@dataclass(frozen=True)
class ArmFigure:
    log: float  # log of the figure (rate: tokens/s; median: seconds per token)
    var: float  # variance of ``log`` from the requests (not the run)
    n: int
    rounds: tuple[int, ...]
    stratified: bool
    influence: dict[str, float]  # d log(figure) / d (category's mean log time)
    sd: dict[str, float]  # per-request sd of log time, per category
    run_w2: float  # Σ over rounds of (the round's weight in the figure)²
    run_excess: float  # rounds' spread beyond what the requests explain (a run-noise estimate)
    run_df: int

    def allocation_score(self) -> dict[str, float]:
        """Neyman: where a request lowers this figure's variance most."""
        return {c: abs(self.influence.get(c, 0.0)) * self.sd.get(c, 0.0) for c in self.sd}


@dataclass(frozen=True)
class Estimate:
    ratio: float  # candidate / baseline
    lo: float
    hi: float
    se: float  # of the log ratio
    n: int  # requests, both arms
    rounds: int
    method: str
    weights: dict[str, float]  # category weights used for the candidate
    cand: ArmFigure | None = None

    @property
    def log(self) -> float:
        return math.log(self.ratio)


def _by_cat(obs: Sequence[Obs]) -> dict[str, list[Obs]]:
    out: dict[str, list[Obs]] = {}
    for o in obs:
        out.setdefault(o.category, []).append(o)
    return out


def weights_for(cats: Sequence[str], population: Mapping[str, float] | None) -> dict[str, float]:
    """Category weights over the measured categories, summing to 1 (the population's shares
    when known, else the measured counts)."""
    present = sorted(set(cats))
    if population:
        w = {c: float(population.get(c, 0.0)) for c in present}
        tot = sum(w.values())
        if tot > 0:
            return {c: v / tot for c, v in w.items() if v > 0}
    return {c: sum(1 for x in cats if x == c) / len(cats) for c in present}


def _shrunk(values: Sequence[float], model: float) -> float:
    """Per-request variance: the model pooled with the observed spread of ``values``."""
    n = len(values)
    if n < 2:
        return model
    m = math.fsum(values) / n
    ss = math.fsum((v - m) ** 2 for v in values)
    return (PRIOR_DF * model + ss) / (PRIOR_DF + n - 1)


def _groups(obs: Sequence[Obs], population: Mapping[str, float] | None
            ) -> tuple[dict[str, list[Obs]], dict[str, float], bool]:
    """Strata and weights: by category when every population category was measured."""
    by = _by_cat(obs)
    if population and all(c in by for c, w in population.items() if w > 0):
        return by, weights_for(list(by), population), True
    return {"all": list(obs)}, {"all": 1.0}, False


def _runs(groups: Mapping[str, list[Obs]], values: Mapping[str, list[float]],
          means: Mapping[str, float], var: Mapping[str, float], infl: Mapping[str, float]
          ) -> tuple[tuple[int, ...], float, float, int]:
    """Rounds, Σ (round weight)², and the run-noise estimate from the rounds' residuals."""
    per: dict[int, list[tuple[float, float]]] = {}
    weight: dict[int, float] = {}
    for c, g in groups.items():
        for o, v in zip(g, values[c], strict=True):
            per.setdefault(o.round, []).append((v - means[c], var[c]))
            weight[o.round] = weight.get(o.round, 0.0) + infl.get(c, 0.0) / len(g)
    rounds = tuple(sorted(per))
    w2 = math.fsum(w * w for w in weight.values())
    if len(rounds) < 2:
        return rounds, w2, 0.0, 0
    res = [math.fsum(e for e, _ in per[r]) / len(per[r]) for r in rounds]
    expect = math.fsum(math.fsum(v for _, v in per[r]) / len(per[r]) ** 2 for r in rounds)
    m = math.fsum(res) / len(res)
    spread = math.fsum((x - m) ** 2 for x in res) / (len(res) - 1)
    return rounds, w2, max(0.0, spread - expect / len(rounds)), len(rounds) - 1


def arm_rate(obs: Sequence[Obs], population: Mapping[str, float] | None,
             request_noise: float) -> ArmFigure:
    """Stratified token rate of one arm (ratio of means) and its per-request variance."""
    if not obs:
        raise ValueError("need at least one request")
    groups, w, strat = _groups(obs, population)
    tok = {c: math.fsum(o.tokens for o in g) / len(g) for c, g in groups.items()}
    sec = {c: math.fsum(o.seconds for o in g) / len(g) for c, g in groups.items()}
    tt = math.fsum(w[c] * tok[c] for c in w)
    ts = math.fsum(w[c] * sec[c] for c in w)
    logs = {c: [o.log_time for o in g] for c, g in groups.items()}
    means = {c: math.fsum(v) / len(v) for c, v in logs.items()}
    vreq, infl, var = {}, {}, 0.0
    for c, g in groups.items():
        model = request_noise ** 2 + math.fsum(o.intrinsic for o in g) / len(g)
        vreq[c] = _shrunk(logs[c], model)
        infl[c] = w[c] * sec[c] / ts  # d log(rate) / d log(category's mean seconds)
        var += infl[c] ** 2 * vreq[c] / len(g)
    rounds, w2, excess, df = _runs(groups, logs, means, vreq, infl)
    return ArmFigure(math.log(tt / ts), var, len(obs), rounds, strat, infl,
                     {c: math.sqrt(v) for c, v in vreq.items()}, w2, excess, df)


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def mixture_median(means: Mapping[str, float], sds: Mapping[str, float],
                   weights: Mapping[str, float]) -> float:
    lo = min(means[c] - 10 * sds[c] for c in weights)
    hi = max(means[c] + 10 * sds[c] for c in weights)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        f = math.fsum(w * _cdf((mid - means[c]) / sds[c]) for c, w in weights.items())
        lo, hi = (mid, hi) if f < 0.5 else (lo, mid)
    return 0.5 * (lo + hi)


def arm_median(obs: Sequence[Obs], population: Mapping[str, float] | None,
               request_noise: float) -> ArmFigure:
    """Median of one arm's per-request TPOT over the category mixture, and its variance."""
    obs = [o for o in obs if o.tpot]
    if not obs:
        raise ValueError("need at least one request with a TPOT")
    groups, w, strat = _groups(obs, population)
    logs = {c: [math.log(o.tpot) for o in g if o.tpot] for c, g in groups.items()}
    means, sds, vreq = {}, {}, {}
    for c, g in groups.items():
        intrinsic = math.fsum(o.intrinsic for o in g) / len(g)
        vreq[c] = _shrunk(logs[c], request_noise ** 2 + intrinsic)
        means[c] = math.fsum(logs[c]) / len(logs[c])
        # the population's spread: without the measurement's own noise
        sds[c] = math.sqrt(max(intrinsic, vreq[c] - request_noise ** 2, 1e-6))
    med = mixture_median(means, sds, w)
    dens = {c: w[c] * _pdf((med - means[c]) / sds[c]) / sds[c] for c in w}
    tot = math.fsum(dens.values())
    if tot <= 0:  # far in a gap between categories: the nearest ones
        near = min(abs(med - m) for m in means.values())
        dens = {c: w[c] for c, m in means.items() if abs(med - m) <= near + 1e-12}
        tot = math.fsum(dens.values())
    infl = {c: dens.get(c, 0.0) / tot for c in w}
    var = math.fsum(infl[c] ** 2 * vreq[c] / len(logs[c]) for c in w)
    rounds, w2, excess, df = _runs(groups, logs, means, vreq, infl)
    return ArmFigure(med, var, len(obs), rounds, strat, infl,
                     {c: math.sqrt(v) for c, v in vreq.items()}, w2, excess, df)


def _figure(kind: str, obs: Sequence[Obs], population: Mapping[str, float] | None,
            request_noise: float) -> ArmFigure:
    return (arm_rate if kind == "rate" else arm_median)(obs, population, request_noise)


def _run_var(f: ArmFigure, run_noise: float) -> float:
    """This arm's run-noise variance: the policy's, pooled with the rounds' own spread."""
    est = (PRIOR_DF * run_noise ** 2 + f.run_df * f.run_excess) / (PRIOR_DF + f.run_df)
    return est * f.run_w2


def compare(kind: str, cand: Sequence[Obs], base: Sequence[Obs],
            population: Mapping[str, float] | None, z: float, run_noise: float,
            request_noise: float) -> Estimate:
    """Candidate / baseline of a rate (``kind`` "rate") or of a TPOT median ("median")."""
    c = _figure(kind, cand, population, request_noise)
    b = _figure(kind, base, population, request_noise)
    log = c.log - b.log
    var = c.var + b.var + _run_var(c, run_noise) + _run_var(b, run_noise)
    se = math.sqrt(var)
    w = weights_for([o.category for o in cand], population) if c.stratified else {"all": 1.0}
    rounds = len(set(c.rounds) | set(b.rounds))
    name = "stratified-rate" if kind == "rate" else "stratified-median"
    method = (f"{name}({c.n}+{b.n} requests, {rounds} rounds"
              f"{'' if b.stratified else ', baseline pooled'})")
    return Estimate(math.exp(log), math.exp(log - z * se), math.exp(log + z * se), se,
                    c.n + b.n, rounds, method, w, c)
