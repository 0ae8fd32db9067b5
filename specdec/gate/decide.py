"""Keep / disable / inconclusive from benchmark results and a `GatePolicy` (the default policy
unless one is given).

Seed 000: keep speculation when, at concurrency 1, ``throughput_tok_s`` is ≥ 30% higher *and*
``tpot_ms_p50`` is ≥ 20% lower; disable it when the gain is < 10% or ``throughput_tok_s``
regresses at concurrency 8. Read statistically, as a sequential test over ABAB rounds with an
indifference zone:

* three rules: the c=1 throughput gain ≥ 30%, the c=1 TPOT p50 reduction ≥ 20%, and no c=8
  throughput regression beyond the tolerance δ (``max_regression_c8``, 10%: ratio ≥ 1 − δ).
  Each is a distance θ = log(measured ratio / threshold ratio), positive on the keep side.
* **indifference zone**: a keep rule's true θ within ±``indifference`` (m, 0.10) of 0, the c=8
  rule's within [−m, 0) (a ratio from (1 − δ)·e^−m up to the tolerance), may be answered either
  way; outside it, a rule's wrong pass has probability ≤ 1 − ``confidence`` over all looks, its
  wrong fail (a wrong disable, whichever rule) ≤ 1 − ``disable_confidence``.
* after each round (a *look*) a rule still open **passes** when its lower bound
  ``θ̂ − z·SE ≥ −m`` (it is not below the zone), **fails** when its upper bound is at most the
  zone's top (``θ̂ + z·SE ≤ m``; the c=8 rule ``≤ 0``: a regression beyond δ shown), and when
  both hold (the interval sits inside the zone) goes by where θ̂ lies in it. A truth outside
  the zone can err one way only, so each boundary has its own budget over every look the gate
  may take (``max_rounds``, the last look included): a pass ``1 − confidence`` (5%) on Pocock's
  constant group-sequential boundary, a fail — a gain wrongly disabled, by a c=1 rule or by the
  c=8 guard (one failed rule disables) — ``1 − disable_confidence`` (0.1%) on a Wang-Tsiatis
  boundary that asks most of the first looks, whose noise is least known
  (`specdec.gate.sequential.bounds`): a c=8 ratio measured just below the tolerance in one round
  does
  not disable. A verdict, once reached, stays.
* **keep** when every rule passed; **disable** as soon as a rule failed (the c=1 gain shown
  below 10%, a c=8 regression shown, or a keep threshold shown out of reach); otherwise
  **measure another round** of the levels whose rules are still open (``Decision.pending``;
  while an open rule's θ̂ lies on its fail side, only the level of the one nearest its fail
  boundary: one failed rule disables, so the others' levels would be measured for a keep the
  data point away from), with as many requests as the rules need to close by the last look at
  the noise measured so far, or to cross the boundary on θ̂'s side at the next look if that
  is cheaper (``Decision.scale``, ``Decision.baseline_scale``: at the keep level the arms grow
  apart, each by its part of the variance; `specdec.gate.sequential`): a noisier host is measured
  longer, not decided earlier.
* **at the round limit** (``max_rounds``, the last look) a rule still open goes by the side of
  its zone's middle θ̂ falls on (the point where both errors take their share once the interval
  has closed), ``code`` ``round_limit``: wrong for a truth outside the zone
  with the probability reported as the rule's ``error_bound``, which the sample-size plan keeps
  within the per-look budget unless the noise exceeds what ``max_scale`` × the requests and
  ``max_rounds`` rounds can absorb. So every decision, the last look's too, is covered by the
  error budget.
* **inconclusive, held** when any response's tokens were estimated (no usage, no tokenizer):
  guessed counts never keep nor disable.

The estimates (`specdec.gate.estimators`) are per arm and stratified by prompt category; throughput
as a ratio of token rates (at c=8 the steady-state throughput, by Little's law), TPOT p50 as the
ratio of the arms' medians over the category mixture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from specdec.errors import GateError
from specdec.gate.estimators import Estimate, Obs, compare, host_sd
from specdec.gate.inputs import (
    check_policy,
    check_result,
    load_policy,
    load_result,
    same_setup,
    tokens_estimated,
)
from specdec.gate.observe import Result, level_of, observations, population
from specdec.gate.sequential import bounds, next_scale, pocock_z
from specdec.plan.types import GatePolicy

__all__ = [
    "Decision",
    "Rule",
    "decide",
    "load_policy",
    "load_result",
    "observations",
    "tokens_estimated",
    "z_for",
]


@dataclass(frozen=True)
class Rule:
    name: str
    measured: float
    threshold: float
    verdict: str  # pass | fail | unclear
    ci: tuple[float, float]
    comparison: str = ">="  # measured must be >= threshold to pass
    method: str = ""
    n: int = 0
    distance: float = 0.0  # θ̂: log(ratio / threshold ratio), positive on the keep side
    se: float = 0.0
    look: int = 0  # round at which the verdict was reached (0: open)
    level: int = 1
    basis: str = ""  # "bound": a boundary crossed; "sign": the last look's sign; "": open
    error_bound: float = 0.0  # "sign": the chance the sign is wrong for a truth outside the zone

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "measured": self.measured, "threshold": self.threshold,
            "comparison": self.comparison, "verdict": self.verdict,
            "ci": [self.ci[0], self.ci[1]], "method": self.method, "n": self.n,
            "distance": self.distance, "se": self.se, "look": self.look,
            "level": self.level, "basis": self.basis, "error_bound": self.error_bound,
        }


@dataclass(frozen=True)
class Decision:
    decision: str  # keep | disable | inconclusive
    rules: list[Rule]
    reason: str
    policy: dict[str, Any] = field(default_factory=dict)
    rounds: int = 1
    conservative: bool = False  # a rule was decided at the round limit by its sign
    keep_possible: bool = True  # False: more rounds cannot lead to keep
    figures: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    held: bool = False  # inconclusive for good (tokens estimated): stay on last-good
    code: str = ""  # keep | min_gain | keep_out_of_reach | c8_regression | more_rounds |
    # round_limit | no_guard | tokens_estimated
    pending: tuple[int, ...] = ()  # levels to measure in the next round (inconclusive only)
    allocation: dict[str, float] = field(default_factory=dict)  # candidate's keep-level
    # requests of the next round, by category (shares; empty: one of each, in turn)
    scale: dict[int, float] = field(default_factory=dict)  # level -> the next round's
    # requests as a multiple of the default (`specdec.gate.sequential`; absent: 1); at the keep
    # level the candidate's
    baseline_scale: float = 1.0  # the baseline's keep-level requests, the same way

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision, "reason": self.reason,
            "rules": [r.to_dict() for r in self.rules], "rounds": self.rounds,
            "conservative": self.conservative, "keep_possible": self.keep_possible,
            "held": self.held, "code": self.code, "pending": list(self.pending),
            "allocation": self.allocation,
            "scale": {str(k): v for k, v in self.scale.items()},
            "baseline_scale": self.baseline_scale, "figures": self.figures, "policy": self.policy,
            "warnings": self.warnings,
            "ci_level": 2.0 * NormalDist().cdf(float(self.figures.get("z") or 0.0)) - 1.0,
        }


# -- the rules --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Spec:
    name: str
    kind: str  # rate | median
    level: int
    threshold: float  # as the default policy states it
    ratio_threshold: float  # the ratio candidate/baseline at the threshold
    sign: int  # +1: a larger ratio is better; -1: smaller (TPOT)
    comparison: str
    guard: bool = False  # the c=8 rule: its zone lies below the tolerance only


def _specs(pol: GatePolicy, guard: bool) -> list[_Spec]:
    k1, k8 = pol.keep_concurrency, pol.guard_concurrency
    out = [
        _Spec(f"throughput_gain_c{k1}", "rate", k1, pol.keep_min_throughput_gain,
              1.0 + pol.keep_min_throughput_gain, 1, ">="),
        _Spec(f"tpot_p50_reduction_c{k1}", "median", k1, pol.keep_min_tpot_reduction,
              1.0 - pol.keep_min_tpot_reduction, -1, ">="),
    ]
    if guard:
        out.append(_Spec(f"no_regression_c{k8}", "rate", k8, -pol.max_regression_c8,
                         1.0 - pol.max_regression_c8, 1, ">=", guard=True))
    return out


def z_for(policy: GatePolicy) -> float:
    """The pass boundary's z at every look (the intervals the report shows)."""
    return pocock_z(policy.max_rounds, round(1.0 - policy.confidence, 9))


def _measured(s: _Spec, e: Estimate) -> tuple[float, tuple[float, float]]:
    """The rule's figure as the policy states it (gain, reduction, change) and its interval."""
    if s.kind == "median":
        return 1.0 - e.ratio, (1.0 - e.hi, 1.0 - e.lo)
    return e.ratio - 1.0, (e.lo - 1.0, e.hi - 1.0)


def _rule(s: _Spec, cand: list[Obs], base: list[Obs], pop: Mapping[str, float] | None,
          pol: GatePolicy, z: float, look: int, every: Sequence[list[Obs]] = ()
          ) -> tuple[Rule, Estimate] | None:
    """The rule's state after ``look`` rounds: its verdict is fixed at the first look that
    crossed a boundary (``every``: each arm's requests at each level, for the host's noise)."""
    rounds = sorted({o.round for o in cand if o.round < look})
    verdict, at, est, theta = "unclear", 0, None, 0.0
    bnd = bounds(pol, s.guard)
    for t in rounds:
        c = [o for o in cand if o.round <= t]
        b = [o for o in base if o.round <= t]
        if not b:
            continue
        try:
            noise = host_sd([[o for o in arm if o.round <= t] for arm in every])
            est = compare(s.kind, c, b, pop, z, pol.run_noise, pol.request_noise, noise)
        except ValueError:
            return None
        theta = s.sign * (est.log - math.log(s.ratio_threshold))
        verdict = bnd.verdict(theta, est.se, t + 1)
        if verdict != "unclear":
            at = t + 1
            break
    if est is None:
        return None
    basis, bound = ("bound" if verdict != "unclear" else ""), 0.0
    if verdict == "unclear" and look >= pol.max_rounds:
        # the last look: the sign, at the middle of the zone (no rule is left open)
        verdict, at, basis = ("pass" if theta >= bnd.mid else "fail"), look, "sign"
        bound = bnd.sign_error(est.se)
    measured, ci = _measured(s, est)
    return Rule(s.name, measured, s.threshold, verdict, ci, s.comparison, est.method, est.n,
                theta, est.se, at, s.level, basis, bound), est


# -- the decision -----------------------------------------------------------------------------
def _held(pol: GatePolicy, where: list[str], rounds: int) -> Decision:
    return Decision(
        "inconclusive", [], "tokens estimated: the server sent no usage and the model's "
        "tokenizer is not on the control node, so output tokens were not counted ("
        + "; ".join(where[:3]) + "); the host stays on its last-good release",
        pol.to_dict(), rounds=rounds, keep_possible=False, held=True, code="tokens_estimated")


def _as_list(x: Result | Sequence[Result], what: str) -> list[Result]:
    out = [x] if isinstance(x, Mapping) else list(x)
    if not out:
        raise GateError(f"{what}: need at least one result")
    return out


def _reason(dec: str, rules: list[Rule], pol: GatePolicy, look: int) -> tuple[str, str]:
    gain = next(r for r in rules if r.name.startswith("throughput_gain"))
    failed = [r for r in rules if r.verdict == "fail"]
    open_ = [r for r in rules if r.verdict == "unclear"]

    def fig(r: Rule) -> str:
        return f"{r.name} {r.measured:+.1%} (CI {r.ci[0]:+.1%}..{r.ci[1]:+.1%})"

    signs = [r for r in rules if r.basis == "sign"]
    if signs:
        bound = max(r.error_bound for r in signs)
        verb = "kept" if dec == "keep" else "disabled"
        return "round_limit", (
            f"{verb} at the round limit ({look} rounds): "
            + ", ".join(f"{fig(r)} decided by its sign" for r in signs)
            + f" (wrong for a truth outside the ±{pol.indifference:.0%} zone with probability "
            f"at most {bound:.1%}); "
            + ", ".join(f"{fig(r)} {r.verdict}" for r in rules if r.basis == "bound"))
    if dec == "disable":
        c8 = [r for r in failed if r.name.startswith("no_regression")]
        if c8:
            return "c8_regression", (
                f"c={pol.guard_concurrency} throughput regresses beyond the "
                f"{pol.max_regression_c8:.0%} tolerance: {fig(c8[0])}")
        if gain.verdict == "fail" and gain.measured < pol.disable_below_gain:
            return "min_gain", (f"c={pol.keep_concurrency} throughput gain {fig(gain)} is "
                                f"below {pol.disable_below_gain:.0%}")
        return "keep_out_of_reach", ("the gain does not reach the keep threshold: "
                                     + ", ".join(f"{fig(r)} < {r.threshold:.0%}"
                                                 for r in failed))
    if dec == "keep":
        return "keep", (", ".join(f"{fig(r)} clears {r.threshold:+.0%}" for r in rules
                                  if r.verdict == "pass")
                        + f" at the {pol.confidence:.0%} bound outside the "
                        f"±{pol.indifference:.0%} indifference zone")
    return "more_rounds", "not decisive yet: " + ", ".join(fig(r) for r in open_)


def _pending(rules: list[Rule], pol: GatePolicy, look: int) -> tuple[int, ...]:
    """The levels the next round measures. One failed rule disables, so while an open rule's
    estimate lies on its fail side (below the zone's middle) only the level of the rule nearest
    its fail boundary (in its own z: ``(top − θ̂) / SE`` against the next look's ``z``) is
    measured: the other levels could only matter for a keep the data point away from (their
    rules stay open and are measured again once no rule leans to fail)."""
    open_ = [r for r in rules if r.verdict == "unclear"]
    bnd = {r.name: bounds(pol, r.level != pol.keep_concurrency) for r in open_}
    leaning = [r for r in open_ if r.distance < bnd[r.name].mid]
    if not leaning:
        return tuple(sorted({r.level for r in open_}))

    def nearness(r: Rule) -> float:
        b = bnd[r.name]
        return (b.top - r.distance) / max(r.se, 1e-12) / b.z_down(look + 1)

    nxt = max(leaning, key=lambda r: (nearness(r), -r.level))
    return (nxt.level,)


def decide(
    baseline: Result | Sequence[Result],
    candidate: Result | Sequence[Result],
    policy: GatePolicy | None = None,
) -> Decision:
    """Decide from one or several rounds (ABAB runs) of benchmark results per arm (round i of
    an arm is its i-th result; a round may lack a level the gate no longer needed). The number
    of rounds given is the look of the sequential test (the last is ``policy.max_rounds``)."""
    pol = policy or GatePolicy()
    check_policy(pol, "(given)")
    bases = _as_list(baseline, "baseline")
    cands = _as_list(candidate, "candidate")
    for i, r in enumerate([*bases, *cands]):
        check_result(dict(r), f"result {i}")
    warnings = same_setup(bases, cands)
    look = min(len(bases), len(cands))
    est = tokens_estimated([*bases, *cands])
    if est:
        return _held(pol, est, look)
    k8 = pol.guard_concurrency
    guard = (k8 != pol.keep_concurrency and any(level_of(r, k8) is not None for r in cands)
             and any(level_of(r, k8) is not None for r in bases))
    if not guard:
        warnings.append(f"no concurrency {k8} level in both arms: the regression guard has no "
                        "data, so the result cannot be keep")
    fits, figures = _fits(pol, guard, bases, cands, look)
    rules = [f.rule for f in fits]
    dec, code, reason = _verdict(rules, pol, guard, look)
    nxt = _next_round(fits, pol, look)
    if dec != "inconclusive":
        nxt = _NextRound()  # nothing more to measure
    return Decision(dec, rules, reason, pol.to_dict(), rounds=look, figures=figures,
                    warnings=warnings, keep_possible=dec == "keep" or (
                        dec == "inconclusive" and guard),
                    code=code, pending=nxt.pending, conservative=code == "round_limit",
                    allocation=nxt.allocation, scale=nxt.scale,
                    baseline_scale=nxt.baseline_scale)


@dataclass(frozen=True)
class _Fit:
    """One rule after this look, with what sizes its next round: its estimate and requests."""

    spec: _Spec
    rule: Rule
    est: Estimate
    obs: list[Obs]  # both arms' requests at the rule's level


def _fits(pol: GatePolicy, guard: bool, bases: list[Result], cands: list[Result], look: int
          ) -> tuple[list[_Fit], dict[str, Any]]:
    """Every rule's state after ``look`` rounds, and the figures the decision reports."""
    z = z_for(pol)
    pop = population([*bases, *cands])
    k1, k8 = pol.keep_concurrency, pol.guard_concurrency
    figures: dict[str, Any] = {"z": z, "look": look, "indifference": pol.indifference}
    obs = {lv: (observations(cands, lv, "candidate"), observations(bases, lv, "baseline"))
           for lv in sorted({k1, k8} if guard else {k1})}
    every = [arm for pair in obs.values() for arm in pair]
    fits = []
    for s in _specs(pol, guard):
        c, b = obs[s.level]
        got = _rule(s, c, b, pop, pol, z, look, every) if c and b else None
        if got is None:
            if s.kind == "median":
                raise GateError(f"no TPOT at concurrency {s.level} in both arms (need tpot_ms "
                                "per request or tpot_ms_p50)")
            raise GateError(f"no measured requests at concurrency {s.level} in both arms")
        rule, e = got
        fits.append(_Fit(s, rule, e, c + b))
        figures.setdefault("timing_sd", {})[str(s.level)] = round(e.timing_sd, 5)
        figures[f"{'tpot_p50' if s.kind == 'median' else 'throughput'}_ratio_c{s.level}"] = \
            e.ratio
        figures.setdefault("category_weights", e.weights)
    return fits, figures


def _verdict(rules: list[Rule], pol: GatePolicy, guard: bool, look: int
             ) -> tuple[str, str, str]:
    """keep / disable / inconclusive, its code and its reason."""
    verdicts = [r.verdict for r in rules]
    if "fail" in verdicts:
        dec = "disable"
    elif guard and all(v == "pass" for v in verdicts):
        dec = "keep"
    else:
        dec = "inconclusive"
    if dec == "inconclusive" and not guard and (look >= pol.max_rounds
                                                or "unclear" not in verdicts):
        return "disable", "no_guard", (f"no concurrency {pol.guard_concurrency} measurements: "
                                       "speculation is not kept without the regression guard")
    return (dec, *_reason(dec, rules, pol, look))


@dataclass(frozen=True)
class _NextRound:
    """What an inconclusive decision's next round measures (the defaults: nothing more)."""

    pending: tuple[int, ...] = ()
    allocation: dict[str, float] = field(default_factory=dict)
    scale: dict[int, float] = field(default_factory=dict)
    baseline_scale: float = 1.0


def _next_round(fits: list[_Fit], pol: GatePolicy, look: int) -> _NextRound:
    """The levels still open, each with as many requests as its open rules ask for, and the
    candidate's keep-level requests by category (`specdec.gate.sequential`)."""
    k1 = pol.keep_concurrency
    scale: dict[int, float] = {}
    base_scale = 1.0
    scores: list[dict[str, float]] = []
    for f in fits:
        if f.rule.verdict != "unclear":
            continue
        s, e = f.spec, f.est
        first = min(o.round for o in f.obs)
        share = sum(1 for o in f.obs if o.round == first) / len(f.obs)
        # at the keep level the arms grow apart: the baseline's part of the variance is its
        # runs' step time (no acceptance to sample)
        fixed = 0.0
        if s.level == k1 and e.cand is not None and e.req_var > 0:
            fixed = min(1.0, max(0.0, (e.req_var - e.cand.var) / e.req_var))
        want, want_b = next_scale(e, pol, bounds(pol, s.guard), look, share, fixed,
                                  f.rule.distance)
        scale[s.level] = max(scale.get(s.level, 1.0), want)
        if s.level == k1:
            base_scale = max(base_scale, want_b)
        if s.level == k1 and e.cand is not None:
            sc = e.cand.allocation_score()
            tot = sum(sc.values())
            if tot > 0 and e.cand.stratified:
                scores.append({c: v / tot for c, v in sc.items()})
    pending = _pending([f.rule for f in fits], pol, look)
    alloc = {c: sum(sc.get(c, 0.0) for sc in scores) / len(scores)
             for c in sorted({c for sc in scores for c in sc})} if scores else {}
    return _NextRound(pending, alloc, {lv: sc for lv, sc in scale.items()
                                       if lv in pending and sc > 1.0},
                      base_scale if k1 in pending else 1.0)
