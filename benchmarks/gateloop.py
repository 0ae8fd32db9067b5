"""The gate's rounds without a host: baseline, candidate, `specdec.gate.decide.decide`, again,
as long as it is inconclusive (the deploy runs them in `specdec.verify.phases.gate.run_gate`,
switching the host's release; the fingerprint and the gate's tests drive them with results
generated on demand)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specdec.gate.decide import Decision, decide
from specdec.gate.inputs import check_policy
from specdec.plan.types import GatePolicy

__all__ = ["abab"]


def abab(
    run_round: Callable[[str, int, tuple[int, ...]], Mapping[str, Any]],
    policy: GatePolicy | None = None,
    on_round: Callable[[Decision], None] | None = None,
) -> Decision:
    """ABAB rounds: ``run_round(arm, i, levels)`` benchmarks arm ``baseline``/``candidate`` at
    ``levels`` (every level in round 0, then the ones the gate still needs), `decide` after
    each round until it answers."""
    pol = policy or GatePolicy()
    check_policy(pol, "(given)")
    levels = tuple(sorted({pol.keep_concurrency, pol.guard_concurrency}))
    bases: list[Mapping[str, Any]] = []
    cands: list[Mapping[str, Any]] = []
    dec: Decision | None = None
    for i in range(pol.max_rounds):
        bases.append(run_round("baseline", i, levels))
        cands.append(run_round("candidate", i, levels))
        dec = decide(bases, cands, pol)
        if on_round is not None:
            on_round(dec)
        if dec.decision != "inconclusive" or dec.held:
            break
        levels = dec.pending
    assert dec is not None
    return dec
