"""The live figures of one host over its sliding window, and the speed-up they imply.

* acceptance length ``AL = 1 + Δaccepted / Δdrafts`` and rate ``Δaccepted / Δdraft_tokens``
  (vLLM's definitions, as `specdec.bench.metrics.spec_delta`);
* tokens per sequence-step ``E = Δgenerated / Δsteps``: what a decoding sequence gains per
  engine step, counting the steps that drafted nothing too (n-gram finds no match on most chat);
* the batch mix: the share of busy device time at each number of requests running;
* the estimated speed-up ``S = E · Σ_b w_b / cost(b)``: at batch size b speculation spends
  ``cost(b)`` baseline steps per step (`specdec.watch.gatefacts.Cost`, measured by the tune or
  the gate on this host) and yields E tokens per sequence where the baseline yields one, so a
  busy second at b serves ``E / cost(b)`` times the baseline's tokens; ``w_b`` the share of
  busy time at b. For speculation off, the gate's E stands in for the live one (acceptance is
  not observable without drafting): the speed-up the batch mix alone implies.

Uncertainty: log S has the spread of log E across the window's samples (a ratio estimator over
the samples, so requests that span samples and category runs widen it, as they should: the
sampling part, which moves from look to look) plus the step cost's, the policy's ``run_noise``
per arm (√2 · run_noise: two arms measured it; fixed while the release runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specdec.watch.gatefacts import Cost
from specdec.watch.window import Sample, Window

__all__ = ["Estimate", "estimate"]

MIN_SAMPLES = 3


@dataclass(frozen=True)
class Estimate:
    drafts: float
    draft_tokens: float
    accepted: float
    generated: float
    steps: float
    requests: float
    device_s: float
    al: float | None
    rate: float | None
    tokens_per_step: float | None
    batch_mix: dict[int, float] = field(default_factory=dict)  # batch size -> share of busy time
    busy_share: float | None = None
    mean_batch: float | None = None
    waiting: float | None = None
    speedup: float | None = None
    se_log: float | None = None  # of log(speedup): sampling and the step cost's
    se_noise: float | None = None  # of log(speedup): the sampling part only
    extrapolated: float = 0.0  # share of busy time at batch sizes beyond the measured ones
    hypothetical: bool = False  # speculation off: the gate's E at the live batch mix
    samples: int = 0

    @property
    def tokens_s(self) -> float | None:
        return self.generated / self.device_s if self.device_s > 0 else None

    @property
    def requests_s(self) -> float | None:
        return self.requests / self.device_s if self.device_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        r4 = _r(4)
        return {
            "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
            "generated": self.generated, "steps": self.steps, "requests": self.requests,
            "device_s": r4(self.device_s), "acceptance_length": r4(self.al),
            "acceptance_rate": r4(self.rate), "tokens_per_step": r4(self.tokens_per_step),
            "batch_mix": {str(b): r4(v) for b, v in sorted(self.batch_mix.items())},
            "busy_share": r4(self.busy_share), "mean_batch": r4(self.mean_batch),
            "waiting": r4(self.waiting), "speedup": r4(self.speedup),
            "speedup_se_log": r4(self.se_log), "speedup_se_sampling": r4(self.se_noise),
            "extrapolated_share": r4(self.extrapolated),
            "hypothetical": self.hypothetical, "tokens_per_s": r4(self.tokens_s),
            "requests_per_s": r4(self.requests_s), "samples": self.samples,
        }


def _r(n: int) -> Any:
    return lambda x: None if x is None else round(float(x), n)


def _e_se(samples: list[Sample], e: float) -> float | None:
    """SE of E = Σgenerated / Σsteps by the ratio estimator over samples."""
    rows = [(s.counts.get("generated", 0.0), s.steps) for s in samples if s.steps > 0]
    n = len(rows)
    tot = sum(st for _, st in rows)
    if n < MIN_SAMPLES or tot <= 0:
        return None
    ss = sum((g - e * st) ** 2 for g, st in rows)
    return math.sqrt(n / (n - 1) * ss) / tot


def estimate(win: Window, cost: Cost | None, run_noise: float, speculative: bool,
             gate_tokens_per_step: float | None = None) -> Estimate:
    samples = win.usable()
    get = win.total
    steps = sum(s.steps for s in samples)
    drafts, dtok, acc, gen = get("drafts"), get("draft_tokens"), get("accepted"), get("generated")
    al = 1.0 + acc / drafts if drafts > 0 else None
    rate = acc / dtok if dtok > 0 else None
    e = gen / steps if steps > 0 and gen > 0 else None
    busy = win.busy()
    active = {b: v for b, v in busy.items() if b > 0}
    tot_active = sum(active.values())
    tot = sum(busy.values())
    mix = {b: v / tot_active for b, v in active.items()} if tot_active > 0 else {}
    mean_b = sum(b * w for b, w in mix.items()) if mix else None
    waits = [s.waiting for s in samples if s.waiting is not None]
    out: dict[str, Any] = dict(
        drafts=drafts, draft_tokens=dtok, accepted=acc, generated=gen, steps=steps,
        requests=get("requests"), device_s=win.device_s, al=al, rate=rate, tokens_per_step=e,
        batch_mix=mix, busy_share=tot_active / tot if tot > 0 else None, mean_batch=mean_b,
        waiting=sum(waits) / len(waits) if waits else None, samples=len(samples))
    e_used = e if speculative else gate_tokens_per_step
    if cost is None or e_used is None or not mix or gen <= 0:
        return Estimate(**out)  # nothing served: nothing to estimate
    inv, beyond = 0.0, 0.0
    for b, w in mix.items():
        c, extra = cost.at(b)
        inv += w / c
        beyond += w if extra else 0.0
    se_e = _e_se(samples, e) if speculative and e else 0.0
    model = math.sqrt(2.0) * run_noise
    noise = None if se_e is None else se_e / e_used
    se = None if noise is None else math.sqrt(noise ** 2 + model ** 2)
    return Estimate(**out, speedup=e_used * inv, se_log=se, se_noise=noise,
                    extrapolated=beyond, hypothetical=not speculative)
