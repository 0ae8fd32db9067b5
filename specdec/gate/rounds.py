"""What one gate round benchmarks, per arm (shared by the deploy's verify step and the
benchmarks that measure the gate, so both measure the same way).

A round benchmarks both arms; each arm runs a warmup, then each level the gate still needs
(`specdec.gate.decide.Decision.pending`; every level in the first round):

* the keep level (c=1): ``requests`` candidate requests but only ``baseline_requests`` baseline
  ones. The baseline's per-token speed hardly depends on the prompt (it drafts nothing), the
  candidate's does (acceptance depends on the prompt's category), so the candidate gets the
  requests — one per built-in category in a round.
* the guard level (c=8): ``guard_requests`` in both arms, run at full concurrency throughout
  (fillers keep C requests in flight until the last measured one ends) and started in a steady
  state: each client first sends one unmeasured request of ``ramp_tokens``, so the measured
  requests do not all start (and prefill) at once, and a device with fewer than C sequence
  slots has its queue filled before measuring.

Each round takes the next prompts of the set (the offset moves by the requests per round), so
rounds do not repeat prompts and both arms of a round see the same c=8 prompts. From the second
round on, the candidate's keep-level requests go where the gate's open rules need them
(`specdec.gate.decide.Decision.allocation`: n-gram's TPOT median sits in one category, so that
category
gets the requests), each the next prompt of its category not measured yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specdec.bench.prompts import PromptSet, builtin_prompts
from specdec.plan.types import GatePolicy

__all__ = ["BenchSettings", "RoundBench", "round_bench"]


@dataclass(frozen=True)
class BenchSettings:
    """One gate round's benchmark of one arm (the gate adds rounds until it can decide)."""

    requests: int = 4  # candidate at the keep level (c=1): one of each built-in category
    baseline_requests: int = 3  # baseline at the keep level (3: a median outvotes one stray)
    guard_requests: int = 8  # at the guard level (c=8), run at full concurrency throughout
    max_tokens: int = 48
    warmup: int = 1
    ramp_tokens: int = 32  # guard level: one unmeasured request per client first
    timeout_s: float = 600.0  # per arm; a hung engine ends the benchmark here

    def keep_requests(self, arm: str) -> int:
        return self.baseline_requests if arm == "baseline" else self.requests


@dataclass(frozen=True)
class RoundBench:
    """The bench invocation of one arm in one round."""

    levels: tuple[int, ...]
    requests: tuple[int, ...]
    offsets: tuple[int, ...]
    max_tokens: int
    warmup: int
    ramp_tokens: int = 0  # at concurrency > 1
    ids: tuple[tuple[str, ...], ...] = ()  # per level: these prompts (empty: by offset)

    def to_dict(self) -> dict[str, object]:
        return {"levels": list(self.levels), "requests": list(self.requests),
                "offsets": list(self.offsets), "max_tokens": self.max_tokens,
                "warmup": self.warmup, "ramp_tokens": self.ramp_tokens,
                "ids": [list(x) for x in self.ids]}

    def argv(self) -> list[str]:
        """As ``specdec bench`` arguments (both clients: the control node's and on-host)."""
        def csv(xs: Sequence[object]) -> str:
            return ",".join(str(x) for x in xs)

        args = ["--concurrency", csv(self.levels), "--requests", csv(self.requests),
                "--max-tokens", str(self.max_tokens), "--warmup", str(self.warmup),
                "--prompt-offset", csv(self.offsets), "--ramp-tokens", str(self.ramp_tokens)]
        for level, ids in zip(self.levels, self.ids, strict=False):
            if ids:
                args += ["--prompt-ids", f"{level}={csv(ids)}"]
        return args


def counts(shares: Mapping[str, float], n: int) -> dict[str, int]:
    """``n`` requests split by ``shares`` (largest remainder)."""
    tot = sum(v for v in shares.values() if v > 0)
    if tot <= 0 or n <= 0:
        return {}
    exact = {c: n * v / tot for c, v in shares.items() if v > 0}
    out = {c: math.floor(x) for c, x in exact.items()}
    for c in sorted(exact, key=lambda c: (out[c] - exact[c], c))[:n - sum(out.values())]:
        out[c] += 1
    return {c: k for c, k in out.items() if k}


def pick(shares: Mapping[str, float], n: int, used: Iterable[str],
         prompts: PromptSet | None = None) -> tuple[str, ...]:
    """Prompt ids: ``n`` split by category shares, each category's next prompts not in
    ``used`` (in the set's order; when a category runs out, its prompts again)."""
    ps = prompts or builtin_prompts()
    seen = set(used)
    out: list[str] = []
    for cat, k in counts(shares, n).items():
        ids = [p.id for p in ps.measured if p.category == cat]
        fresh = [i for i in ids if i not in seen]
        take = (fresh + ids * k)[:k] if ids else []
        out += take
    return tuple(out)


def round_bench(settings: BenchSettings, policy: GatePolicy, arm: str, rnd: int,
                levels: Sequence[int] | None = None,
                allocation: Mapping[str, float] | None = None,
                used: Iterable[str] = (), scale: Mapping[int, float] | None = None,
                baseline_scale: float = 1.0) -> RoundBench:
    """Arm ``arm`` ("baseline"/"candidate") in round ``rnd`` (0-based) at ``levels`` (None:
    the policy's keep and guard levels); the candidate's keep level follows ``allocation``
    (category shares), skipping the prompt ids in ``used``; ``scale`` multiplies a level's
    requests (`specdec.gate.decide.Decision.scale`: the gate measured more noise than it planned
    for; at the keep level the candidate's, the baseline's by ``baseline_scale``:
    `specdec.gate.decide.Decision.baseline_scale`)."""
    keep = policy.keep_concurrency
    want = sorted(set(levels) if levels is not None else
                  {keep, policy.guard_concurrency})
    reqs, offs, ids = [], [], []
    for c in want:
        n0 = settings.keep_requests(arm) if c == keep else settings.guard_requests
        # at the keep level the arms grow apart: the baseline's part of the variance is its
        # runs' step time (no acceptance to sample; `specdec.gate.sequential.next_scale`)
        grow = baseline_scale if c == keep and arm == "baseline" else \
            (scale or {}).get(c, 1.0)
        n = max(n0, round(n0 * grow))
        chosen: tuple[str, ...] = ()
        if c == keep and arm == "candidate" and allocation:
            chosen = pick(allocation, n, used)
        reqs.append(len(chosen) if chosen else n)
        offs.append(rnd * n0)
        ids.append(chosen)
    return RoundBench(tuple(want), tuple(reqs), tuple(offs), settings.max_tokens,
                      settings.warmup, settings.ramp_tokens,
                      tuple(ids) if any(ids) else ())
