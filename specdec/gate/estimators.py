"""The gate's estimators: per arm, stratified by prompt category, robust to stray requests,
with a variance estimated from what was measured (pure).

A gate round benchmarks both arms (baseline: speculation off; candidate) at each level the
gate still needs. The default policy names population figures over the prompt set, so each arm's
figure is estimated *stratified* by prompt category with the category weights ``W_h`` of the
prompt set (the acceptance of speculation depends mostly on the category):

* a token rate (throughput at a level): ``Σ_h W_h·tok̄_h / Σ_h W_h·s̄_h`` with ``s`` a request's
  end-to-end seconds (at concurrency C with C requests in flight throughout: the steady-state
  throughput / C, by Little's law);
* a median (TPOT p50): the median of the mixture over categories of per-request log TPOTs,
  each category a normal with its own mean and spread.

**Timing and acceptance apart.** A request's seconds per token is its engine's *step time*
times its steps per token. The bench records each request's chunks (one per engine step), so
steps per token (acceptance) are counted, not timed, and the step time — the same for every
request of one arm, level and run whatever its prompt — is the only timed part. So, per arm,
level and round (a *run*), the step time is one robust location of the requests' log step
times — their median up to ``MEDIAN_UP_TO`` requests, a Huber M-estimate (``HUBER_C``, scale
below) beyond — which one stray slow request cannot swing, after the step times above a gap
of ``GAP_Z`` timing sds are set aside (`below_gap`: two strays of four would move a median);
each request is then counted at that step time. Throttling within a run shifts the location
like run noise; the gate alternates which arm runs first, round after round, so a drift enters
the rounds with opposite signs.

Variance, on the log scale, from three parts:

* **timing per request** ``σ_t²``: the spread of the requests' log step times within their runs,
  pooled over both arms of the level (Shamos' median of pairwise differences: robust to the
  stray requests it is meant to survive, and unbiased for runs of 3-4 requests, where a MAD
  is not), never below the policy's ``request_noise²`` (the prior is a floor);
* **timing per run** ``ρ²``: the largest of the policy's ``run_noise²``, that prior scaled by how
  much noisier the host's requests are than the policy assumed (over every level measured, so
  the scale rests on more requests than one level's: a noisier host is noisier in both, and one
  round cannot show its run noise), and, from two rounds on,
  the runs' own spread beyond what their requests explain (pooled over both arms);
* **acceptance**: per category, the spread of the requests' steps per token (counted), pooled
  at ``PRIOR_DF`` with a prior: the larger of what a request's own chunk sizes imply (``CV²/S``
  over its S steps) and the spread between requests within a category pooled over the
  categories with two or more (a request's chunks do not show how far its prompt lies from its
  category: a category measured once is not taken as known); when every category was measured
  once (the first look), a median's spread comes from the categories paired in order
  (collapsed strata, `collapsed`), pooled with the chunks' model at ``PRIOR_DF``.

A request without chunk records (a result with only level figures, a server that does not
stream per step) is counted as before this split: its own seconds per token, with the model's
request noise pooled with the observed within-category spread. An arm whose requests miss a
category is estimated pooled (one category): the baseline's step time does not depend on the
prompt (there is no drafting), which is why the gate measures fewer baseline requests.

Each figure also says where one more request would lower its variance most
(`ArmFigure.allocation_score`: influence × spread, Neyman's allocation), which the gate uses to
choose the candidate's categories in the next round, and how its variance splits into a part
per run and a part per request (`Estimate.run_var`, `Estimate.req_var`), which the gate uses to
plan how many requests the next rounds need.

Intervals are ``estimate ± z·SE``; the caller chooses ``z``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["GAP_Z", "HUBER_C", "PRIOR_DF", "ArmFigure", "Estimate", "Obs", "Timing", "arm_median",
           "arm_rate", "below_gap", "compare", "host_sd", "huber", "mixture_median",
           "pairwise_sd", "timing", "weights_for"]

PRIOR_DF = 4.0  # weight of a variance model against observed spread, in degrees of freedom
HUBER_C = 1.5  # Huber's tuning constant, in units of the timing scale
HUBER_VAR = 1.1  # variance of a Huber location over n requests: σ²/n × this (small n)
MEDIAN_UP_TO = 4  # up to this many requests a run's location is their median
GAP_Z = 6.0  # a run's step times above a gap this many timing sds wide are strays (`below_gap`)
# variance of the median of n normal values, in units of σ² (n = 1..4; 3: 0.449, 4: 0.298)
_MEDIAN_VAR = {1: 1.0, 2: 0.5, 3: 0.449, 4: 0.298}


def location_var(n: int) -> float:
    """Variance of a run's location (`huber`) over ``n`` requests, in units of σ²."""
    return _MEDIAN_VAR.get(n, 1.0) if n <= MEDIAN_UP_TO else HUBER_VAR / n
SHAMOS = 1.0 / (math.sqrt(2.0) * 0.6745)  # median |x_i - x_j| to a standard deviation


@dataclass(frozen=True)
class Obs:
    """One measured request of one arm at one level (``tpot``: seconds per token or None;
    ``steps``: decode steps, i.e. chunks − 1, or None when the result has no chunk records)."""

    category: str
    round: int
    tokens: float
    seconds: float
    tpot: float | None = None
    intrinsic: float = 0.0  # variance of log(seconds per token) implied by its chunk sizes
    key: str = ""  # prompt id (reports only)
    ttft: float = 0.0  # seconds to the first token
    steps: float | None = None  # decode steps (one chunk per engine step)

    @property
    def log_time(self) -> float:
        return math.log(self.seconds / self.tokens)

    @property
    def log_step(self) -> float | None:
        """Log seconds per decode step (None without chunk records)."""
        dec = self.seconds - self.ttft
        if self.steps is None or self.steps < 1 or dec <= 0:
            return None
        return math.log(dec / self.steps)


@dataclass(frozen=True)
class Timing:
    """The timed part of one level, both arms: each run's robust step-time location and the
    scales around it."""

    location: dict[tuple[str, int], float]  # (arm, round) -> Huber location of log step time
    count: dict[tuple[str, int], int]  # (arm, round) -> requests in that run
    sd: float  # per-request timing sd (robust, floored by the policy's request noise)
    sd_raw: float  # as measured (0: nothing to measure it from)
    run_sd: float  # per-run sd: the largest of the prior, the scaled prior and the runs' spread
    run_df: int  # degrees of freedom of the runs' own spread (0: none measured)

    def loc_var(self, arm: str, rnd: int) -> float:
        """Variance of one run's location from its requests (not the run's own noise)."""
        return location_var(self.count.get((arm, rnd), 1)) * self.sd ** 2


@dataclass(frozen=True)
class ArmFigure:
    log: float  # log of the figure (rate: tokens/s; median: seconds per token)
    var: float  # variance of ``log`` from the requests (timing and acceptance, not the run)
    n: int
    rounds: tuple[int, ...]
    stratified: bool
    influence: dict[str, float]  # d log(figure) / d (category's mean log time)
    sd: dict[str, float]  # per-request sd of log time, per category
    run_w2: float  # Σ over rounds of (the round's weight in the figure)²
    robust: bool = True  # timing from run locations (chunk records), else per request

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
    run_var: float = 0.0  # the part of se² that is run noise (shrinks with rounds only)
    req_var: float = 0.0  # the part that is per request (shrinks with requests)
    timing_sd: float = 0.0  # per-request timing sd as measured (0: not measurable)

    @property
    def log(self) -> float:
        return math.log(self.ratio)


# -- robust pieces ----------------------------------------------------------------------------
def huber(values: Sequence[float], scale: float, c: float = HUBER_C) -> float:
    """Huber's M-estimate of location (from the median, scale fixed)."""
    if not values:
        raise ValueError("need at least one value")
    mu = statistics.median(values)
    if len(values) <= MEDIAN_UP_TO or scale <= 0:
        return mu  # a handful of values: their median outvotes one stray
    for _ in range(50):
        psi = [max(-c * scale, min(c * scale, v - mu)) for v in values]
        step = math.fsum(psi) / len(values)
        mu += step
        if abs(step) < 1e-9:
            break
    return mu


def below_gap(values: Sequence[float], gap: float) -> list[float]:
    """A run's log step times up to the first gap wider than ``gap`` between two of them,
    from the fastest: what lies above it is stray slow requests, however many (a stray is
    slow, never fast: no request steps faster than its engine), which a median of a handful
    would follow once they are half of them."""
    xs = sorted(values)
    for i in range(1, len(xs)):
        if xs[i] - xs[i - 1] > gap:
            return xs[:i]
    return xs


def pairwise_sd(groups: Sequence[Sequence[float]]) -> float:
    """A robust sd from the within-group pairwise differences (the median absolute
    difference / (√2·0.6745): Shamos' estimator, nearly unbiased for groups of 3-4, unlike a
    MAD around so small a group's median); 0 when no group has two values."""
    diffs = [abs(a - b) for g in groups for i, a in enumerate(g) for b in g[i + 1:]]
    return statistics.median(diffs) * SHAMOS if diffs else 0.0


def timing(arms: Mapping[str, Sequence[Obs]], request_noise: float, run_noise: float,
           host_sd: float = 0.0) -> Timing:
    """Step-time locations of every run of both arms at one level, and the timing scales
    (``host_sd``: the per-request sd over every level the runs measured, `host_sd`, which
    scales the run-noise prior: more requests than this level's alone)."""
    by: dict[tuple[str, int], list[float]] = {}
    for arm, obs in arms.items():
        for o in obs:
            ls = o.log_step
            if ls is not None:
                by.setdefault((arm, o.round), []).append(ls)
    raw = pairwise_sd(list(by.values()))
    sd = max(request_noise, raw)
    kept = {g: below_gap(v, GAP_Z * sd) for g, v in by.items()}
    loc = {g: huber(v, sd) for g, v in kept.items()}
    count = {g: len(v) for g, v in kept.items()}
    # the runs' own spread, per arm, beyond what their requests explain; pooled over the arms
    ss, df = 0.0, 0
    for arm in arms:
        rs = sorted(r for a, r in loc if a == arm)
        if len(rs) < 2:
            continue
        xs = [loc[(arm, r)] for r in rs]
        m = math.fsum(xs) / len(xs)
        spread = math.fsum((x - m) ** 2 for x in xs)
        expect = math.fsum(location_var(count[(arm, r)]) * sd ** 2 for r in rs) / len(rs)
        ss += max(0.0, spread - (len(rs) - 1) * expect)
        df += len(rs) - 1
    noisier = max(sd, host_sd)
    scaled = run_noise * noisier / request_noise if request_noise > 0 else run_noise
    run_sd = max(run_noise, scaled, math.sqrt(ss / df) if df else 0.0)
    return Timing(loc, count, sd, raw, run_sd, df)


# -- strata -----------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class _Arm:
    """One arm's requests as the figures use them: each request's log seconds per token with
    its timed part replaced by its run's location (robust), or as measured."""

    groups: dict[str, list[Obs]]
    w: dict[str, float]
    strat: bool
    robust: bool
    x: dict[str, list[float]]  # per category: log seconds per token, per request (normalised)
    model: dict[str, float]  # per category: variance model of x per request (besides timing)


def _arm(arm: str, obs: Sequence[Obs], population: Mapping[str, float] | None, t: Timing,
         request_noise: float, tpot: bool) -> _Arm:
    groups, w, strat = _groups(obs, population)
    robust = all(o.log_step is not None and (arm, o.round) in t.location
                 for g in groups.values() for o in g)
    x: dict[str, list[float]] = {}
    model: dict[str, float] = {}
    for c, g in groups.items():
        vals = []
        for o in g:
            raw = math.log(o.tpot) if tpot and o.tpot else o.log_time
            ls = o.log_step
            vals.append(raw + (t.location[(arm, o.round)] - ls) if robust and ls is not None
                        else raw)
        x[c] = vals
        intrinsic = math.fsum(o.intrinsic for o in g) / len(g)
        model[c] = intrinsic if robust else request_noise ** 2 + intrinsic
    # a request's own chunks show its steps' spread, not how far its prompt's acceptance lies
    # from its category's: the spread between requests of a category, pooled over the
    # categories that have two or more, is the prior of a category that has fewer
    ss = math.fsum(math.fsum((v - math.fsum(vs) / len(vs)) ** 2 for v in vs)
                   for vs in x.values() if len(vs) > 1)
    df = sum(len(vs) - 1 for vs in x.values() if len(vs) > 1)
    if not df and tpot:  # a median between categories' peaks moves with their spreads
        ss, df = collapsed(x)
        model = {c: (PRIOR_DF * v + ss) / (PRIOR_DF + df) for c, v in model.items()}
    elif df:
        model = {c: max(v, ss / df) for c, v in model.items()}
    return _Arm(groups, w, strat, robust, x, model)


def collapsed(x: Mapping[str, Sequence[float]]) -> tuple[float, int]:
    """Every category measured once: the spread within a category from *collapsed strata*
    (Cochran, Sampling Techniques, 3rd ed., §5A.12): categories paired in order of their value,
    each pair's difference read as two draws of one stratum — an overstatement by the
    difference between paired categories, the safe side while nothing else shows it."""
    vals = sorted(math.fsum(vs) / len(vs) for vs in x.values() if vs)
    pairs = [(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
    return math.fsum((a - b) ** 2 / 2.0 for a, b in pairs), len(pairs)


def _round_weights(a: _Arm, infl: Mapping[str, float]) -> dict[int, float]:
    """Each round's share of the figure (through the requests it contributed)."""
    out: dict[int, float] = {}
    for c, g in a.groups.items():
        for o in g:
            out[o.round] = out.get(o.round, 0.0) + infl.get(c, 0.0) / len(g)
    return out


def _timing_var(arm: str, a: _Arm, rw: Mapping[int, float], t: Timing) -> float:
    """The figure's variance from its runs' step-time locations (per request, not per run)."""
    if not a.robust:
        return 0.0
    return math.fsum(w * w * t.loc_var(arm, r) for r, w in rw.items())


def arm_rate(obs: Sequence[Obs], population: Mapping[str, float] | None,
             request_noise: float, t: Timing | None = None, arm: str = "arm") -> ArmFigure:
    """Stratified token rate of one arm (ratio of means) and its variance from requests."""
    if not obs:
        raise ValueError("need at least one request")
    t = t or timing({arm: obs}, request_noise, 0.0)
    a = _arm(arm, obs, population, t, request_noise, tpot=False)
    tok = {c: math.fsum(o.tokens for o in g) / len(g) for c, g in a.groups.items()}
    sec = {c: math.fsum(o.tokens * math.exp(v) for o, v in zip(g, a.x[c], strict=True))
           / len(g) for c, g in a.groups.items()}
    tt = math.fsum(a.w[c] * tok[c] for c in a.w)
    ts = math.fsum(a.w[c] * sec[c] for c in a.w)
    vreq, infl, var = {}, {}, 0.0
    for c in a.groups:
        vreq[c] = _shrunk(a.x[c], a.model[c])
        infl[c] = a.w[c] * sec[c] / ts  # d log(rate) / d log(category's mean seconds)
        var += infl[c] ** 2 * vreq[c] / len(a.x[c])
    rw = _round_weights(a, infl)
    var += _timing_var(arm, a, rw, t)
    sd = {c: math.sqrt(v + (t.sd ** 2 if a.robust else 0.0)) for c, v in vreq.items()}
    return ArmFigure(math.log(tt / ts), var, len(obs), tuple(sorted(rw)), a.strat, infl, sd,
                     math.fsum(v * v for v in rw.values()), a.robust)


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
               request_noise: float, t: Timing | None = None, arm: str = "arm") -> ArmFigure:
    """Median of one arm's per-request TPOT over the category mixture, and its variance."""
    obs = [o for o in obs if o.tpot]
    if not obs:
        raise ValueError("need at least one request with a TPOT")
    t = t or timing({arm: obs}, request_noise, 0.0)
    a = _arm(arm, obs, population, t, request_noise, tpot=True)
    means, sds, vreq = {}, {}, {}
    for c, vals in a.x.items():
        vreq[c] = _shrunk(vals, a.model[c])
        means[c] = math.fsum(vals) / len(vals)
        # the population's spread: without the measurement's own timing noise
        intrinsic = math.fsum(o.intrinsic for o in a.groups[c]) / len(vals)
        pop = vreq[c] if a.robust else vreq[c] - request_noise ** 2
        sds[c] = math.sqrt(max(intrinsic, pop, 1e-6))
    med = mixture_median(means, sds, a.w)
    dens = {c: a.w[c] * _pdf((med - means[c]) / sds[c]) / sds[c] for c in a.w}
    tot = math.fsum(dens.values())
    if tot <= 0:  # far in a gap between categories: the nearest ones
        near = min(abs(med - m) for m in means.values())
        dens = {c: a.w[c] for c, m in means.items() if abs(med - m) <= near + 1e-12}
        tot = math.fsum(dens.values())
    infl = {c: dens.get(c, 0.0) / tot for c in a.w}
    var = math.fsum(infl[c] ** 2 * vreq[c] / len(a.x[c]) for c in a.w)
    rw = _round_weights(a, infl)
    var += _timing_var(arm, a, rw, t)
    sd = {c: math.sqrt(v + (t.sd ** 2 if a.robust else 0.0)) for c, v in vreq.items()}
    return ArmFigure(med, var, len(obs), tuple(sorted(rw)), a.strat, infl, sd,
                     math.fsum(v * v for v in rw.values()), a.robust)


def host_sd(arms: Sequence[Sequence[Obs]]) -> float:
    """The per-request timing sd over every run measured (each element: one arm's requests at
    one level; its runs are its rounds): one pairwise estimate from all of them."""
    by: dict[tuple[int, int], list[float]] = {}
    for i, obs in enumerate(arms):
        for o in obs:
            ls = o.log_step
            if ls is not None:
                by.setdefault((i, o.round), []).append(ls)
    return pairwise_sd(list(by.values()))


def compare(kind: str, cand: Sequence[Obs], base: Sequence[Obs],
            population: Mapping[str, float] | None, z: float, run_noise: float,
            request_noise: float, noise_sd: float = 0.0) -> Estimate:
    """Candidate / baseline of a rate (``kind`` "rate") or of a TPOT median ("median");
    ``noise_sd``: the host's per-request timing sd over every level (`host_sd`)."""
    t = timing({"candidate": cand, "baseline": base}, request_noise, run_noise, noise_sd)
    fig = arm_rate if kind == "rate" else arm_median
    c = fig(cand, population, request_noise, t, "candidate")
    b = fig(base, population, request_noise, t, "baseline")
    log = c.log - b.log
    run_var = t.run_sd ** 2 * (c.run_w2 + b.run_w2)
    req_var = c.var + b.var
    se = math.sqrt(run_var + req_var)
    w = weights_for([o.category for o in cand], population) if c.stratified else {"all": 1.0}
    rounds = len(set(c.rounds) | set(b.rounds))
    name = "stratified-rate" if kind == "rate" else "stratified-median"
    robust = "robust step time" if c.robust and b.robust else "per-request time"
    method = (f"{name}({c.n}+{b.n} requests, {rounds} rounds"
              f"{'' if b.stratified else ', baseline pooled'}, {robust})")
    return Estimate(math.exp(log), math.exp(log - z * se), math.exp(log + z * se), se,
                    c.n + b.n, rounds, method, w, c, run_var, req_var, t.sd_raw)
