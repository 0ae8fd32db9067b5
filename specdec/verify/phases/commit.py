"""Commit or restore: make the gate's answer (or a failure) the host's last-good state.

* keep — the candidate runs and becomes last-good (``kept``);
* disable — the baseline release runs, becomes last-good, and the candidate's release records
  ``decision.json`` so a re-run keeps the baseline (``disabled``);
* hold — the gate could not count tokens: back to last-good (``held``; fails the host);
* no gate — health and process checks passed without a benchmark phase (``not_verified``,
  ``no_speculation``);
* restore — after any failure, last-good runs again (``rolled_back``), or the host is
  ``failed`` when there is none or it does not serve either.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from specdec.gate.decide import Decision
from specdec.host import guard, layout
from specdec.verify.phases.bench import Bench
from specdec.verify.phases.gate import Arm
from specdec.verify.phases.health import wait_healthy
from specdec.verify.phases.host import SERVICE, Ctx, VerifyFailure, now_iso, upload_command
from specdec.verify.spec import FileSpec

__all__ = ["apply_decision", "recover", "reverted_by_guard", "without_gate"]


def without_gate(ctx: Ctx, running: str) -> dict[str, Any]:
    ctx.commit(running)
    if ctx.spec.benchmark is False:
        return ctx.finish("not_verified", "done", f"the benchmark phase is off "
                          f"(specdec_verify=false); release {running} is healthy and marked "
                          "last-good, not gated")
    return ctx.finish("no_speculation", "done", f"speculation is off in the plan; release "
                      f"{running} is healthy and marked last-good")


def apply_decision(ctx: Ctx, bench: Bench, dec: Decision, cand: Arm, base: Arm
                   ) -> dict[str, Any]:
    if dec.decision == "keep":
        bench.activate(cand.release, "candidate", cand.files)
        decision_file = shlex.quote(layout.release_dir(cand.release) + "/decision.json")
        ctx.commit(cand.release, f"rm -f {decision_file}")
        if ctx.spec.candidate != cand.release and ctx.spec.candidate in ctx.releases:
            # the plan's own release points at the tuned one: a re-run planned without the
            # control node's tune cache runs the verified release, unchanged
            _record(ctx, ctx.spec.candidate, {
                "outcome": "tuned", "active": cand.release, "candidate": ctx.spec.candidate,
                "reason": f"tuned: {(ctx.report.get('tune') or {}).get('config')}",
                "time": now_iso(), "run_id": ctx.spec.run_id})
        ctx.event(f"kept speculation; last-good is {cand.release}")
        return ctx.finish("kept", "done", f"speculation kept: {dec.reason}")
    if dec.held:
        return hold(ctx, bench, dec.reason, base)
    reason = dec.reason if dec.decision == "disable" else \
        f"inconclusive after {dec.rounds} round(s), disabled: {dec.reason}"
    bench.activate(base.release, "baseline", base.files)
    record = {"outcome": "disabled", "active": base.release, "candidate": cand.release,
              "reason": reason, "time": now_iso(), "run_id": ctx.spec.run_id}
    _record(ctx, cand.release, record)
    if ctx.spec.candidate != cand.release and ctx.spec.candidate in ctx.releases:
        _record(ctx, ctx.spec.candidate, record)  # tuned: the plan's own release too
    ctx.commit(base.release)
    ctx.event(f"disabled speculation; last-good is the baseline {base.release}")
    return ctx.finish("disabled", "done", f"speculation disabled: {reason}")


def _record(ctx: Ctx, rid: str, record: dict[str, Any]) -> None:
    ctx.sh(upload_command(FileSpec(f"{layout.release_dir(rid)}/decision.json",
                                   json.dumps(record, indent=2) + "\n")),
           "recording the decision")


def hold(ctx: Ctx, bench: Bench, why: str, base: Arm) -> dict[str, Any]:
    """The gate cannot answer (tokens estimated): back to last-good, neither kept nor
    disabled. Without a last-good release the baseline (speculation off) is made it."""
    good = ctx.last_good
    target = good if good is not None and good in ctx.releases else base.release
    files: tuple[FileSpec, ...] = tuple(base.files) if target == base.release else ()
    bench.activate(target, "last-good" if target == good else "baseline", files)
    if target != good:
        ctx.commit(target)
    else:
        ctx.disarm()
    ctx.event(f"held on {target}: {why}")
    where = (f"stays on last-good {target}" if target == good
             else f"no last-good release: the baseline {target} is now last-good")
    return ctx.finish("held", "gate", f"speculation neither kept nor disabled, {where}: {why}")


def reverted_by_guard(ctx: Ctx, good: str) -> dict[str, Any]:
    """``current`` went back to last-good between serve and verify: the host's guard did it
    (the control node lost the host past the deadline). Confirm it serves; roll back."""
    ok, out = ctx.io.run(f"tail -n 1 {guard.LOG_FILE} 2>/dev/null || true", 30)
    line = " ".join(out[-1].split()) if ok and out else ""
    desired = ctx.spec.desired
    ctx.event(f"release {desired} is not current: {line or 'reverted to last-good'}")
    try:
        wait_healthy(ctx, good, "last-good", phase="restore")
    except VerifyFailure as again:
        return ctx.finish("failed", "guard", f"the host's guard reverted {desired} to "
                          f"last-good {good}, which does not serve: {again.reason}")
    return ctx.finish("rolled_back", "guard",
                      f"the host's guard reverted {desired} to last-good {good} (not confirmed "
                      f"in time{': ' + line if line else ''}); rolled back to last-good {good} "
                      "(serving)")


def recover(ctx: Ctx, fail: VerifyFailure, target: str | None) -> dict[str, Any]:
    failing = ctx.running
    what = f"{fail.phase}: {fail.reason}"
    if target is None or target not in ctx.releases:
        note = "no last-good release to restore"
        try:
            st = ctx.unit_state()
            if st.get("ActiveState") in ("failed", "activating") or \
                    st.get("SubState") == "auto-restart":
                ctx.io.run(f"systemctl stop {SERVICE}", 120)
                note += "; the failing engine was stopped"
        except Exception:  # noqa: BLE001 - best effort on an already failed host
            pass
        return ctx.finish("failed", fail.phase, f"{what}; {note}")
    if target == failing and fail.phase not in ("health", "unit", "oom"):
        return ctx.finish("failed", fail.phase,
                          f"{what}; the failing release {target} is the last-good one")
    try:
        ctx.switch(target)
        wait_healthy(ctx, target, "last-good", phase="restore")
        ctx.disarm()
    except VerifyFailure as again:
        # The guard stays armed: the host reverts on its own at the deadline.
        return ctx.finish("failed", fail.phase,
                          f"{what}; restoring last-good {target} failed too: {again.reason} "
                          "(the host's guard reverts it unless confirmed)")
    if failing == target:
        return ctx.finish("failed", fail.phase,
                          f"{what}; restarted last-good {target}, which serves again")
    ctx.report["last_good"] = target
    return ctx.finish("rolled_back", fail.phase,
                      f"{what}; rolled back to last-good {target} (serving)")
