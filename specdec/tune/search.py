"""Auto-tuning ``num_speculative_tokens`` (and the method, when it is not pinned): pure logic.

The tune phase measures a few configurations on the host with the gate's own bench rounds and
fits each method's response curve, k → throughput at c=1 and c=8, from them:

* **tokens per step** ``L_h(k)`` per prompt category: drafting is a chain (position ``i`` is
  accepted only when ``0..i-1`` were), so drafting ``k`` tokens yields ``min(s, k + 1)`` tokens
  in a step that yielded ``s`` tokens at a larger k. The bench records each request's chunk
  sizes (one chunk per engine step), so one measurement at ``K_MAX`` gives ``L_h(k)`` for every
  ``k ≤ K_MAX`` exactly;
* **step time** ``t(k) = a + b·k`` (the drafter's forwards grow with k), a least-squares line
  through the measured points, its slope never below 0 (with one point: anchored at the
  baseline's step time);
* **which points give ``L_h(k)``** (`Search.pooled`): the lowest point at or above k, and each
  higher one whose chunk sizes cut at that point's length do not accept less than it by more
  than ``POOL_Z`` standard errors (one-sided: acceptance that falls with the tokens drafted is
  how the chain fails, and pooling such a point biases the lower k, while leaving out a good
  one only costs data);
* each point is ``POINT_ROUNDS`` rounds of c=1 requests on one release (`point_benches`: one
  restart; a round costs seconds, a restart minutes), so one run's clock state and which
  requests it drew weigh less: with fewer, a point's own tokens per step (n-gram chunk sizes
  are very dispersed) was often 10–20% off and won the choice by luck;
* a request of category h then takes ``ttft_h + (n − 1)·t(k)/L_h(k)``; the level's rate is the
  gate's stratified rate (`specdec.gate.estimators`) over the prompt set's categories. Each curve
  row also carries the step cost ``t(k)`` over the baseline's step per level (``cost_c1``,
  ``cost_c8``), which `specdec watch` reads.

The search (`Search.next`), per method: the running configuration (free: no restart), then
``K_MAX`` (its chunk sizes give ``L_h(k)`` for every k), then the curve's predicted best when it
is not measured yet (with one point so far: ``K_MAX/2`` when that best is ``K_MAX``, for the
slope) and promises more than ``REFINE_GAIN`` over the best measured point; when the best
measured point is the lowest and a higher one accepts less at its length (the chain fails, so
the curve below it is a lower bound), the curve's best below it; when the two points
are far apart and within ``FLAT`` of each other, the middle — at most three points. While the
release running now is tied with its method's best measured point (or is the best with another
tied: within ``TIE_Z`` standard errors of their difference, each point's from its rounds' step
times and its requests' tokens per step, `specdec.tune.stderr`), it gets ``POINT_ROUNDS`` more
rounds (no restart), up to ``MAX_ROUNDS``: a close call gets more data where it is cheap. Two
methods whose best points end within ``REPEAT_MARGIN`` get those points measured once more
(pooled; more rounds of the running one count).
A method after the first gets one point at ``K_MAX``, and more only if its curve can come within
``CUTOFF`` of the best so far. The choice (`Search.choose`) is by the gate's
objective, on the fitted curve at measured points: the highest c=1 throughput whose c=8
throughput stays within the gate's tolerance; where the engine has
``num_speculative_tokens_per_batch_size`` the c=1 and c=8 optima go into a per-batch-size
schedule (batch sizes ``1..SPLIT`` drafting the c=1 optimum, larger ones the c=8 one; 0 turns
speculation off).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specdec.gate.estimators import mixture_median
from specdec.gate.rounds import BenchSettings, RoundBench, round_bench
from specdec.plan.types import K_MAX, GatePolicy
from specdec.tune.figures import LevelFit, level_fit, merged
from specdec.tune.stderr import point_se

__all__ = ["CUTOFF", "FLAT", "K_MAX", "MAX_ROUNDS", "POINT_ROUNDS", "POOL_Z", "REFINE_GAIN",
           "REPEAT_MARGIN", "SAME_Z", "SPLIT", "TIE_Z", "Config", "Search", "TuneResult",
           "level_fit", "point_benches", "schedule"]

REFINE_GAIN = 0.02  # measure the curve's predicted best when it promises this much more
CUTOFF = 0.95  # a later method is refined only if its curve reaches this share of the best
REPEAT_MARGIN = 0.15  # two methods this close at their best points: each measured once more
FLAT = 0.10  # two points of a method this close, far apart: the middle is measured too
SPLIT = 2  # per-batch-size schedule: batch 1..SPLIT use the c=1 optimum
POINT_ROUNDS = 6  # rounds of c=1 requests per tune point (the first with the c=8 level too)
SAME_Z = 2.0  # two points' chunk sizes differ (the chain does not hold) beyond this z
POOL_Z = 1.0  # a higher point accepting less than this many standard errors: not pooled
TIE_Z = 1.0  # two points closer than this many standard errors of their difference: tied
MAX_ROUNDS = 3 * POINT_ROUNDS  # a tied point is measured further up to this many rounds


def point_benches(settings: BenchSettings, policy: GatePolicy, first: int = 0
                  ) -> list[RoundBench]:
    """The benchmarks of one tune point, run back to back on one release (no restart): the
    gate's round-1 candidate benchmark, then ``POINT_ROUNDS - 1`` more rounds at the keep
    level only, each with the next prompts of every category and no warmup. Each run has its
    own clock and thermal state, so the point's step time averages that run-level noise.
    ``first`` > 0 (`Search.first_round`: more rounds of the release running now): rounds
    ``first..first + POINT_ROUNDS - 1``, all at the keep level only."""
    more = [replace(round_bench(settings, policy, "candidate", r,
                                levels=[policy.keep_concurrency]), warmup=0)
            for r in range(max(1, first), first + POINT_ROUNDS)]
    return more if first else [round_bench(settings, policy, "candidate", 0), *more]


@dataclass(frozen=True)
class Config:
    """What a tuned release runs."""

    method: str
    draft: str | None
    k: int
    k_by_batch: tuple[tuple[int, int, int], ...] = ()

    def label(self) -> str:
        sched = (" per batch " + ",".join(f"{a}-{b}:{k}" for a, b, k in self.k_by_batch)
                 if self.k_by_batch else "")
        return f"{self.method}{'/' + self.draft if self.draft else ''} k={self.k}{sched}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "draft": self.draft, "k": self.k,
                "k_by_batch": [list(r) for r in self.k_by_batch]}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Config:
        return Config(str(d["method"]), d.get("draft"), int(d["k"]),
                      tuple(tuple(int(x) for x in r) for r in d.get("k_by_batch") or ()))  # type: ignore[misc]


def schedule(k1: int, k8: int, max_num_seqs: int) -> tuple[tuple[int, int, int], ...]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from the c=1 and c=8 optima: inclusive
    batch-size ranges starting at 1, k = 0 turning speculation off (empty when k1 == k8)."""
    if k1 == k8:
        return ()
    top = max(max_num_seqs, SPLIT + 1)
    return ((1, SPLIT, k1), (SPLIT + 1, top, k8))


@dataclass
class _Method:
    method: str
    draft: str | None
    points: dict[int, dict[int, LevelFit]] = field(default_factory=dict)  # k -> level -> fit
    results: dict[int, list[Mapping[str, Any]]] = field(default_factory=dict)
    visits: dict[int, int] = field(default_factory=dict)  # k -> times measured (restarts)


@dataclass(frozen=True)
class TuneResult:
    config: Config
    curves: list[dict[str, Any]]  # per method: k -> predicted ratios, measured flag
    measured: list[dict[str, Any]]  # the points in measurement order
    objective: str
    bench_seconds: float  # benchmark time of the search (as measured: wall or device)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "curves": self.curves,
                "measured": self.measured, "objective": self.objective,
                "bench_seconds": self.bench_seconds}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> TuneResult:
        return TuneResult(Config.from_dict(d["config"]), list(d.get("curves") or []),
                          list(d.get("measured") or []), str(d.get("objective") or ""),
                          float(d.get("bench_seconds") or 0.0))


class Search:
    """Which configuration to measure next, and which one to keep (see the module doc)."""

    def __init__(self, methods: Sequence[tuple[str, str | None]], policy: GatePolicy,
                 population: Mapping[str, float], per_batch: bool, max_num_seqs: int,
                 k_max: int = K_MAX, schedulable: Collection[str] | None = None,
                 nonincreasing: bool = False) -> None:
        """``per_batch``: the release takes a k per batch size, for the ``schedulable`` methods
        (None: all); ``nonincreasing``: its schedule may not draft more above batch 1..SPLIT
        (TensorRT-LLM's draft_len_schedule)."""
        if not methods:
            raise ValueError("need at least one method")
        self.methods = [_Method(m, d) for m, d in methods]
        self.policy = policy
        self.population = {c: float(w) for c, w in population.items() if w > 0}
        self.per_batch = per_batch
        self.schedulable = None if schedulable is None else frozenset(schedulable)
        self.nonincreasing = nonincreasing
        self.max_num_seqs = max_num_seqs
        self.k_max = k_max
        self.base: dict[int, LevelFit] = {}
        self.order: list[dict[str, Any]] = []
        self.bench_seconds = 0.0
        self.last: Config | None = None  # the release measured last (running now)

    @property
    def levels(self) -> tuple[int, int]:
        return self.policy.keep_concurrency, self.policy.guard_concurrency

    # -- measurements ---------------------------------------------------------------------
    def _fits(self, result: Mapping[str, Any], what: str) -> dict[int, LevelFit]:
        fits = {c: level_fit(result, c) for c in self.levels}
        if any(f is None for f in fits.values()):
            raise ValueError(f"{what}: the bench result has no per-request records at "
                             f"concurrency {', '.join(str(c) for c in self.levels)}")
        return {c: f for c, f in fits.items() if f is not None}

    def add_baseline(self, result: Mapping[str, Any], seconds: float = 0.0) -> None:
        self.base = self._fits(result, "baseline")
        self.bench_seconds += seconds
        self.last = None  # the baseline runs now

    def first_round(self, cfg: Config) -> int:
        """`point_benches`' ``first`` for measuring ``cfg`` next: the rounds it has when it is
        the release running now (more rounds of it, no restart), else 0."""
        if cfg != self.last:
            return 0
        return len(self._method(cfg.method, cfg.draft).results.get(cfg.k) or [])

    def add(self, cfg: Config, result: Mapping[str, Any], seconds: float = 0.0,
            more: Sequence[Mapping[str, Any]] = ()) -> None:
        """A measurement of ``cfg`` (`point_benches`: ``result`` at every level, ``more`` at
        the keep level; all at the keep level when it continues the release running now,
        `first_round`); a repeated one is pooled with the earlier ones."""
        m = self._method(cfg.method, cfg.draft)
        extend = cfg == self.last and cfg.k in m.points
        if not extend:
            self._fits(result, cfg.label())  # refuse a result without records
        for r in ([result, *more] if extend else more):
            if level_fit(r, self.policy.keep_concurrency) is None:
                raise ValueError(f"{cfg.label()}: a further round has no per-request records "
                                 f"at concurrency {self.policy.keep_concurrency}")
        m.results.setdefault(cfg.k, []).extend([result, *more])
        m.points[cfg.k] = self._fits(merged(m.results[cfg.k], self.levels), cfg.label())
        self.bench_seconds += seconds
        self.last = cfg
        if extend:  # the same visit (no restart): more rounds
            self.order[-1]["rounds"] += 1 + len(more)
            self.order[-1]["seconds"] = round(self.order[-1]["seconds"] + seconds, 3)
            return
        m.visits[cfg.k] = m.visits.get(cfg.k, 0) + 1
        self.order.append({"method": cfg.method, "draft": cfg.draft, "k": cfg.k,
                           "rounds": 1 + len(more), "seconds": round(seconds, 3)})

    def _method(self, method: str, draft: str | None) -> _Method:
        for m in self.methods:
            if (m.method, m.draft) == (method, draft):
                return m
        raise ValueError(f"method {method} {draft or ''} is not searched")

    # -- the curve ------------------------------------------------------------------------
    def _weights(self, fit: LevelFit) -> dict[str, float]:
        w = {c: v for c, v in self.population.items() if c in fit.hist}
        tot = sum(w.values())
        return {c: v / tot for c, v in w.items()} if tot else {c: 1.0 for c in fit.hist}

    def _step(self, m: _Method, conc: int, k: int) -> float:
        """Step time at k: the least-squares line through the points, never falling with k
        (more drafts never make a step cheaper; a falling fit is timing noise)."""
        pts = sorted(m.points)
        ys = [m.points[p][conc].step_s for p in pts]
        if len(pts) == 1:  # anchored at the baseline's step (no drafting at k = 0)
            b = max(0.0, (ys[0] - self.base[conc].step_s) / pts[0])
            return max(1e-9, ys[0] + b * (k - pts[0]))
        mx, my = sum(pts) / len(pts), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in pts)
        b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(pts, ys, strict=True)) / sxx)
        return max(1e-9, my + b * (k - mx))

    def _same(self, a: LevelFit, b: LevelFit, k: int) -> bool:
        """Whether a higher point ``b``'s chunk sizes cut at ``k + 1`` may be pooled into the
        point ``a`` at k: one-sided, ``b`` accepting less by at most ``POOL_Z`` standard errors
        (the population-weighted difference of the category means, steps as the units). The
        alternative is the one the chain can fail by — acceptance falling with the tokens
        drafted — and a wrong rejection costs only pooled data, a wrong pooling biases L(k),
        so the threshold is low (one-sided, 16% of pairs left out where the chain holds)."""
        return self._z(a, b, k) <= POOL_Z

    def _z(self, a: LevelFit, b: LevelFit, k: int) -> float:
        """(a's mean chunk size cut at k + 1 − b's) over its standard error."""
        w = self._weights(a)
        diff = var = 0.0
        for cat, wt in w.items():
            na, ma, va = a.truncated(cat, k)
            nb, mb, vb = b.truncated(cat, k)
            if not na or not nb:
                continue
            diff += wt * (ma - mb)
            var += wt * wt * (va / na + vb / nb)
        if var > 0:
            return diff / math.sqrt(var)
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)

    def _falls(self, m: _Method, k: int) -> bool:
        """Whether a point above k accepts less than k's own steps at k's length: acceptance
        falls with the tokens drafted, so below k the curve (k's sizes cut shorter, as a
        chain) underrates the smaller k."""
        return any(self._z(m.points[k][c], m.points[q][c], k) > SAME_Z
                   for q in m.points if q > k for c in self.levels[:1])

    def pooled(self, m: _Method, conc: int, k: int) -> list[int]:
        """The points whose chunk sizes give ``L(k)``: the lowest measured at or above k (else
        the largest), and every higher one whose sizes cut at that point's k + 1 agree with it
        (`_same`); one that does not (acceptance depends on how many are drafted, not only on
        the chain) would bias the lower k's estimate, so it is left out."""
        above = sorted(p for p in m.points if p >= k) or [max(m.points)]
        ref = above[0]
        return [ref] + [q for q in above[1:]
                        if self._same(m.points[ref][conc], m.points[q][conc], ref)]

    def _hist(self, m: _Method, conc: int, k: int) -> LevelFit:
        """Chunk sizes of the points `pooled` for k (each truncated at k + 1 when used)."""
        above = self.pooled(m, conc, k)
        ref = m.points[above[0]][conc]
        hist: dict[str, dict[int, int]] = {}
        for p in above:
            for cat, h in m.points[p][conc].hist.items():
                acc = hist.setdefault(cat, {})
                for size, n in h.items():
                    acc[size] = acc.get(size, 0) + n
        ttft: dict[str, list[float]] = {}
        for f in (pts[conc] for pts in m.points.values()):
            for cat, v in f.ttft.items():
                ttft.setdefault(cat, []).append(v)
        return LevelFit(ref.step_s, ref.tokens, {c: sum(v) / len(v) for c, v in ttft.items()},
                        hist, ref.seconds)

    def _rate(self, fit: LevelFit, step: float, k: int) -> float:
        w = self._weights(fit)
        sec = sum(wt * (fit.ttft.get(c, 0.0) + (fit.tokens - 1) * step
                        / fit.tokens_per_step(c, k)) for c, wt in w.items())
        return fit.tokens / sec

    def _base_rate(self, conc: int) -> float:
        b = self.base[conc]
        return b.tokens / b.seconds

    def predict(self, m: _Method, k: int) -> dict[str, float]:
        """Ratios to the baseline at c=1 and c=8 (throughput) and the c=1 TPOT p50 ratio."""
        out: dict[str, float] = {}
        for conc in self.levels:
            ref = self._hist(m, conc, k)
            step = self._step(m, conc, k)
            out[f"c{conc}"] = self._rate(ref, step, k) / self._base_rate(conc)
            if conc == self.policy.keep_concurrency:
                w = self._weights(ref)
                logs = {c: math.log(step / ref.tokens_per_step(c, k)) for c in w}
                med = mixture_median(logs, dict.fromkeys(w, 0.05), w)
                out["tpot"] = math.exp(med) / self.base[conc].step_s
        return out

    def schedules(self, method: str) -> bool:
        """Whether ``method``'s choice is a per-batch-size schedule."""
        return self.per_batch and (self.schedulable is None or method in self.schedulable)

    def _objective(self, p: Mapping[str, float], per_batch: bool) -> float:
        k1, k8 = self.levels
        ok8 = p[f"c{k8}"] >= 1.0 - self.policy.max_regression_c8
        return p[f"c{k1}"] if (ok8 or per_batch) else p[f"c{k8}"] - 10.0

    def _value(self, m: _Method, k: int) -> float:
        return self._objective(self.predict(m, k), self.schedules(m.method))

    def _best(self, m: _Method, measured_only: bool) -> tuple[int, float]:
        ks = sorted(m.points) if measured_only else range(1, self.k_max + 1)
        scored = [(self._value(m, k), k) for k in ks]
        val, k = max(scored)
        return k, val

    # -- the search -----------------------------------------------------------------------
    def next(self) -> Config | None:
        """The next configuration to measure, or None when the search is done."""
        if not self.base:
            raise ValueError("measure the baseline first")
        more = self._more()
        if more is not None:
            return more
        best = max((self._best(m, True)[1] for m in self.methods if m.points),
                   default=None)
        for i, m in enumerate(self.methods):
            if self.k_max not in m.points and (i == 0 or not m.points):
                return Config(m.method, m.draft, self.k_max)  # its chunk sizes give every L(k)
            k_hat, v_hat = self._best(m, False)
            if i > 0 and best is not None and v_hat < CUTOFF * best:
                continue  # this method cannot come close: no more points
            if len(m.points) == 1:  # the step-time slope needs a second point
                k = k_hat if k_hat not in m.points else max(1, self.k_max // 2)
                return Config(m.method, m.draft, k)
            _, v_meas = self._best(m, True)
            if k_hat not in m.points and v_hat > v_meas * (1 + REFINE_GAIN) \
                    and len(m.points) < 3:
                return Config(m.method, m.draft, k_hat)
            k_meas, _ = self._best(m, True)
            if len(m.points) < 3 and k_meas == min(m.points) > 1 and self._falls(m, k_meas):
                # the chain fails above the best point: look below it, where the curve is a
                # lower bound
                lower = [x for x in range(1, k_meas) if x not in m.points]
                return Config(m.method, m.draft,
                              max(lower, key=lambda x: self._value(m, x)))
            if len(m.points) == 2 and (i == 0 or best is None or v_meas >= CUTOFF * best):
                lo, hi = sorted(m.points)
                v = [self._value(m, x) for x in (lo, hi)]
                if hi - lo >= 3 and min(v) >= max(v) * (1 - FLAT):
                    # a flat stretch: which end wins is within timing noise; the middle is
                    # within a few % of either, and a third point steadies the slope
                    return Config(m.method, m.draft, (lo + hi + 1) // 2)
        return self._repeat()

    def _se(self, m: _Method, k: int) -> float:
        """The relative standard error of point k's c=1 value (`specdec.tune.stderr.point_se`)."""
        keep = self.levels[0]
        steps = [f.step_s for r in m.results[k] if (f := level_fit(r, keep)) is not None]
        return point_se(steps, m.results[k], keep, k, self._weights(m.points[k][keep]))

    def tied(self, m: _Method) -> list[int]:
        """m's best measured point and those whose value is within ``TIE_Z`` standard errors
        of their difference from it (`_se`), best first: which of them wins is noise."""
        vals = {k: self._value(m, k) for k in sorted(m.points)}
        top = max(vals, key=lambda k: vals[k])
        se = {k: self._se(m, k) for k in vals}
        return [top] + [k for k, v in vals.items() if k != top and
                        vals[top] - v <= TIE_Z * abs(vals[top]) * math.hypot(se[top], se[k])]

    def _more(self) -> Config | None:
        """More rounds of the release running now (no restart) while it is tied with its
        method's best (or is the best with another tied), up to ``MAX_ROUNDS``, when the
        method is within ``CUTOFF`` of the best so far."""
        c = self.last
        if c is None:
            return None
        m = self._method(c.method, c.draft)
        if c.k not in m.points or len(m.results[c.k]) >= MAX_ROUNDS:
            return None
        best = max(self._best(x, True)[1] for x in self.methods if x.points)
        if self._best(m, True)[1] < CUTOFF * best:
            return None
        tied = self.tied(m)
        return c if len(tied) > 1 and c.k in tied else None

    def _repeat(self) -> Config | None:
        """Two methods whose best points are within ``REPEAT_MARGIN``: measure each best
        point once more (one round of four requests cannot tell them apart reliably)."""
        scored = sorted(((self._best(m, True), m) for m in self.methods if m.points),
                        key=lambda x: -x[0][1])
        if len(scored) < 2 or scored[1][0][1] < scored[0][0][1] * (1 - REPEAT_MARGIN):
            return None
        for (k, _), m in scored[:2]:
            # measured twice: two visits, or as many rounds (more rounds of a running point)
            if m.visits.get(k, 0) < 2 and len(m.results[k]) < 2 * POINT_ROUNDS:
                return Config(m.method, m.draft, k)
        return None

    def choose(self) -> TuneResult:
        """The configuration to keep, with every method's curve."""
        scored = [(self._best(m, True)[1], i) for i, m in enumerate(self.methods) if m.points]
        if not scored:
            raise ValueError("nothing measured")
        _, i = max(scored)
        m = self.methods[i]
        k1c, k8c = self.levels
        k1, _ = self._best(m, True)
        cfg = Config(m.method, m.draft, k1)
        objective = (f"highest c={k1c} throughput with c={k8c} throughput at least "
                     f"{1 - self.policy.max_regression_c8:.0%} of the baseline's")
        if self.schedules(m.method):
            c8 = {k: self.predict(m, k)[f"c{k8c}"] for k in m.points
                  if not self.nonincreasing or k <= k1}
            k8 = max(c8, key=lambda k: c8[k])
            if c8[k8] < 1.0:
                k8 = 0  # no measured k beats the baseline at c=8: speculation off there
            cfg = Config(m.method, m.draft, max(k1, k8), schedule(k1, k8, self.max_num_seqs))
            objective = (f"per batch size: the highest c={k1c} throughput for batch "
                         f"1..{SPLIT}, the highest c={k8c} throughput (or off) above")
        curves = []
        for mm in self.methods:
            if not mm.points:
                continue
            rows = []
            for k in range(1, self.k_max + 1):
                p = self.predict(mm, k)
                # the fitted step cost relative to the baseline's step, per level (read by
                # `specdec watch` to estimate the speed-up at the batch sizes served)
                cost = {f"cost_c{c}": round(self._step(mm, c, k) / self.base[c].step_s, 4)
                        for c in self.levels}
                rows.append({"k": k, **{key: round(v, 4) for key, v in p.items()}, **cost,
                             "measured": k in mm.points})
            curves.append({"method": mm.method, "draft": mm.draft, "points": rows})
        return TuneResult(cfg, curves, list(self.order), objective, self.bench_seconds)
