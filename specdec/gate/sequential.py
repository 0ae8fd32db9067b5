"""How much the gate's next round measures: enough requests that every open rule can close.

Each rule's boundaries (`bounds`): a wrong pass within ``1 − confidence``, a wrong fail (a
wrong disable, by any rule) within ``1 − disable_confidence``, each over all ``max_rounds`` looks
(group-sequential: Pocock's constant boundary for a pass, Wang & Tsiatis' shape `FAIL_SHAPE` for
a fail, `boundary_z`). A rule *closes* once its interval is narrow enough that one of its
boundaries must hold: ``(z_up + z_down)·SE ≤ 2m`` for a keep rule (its zone is ±m), ``≤ m`` for
the c=8 guard (its zone is [−m, 0)). Then no rule is left open at the last look, so every
decision, the last look's too, is a boundary crossing within its budget.

After a look the gate projects each open rule's SE forward: the data so far (variance ``V``)
plus ``R`` more rounds, each with a run part ``ρ₁`` (shrinks with rounds only) and a request
part ``q₁·(f/s_b + (1 − f)/s)`` (shrinks with the requests: the candidate's ``s`` times the
round's default, the baseline's part ``f`` — at the keep level its runs' step time, no
acceptance to sample — ``s_b`` times; at the guard level ``f`` = 0, both arms by ``s``):
``V_end = 1 / (1/V + R / (ρ₁ + q₁·(f/s_b + (1 − f)/s)))``. The next round's scales (per level,
the largest its open rules ask for) are the cheapest of `SCALES` up to ``max_scale`` that close
the rule by the last look (``max_rounds``), with `SAFETY` to spare, or that let θ̂ cross the
boundary on its side at the next look; else the cheapest that gets within 10% of what
``max_scale`` would (the run noise dominates and more requests buy little).
When measured noise is no higher than the policy assumes, the projection asks for nothing
more (scale 1); the time budget is at most ``max_rounds`` rounds of at most ``max_scale`` times
the default requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from specdec.gate.estimators import Estimate
from specdec.plan.types import GatePolicy

__all__ = ["FAIL_SHAPE", "SAFETY", "SCALES", "Bounds", "boundary_z", "bounds", "closing_se",
           "next_scale", "pocock_z", "projected_var"]

SAFETY = 1.0  # aim the projected variance at this share of the closing variance
SCALES = (1.0, 1.5, 2.0, 3.0, 4.0)
FAIL_SHAPE = 0.45  # Wang-Tsiatis shape of the fail boundary (at 0.1% over 6 looks: z 3.68 at
# look 1, where the noise is least known, then 3.55 .. 3.36)


@dataclass(frozen=True)
class Bounds:
    """One rule's boundaries: pass when ``θ̂ − up·SE ≥ −m``, fail when ``θ̂ + down_k·SE ≤ top``
    at look k (``top``: m, the c=8 rule 0); the last look's sign at ``mid``."""

    up: float  # z of the pass boundary, every look (its error: a wrong pass)
    down: tuple[float, ...]  # z of the fail boundary per look (its error: a wrong fail)
    top: float
    mid: float
    m: float

    def z_down(self, look: int) -> float:
        return self.down[min(max(look, 1), len(self.down)) - 1]

    def verdict(self, theta: float, se: float, look: int) -> str:
        """pass: not below the zone; fail: not above it; both: the interval is inside the zone
        and the middle decides."""
        up = theta - self.up * se >= -self.m
        down = theta + self.z_down(look) * se <= self.top
        if up and down:
            return "pass" if theta >= self.mid else "fail"
        return "pass" if up else "fail" if down else "unclear"

    def sign_error(self, se: float) -> float:
        """The chance the last look's sign is wrong for a truth outside the zone."""
        if se <= 0:
            return 0.0
        return NormalDist().cdf(-min(self.mid + self.m, self.top - self.mid) / se)


def _crossing(bound: tuple[float, ...]) -> float:
    """P(a standardized sum of equally informative looks crosses ``bound[k-1]`` at some look
    k), by the recursive numerical integration of Armitage, McPherson & Rowe (1969) on a grid
    (it errs on the high, safe side, by about 1% in z)."""
    nd, looks = NormalDist(), len(bound)
    grid, span = 160, 7.0 * math.sqrt(looks)
    h = 2.0 * span / grid
    xs = [-span + i * h for i in range(grid + 1)]
    ker = [nd.pdf(j * h) * h for j in range(grid + 1)]
    dens, alive_before, crossed = [nd.pdf(x) for x in xs], 1.0, 0.0
    for k in range(1, looks + 1):
        if k > 1:
            dens = [math.fsum(d * ker[abs(i - j)] for j, d in enumerate(dens) if d)
                    for i in range(grid + 1)]
        top = bound[k - 1] * math.sqrt(k)
        dens = [d if x < top else 0.0 for x, d in zip(xs, dens, strict=True)]
        alive = math.fsum(dens) * h
        crossed += alive_before - alive
        alive_before = alive
    return crossed


@lru_cache(maxsize=64)
def boundary_z(looks: int, alpha: float, shape: float = 0.5) -> tuple[float, ...]:
    """Wang & Tsiatis' group-sequential boundary: z_k = C·(k/K)^(shape − 1/2) at look k of K,
    C such that the one-sided error over all looks is ``alpha``. ``shape`` 0.5 is Pocock's
    constant boundary; below it the early looks ask for more (O'Brien & Fleming at 0)."""
    def bound(c: float) -> tuple[float, ...]:
        return tuple(c * (k / looks) ** (shape - 0.5) for k in range(1, looks + 1))

    nd = NormalDist()
    lo, hi = nd.inv_cdf(1.0 - alpha) * 0.5, nd.inv_cdf(1.0 - alpha / looks) * 3.0
    for _ in range(24):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _crossing(bound(mid)) > alpha else (lo, mid)
    return bound(hi)


def pocock_z(looks: int, alpha: float) -> float:
    """Pocock's constant boundary (`boundary_z` with shape 0.5)."""
    return boundary_z(looks, alpha)[0]


def bounds(pol: GatePolicy, guard: bool) -> Bounds:
    """A rule's boundaries. A truth outside the zone can err one way only (a truth below it by
    a pass, one above it by a fail), so each boundary has its own budget over all ``max_rounds``
    looks: a pass errs with probability ≤ ``1 − confidence`` (Pocock's constant boundary:
    a gain shown early is kept early); a c=1 rule's fail — a gain wrongly disabled — with
    ≤ ``1 − disable_confidence``, on a boundary that asks more of the early looks, whose noise
    is least known (`FAIL_SHAPE`); the c=8 guard's fail too: it disables, and a gain is lost
    the same way (a c=8 ratio measured 5% low near the tolerance must not disable in one
    round).
    The last look's middle sits where both errors keep their last z's once the interval has
    closed."""
    k, m = pol.max_rounds, pol.indifference
    up = pocock_z(k, round(1.0 - pol.confidence, 9))
    down = boundary_z(k, round(1.0 - pol.disable_confidence, 9), FAIL_SHAPE)
    top = 0.0 if guard else m
    # closed: (up + down)·SE = top + m; the middle leaves up·SE below it, down·SE above it
    mid = -m + (top + m) * up / (up + down[-1])
    return Bounds(up, down, top, mid, m)


def closing_se(b: Bounds) -> float:
    """The SE at which a rule cannot stay open at the last look."""
    return (b.top + b.m) / (b.up + b.down[-1])


def projected_var(e: Estimate, rounds_more: int, scale: float, first_share: float,
                  fixed: float = 0.0, base_scale: float = 1.0) -> float:
    """The rule's variance after ``rounds_more`` rounds at ``scale``; ``first_share``: the
    share of its requests so far that one default round measures; ``fixed``: the share of the
    request part that is the baseline's at the keep level, whose requests grow by
    ``base_scale`` instead (`specdec.gate.rounds.round_bench`)."""
    if e.se <= 0:
        return 0.0
    rounds = max(1, e.rounds)
    run1 = e.run_var * rounds
    req1 = e.req_var / max(first_share, 1e-9) if first_share else e.req_var * rounds
    per_round = run1 + req1 * (fixed / base_scale + (1.0 - fixed) / scale)
    if rounds_more <= 0 or per_round <= 0:
        return e.se ** 2
    return 1.0 / (1.0 / e.se ** 2 + rounds_more / per_round)


Scales = tuple[float, float]  # the next round's requests as multiples: candidate, baseline


def next_scale(e: Estimate, pol: GatePolicy, b: Bounds, look: int, first_share: float,
               fixed: float = 0.0, theta: float | None = None) -> Scales:
    """The next round's request multipliers (candidate, baseline) this open rule asks for, the
    cheapest (fewest requests) that does: ``fixed`` > 0 (the keep level) lets the arms grow
    apart, the baseline only when its part of the variance (``fixed``) needs it; else both by
    one factor. Enough to close the rule by the last look (`closing_se`), or, when ``theta``
    (θ̂) is given, to cross its own side's boundary at the next look where θ̂ lies (a pass
    above the zone's middle, a fail below it), whichever is cheaper: a rule far from its zone
    needs no more than one plain round; one near the middle gets the plan that closes it. When
    neither is within reach, the cheapest within 10% of the largest's variance."""
    scales = [s for s in SCALES if s <= pol.max_scale] or [1.0]
    pairs = sorted(((c, bs) for c in scales for bs in (scales if fixed > 0 else [c])),
                   key=lambda p: (p[0] + p[1], -p[0]))
    more = max(1, pol.max_rounds - look)

    def var(p: Scales, rounds: int) -> float:
        return projected_var(e, rounds, p[0], first_share, fixed, p[1])

    goals = [(more, SAFETY * closing_se(b) ** 2)]
    if theta is not None:
        need = (theta + b.m) / b.up if theta >= b.mid else (b.top - theta) / b.z_down(look + 1)
        goals.append((1, need * need))
    for p in pairs:
        if any(var(p, r) <= t for r, t in goals):
            return p
    best = var(pairs[-1], more)
    return next(p for p in pairs if var(p, more) <= 1.1 * best)
