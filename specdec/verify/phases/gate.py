"""Gate: ABAB rounds of both arms until `specdec.gate.decide.decide` answers. Each round measures
the
release that runs first, then switches once for the other arm; after the first round only the
levels whose rules are still open are measured (`Decision.pending`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.errors import GateError
from specdec.gate import decide as gatelib
from specdec.gate.decide import Decision
from specdec.gate.rounds import round_bench
from specdec.verify.phases.bench import Bench
from specdec.verify.phases.host import Ctx, VerifyFailure
from specdec.verify.progress import eta_text
from specdec.verify.spec import FileSpec

__all__ = ["Arm", "run_gate"]


@dataclass(frozen=True)
class Arm:
    release: str
    files: Sequence[FileSpec] = ()


def run_gate(ctx: Ctx, bench: Bench, cand: Arm, base: Arm,
             first_baseline: Mapping[str, Any] | None = None
             ) -> tuple[Decision, Mapping[str, Any]]:
    """The decision and the candidate's last result; ``first_baseline`` stands in for round
    1's baseline (cached, or measured by the tune phase)."""
    pol = ctx.spec.plan.gate
    rounds: dict[str, list[Mapping[str, Any]]] = {
        "baseline": [first_baseline] if first_baseline is not None else [], "candidate": []}
    arms = {"baseline": base, "candidate": cand}
    levels: tuple[int, ...] | None = None
    alloc: dict[str, float] = {}
    scale: dict[int, float] = {}
    base_scale = 1.0
    dec: Decision | None = None
    t0, most = ctx.io.monotonic(), max(1, pol.max_rounds)
    for n in range(1, most + 1):
        first = "baseline" if ctx.running == base.release else "candidate"
        for arm in (first, "candidate" if first == "baseline" else "baseline"):
            if len(rounds[arm]) >= n:
                continue
            a = arms[arm]
            bench.activate(a.release, arm, a.files)
            used = [str(r.get("prompt_id")) for res in rounds["candidate"]
                    for r in (res.get("concurrency") or {}).get(str(pol.keep_concurrency), {})
                    .get("requests") or [] if isinstance(r, Mapping)]
            rb = round_bench(ctx.spec.bench, pol, arm, n - 1, levels, alloc, used, scale,
                             base_scale)
            res, _ = bench.measure(arm, a.release, rb, n)
            rounds[arm].append(res)
            if arm == "baseline" and n == 1:
                bench.store_baseline(base.release, res)
        try:
            dec = gatelib.decide(rounds["baseline"], rounds["candidate"], pol)
        except GateError as exc:
            raise VerifyFailure("gate", f"the gate refused the results: {exc}") from None
        ctx.measure("gate", "decision", dec.decision, round=n, pending=list(dec.pending))
        if dec.decision != "inconclusive" or dec.held:
            break
        levels = dec.pending or None  # None: every level
        alloc, scale, base_scale = dec.allocation, dec.scale, dec.baseline_scale
        ctx.event(f"round {n} of at most {most} inconclusive ({dec.reason}); measuring another"
                  + (f" of c={','.join(str(c) for c in dec.pending)}" if dec.pending else "")
                  + eta_text(n, most, ctx.io.monotonic() - t0))
    assert dec is not None
    for arm in ("baseline", "candidate"):
        bench.summarise(arm, arms[arm].release, rounds[arm])
    ctx.report["gate"] = dec.to_dict()
    for r in dec.rules:
        ctx.measure("gate", r.name, r.measured, r.threshold, r.verdict == "pass",
                    verdict=r.verdict, ci=list(r.ci), look=r.look)
    return dec, rounds["candidate"][-1]
