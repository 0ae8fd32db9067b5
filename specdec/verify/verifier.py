"""Verification of a freshly activated release, run from the control node inside the deploy.

Plain Python: everything that touches the host, HTTP or the benchmark goes through a `HostIO`
(``roles/verify.py`` wires it to pyinfra's ``host.run_shell_command``, the standard library's
HTTP client and a ``specdec bench`` subprocess; the unit tests use fakes).

Flow (`Verifier.run`), one phase per module of `specdec.verify.phases`:

1. **health** — the unit runs and ``/v1/models`` serves the plan's model (`phases.health`);
2. **process** — the engine's memlock limit; the HF token in neither argv nor environment
   (`phases.process`);
3. **benchmark** — the baseline (speculation off) is benchmarked once for round 1 (cached per
   baseline release across runs) (`phases.bench`);
4. **tune** — when ``num_speculative_tokens`` is ``auto`` and the plan carries no tuned value:
   search k (and n-gram against the planned method) on the host, render the chosen release
   (`phases.tune`, `specdec.tune.search`);
5. **gate** — rounds of both arms until `specdec.gate.decide.decide` answers (`phases.gate`);
6. **commit or restore** — keep (``kept``), disable (``disabled``: the baseline becomes
   last-good), hold (``held``: tokens were estimated), or without a benchmark phase
   ``not_verified`` / ``no_speculation``; any failure restores last-good (``rolled_back``) or
   fails the host (``failed``) (`phases.commit`).

While a release other than last-good runs, the host's guard (`specdec.host.guard`) is armed with a
deadline that covers the current phase (re-armed before each); committing or restoring disarms
it. If this control node loses the host, the host reverts to last-good on its own.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from specdec.config.rawinput import ascii_int
from specdec.errors import BenchError
from specdec.gate.rounds import BenchSettings, RoundBench
from specdec.host import release
from specdec.plan.types import http_url
from specdec.verify.phases import commit
from specdec.verify.phases.bench import Bench, bench_summary
from specdec.verify.phases.gate import Arm, run_gate
from specdec.verify.phases.health import wait_healthy
from specdec.verify.phases.host import Ctx, VerifyFailure, now_iso, parse_unit_state, upload_command
from specdec.verify.phases.process import check_process, memlock_ok, parse_limits_memlock
from specdec.verify.phases.tune import run_tune
from specdec.verify.roofline import roofline_figures
from specdec.verify.spec import HostIO, VerifySpec

__all__ = [
    "FAILURE_OUTCOMES",
    "BenchSettings",
    "VerifyFailure",
    "Verifier",
    "bench_subprocess",
    "bench_summary",
    "memlock_ok",
    "needs_verification",
    "parse_limits_memlock",
    "parse_unit_state",
    "upload_command",
]

# held: the gate could not count tokens (no usage, no tokenizer); the host stays on last-good
FAILURE_OUTCOMES = ("rolled_back", "failed", "held")


def needs_verification(
    state: release.ReleaseState, desired: str, restarted: bool, reverify: bool
) -> str | None:
    """Why the running release must be verified now, or None (unchanged, verified before)."""
    if reverify:
        return "re-verification requested (specdec_reverify=true)"
    if restarted:
        return "the engine was restarted with a changed release, unit or image"
    if state.current != desired:
        return f"current release {state.current} is not the desired {desired}"
    if state.last_good != state.current:
        return f"release {state.current} has not been verified (last-good is {state.last_good})"
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


class Verifier:
    """One host's verification. `run` never raises for a verification failure: the outcome is
    in the returned report (``rolled_back``/``failed``/``held`` mean the host must be failed)."""

    def __init__(self, spec: VerifySpec, io: HostIO,
                 progress: Callable[[str, str], None] | None = None) -> None:
        self.spec = spec
        self.io = io
        plan = spec.plan
        report: dict[str, Any] = {
            "schema": 1, "run_id": spec.run_id, "host": plan.host, "address": spec.address,
            "device": plan.device, "engine": plan.engine, "runtime": plan.runtime,
            "model": plan.model, "method": plan.method, "draft": plan.draft,
            "num_speculative_tokens": plan.num_speculative_tokens,
            "k_by_batch": [list(r) for r in plan.k_by_batch],
            "k_auto": plan.k_auto, "tuned": plan.tuned,
            "candidate_release": spec.candidate, "baseline_release": spec.baseline_id,
            "desired_release": spec.desired, "outcome": None, "phase": None, "message": None,
            "started_at": now_iso(), "finished_at": None, "active_release": None,
            "last_good": None, "measurements": [], "events": [], "baseline": None,
            "candidate": None, "gate": None, "tune": None, "acceptance": None,
            "roofline": None,
            "power": spec.roofline.power if spec.roofline is not None else None,
        }
        self.ctx = Ctx(spec, io, report, http_url(spec.address, plan.port, plan.tls),
                       progress=progress)
        self.report = report
        self.bench = Bench(self.ctx)

    def measure(self, *args: Any, **kw: Any) -> None:
        self.ctx.measure(*args, **kw)

    def finish(self, outcome: str, phase: str, message: str) -> dict[str, Any]:
        return self.ctx.finish(outcome, phase, message)

    def run(self, state: release.ReleaseState) -> dict[str, Any]:
        ctx, spec = self.ctx, self.spec
        ctx.running, ctx.releases, ctx.last_good = state.current, set(state.releases), \
            state.last_good
        restore_to = state.last_good or (
            spec.prior_current if spec.prior_current in ctx.releases else None)
        self.report["last_good"] = state.last_good
        try:
            return self._flow(state)
        except VerifyFailure as fail:
            ctx.event(f"{fail.phase}: {fail.reason}")
            return commit.recover(ctx, fail, restore_to)

    def _flow(self, state: release.ReleaseState) -> dict[str, Any]:
        ctx, spec = self.ctx, self.spec
        running = state.current
        if running is None:
            raise VerifyFailure("release", "no release is current on the host")
        if running != spec.desired and running == state.last_good:
            return commit.reverted_by_guard(ctx, running)
        label = ("candidate" if running == spec.candidate else
                 "baseline" if running == spec.baseline_id else "release")
        ctx.arm(spec.plan.health_timeout_s)
        ctx.phase = "health"
        wait_healthy(ctx, running, label)  # 1. health
        check_process(ctx, running, label)  # 2. process checks
        if spec.baseline_id is None or not spec.plan.speculative or not spec.benchmark:
            return commit.without_gate(ctx, running)
        base = Arm(spec.baseline_id, spec.baseline_files)
        cand = Arm(spec.candidate)
        first_baseline: dict[str, Any] | None
        if spec.tunes:  # 3.-4. tune, with the baseline benchmarked once for tune and gate
            ctx.phase = "tune"
            tuned, first_baseline = run_tune(ctx, self.bench, base)
            cand = Arm(tuned.release, tuned.files)
            self.report["candidate_release"] = tuned.release
        else:  # 3. the baseline of an earlier run stands in for round 1 when cached
            first_baseline = self.bench.cached_baseline(base.release)
        ctx.phase = "gate"
        dec, last = run_gate(ctx, self.bench, cand, base, first_baseline)  # 5. gate
        ctx.phase = "commit"
        self._acceptance(last, cand.release)
        self._roofline()
        return commit.apply_decision(ctx, self.bench, dec, cand, base)  # 6. commit

    def _acceptance(self, cand: Mapping[str, Any], rid: str) -> None:
        sd = cand.get("spec_decode")
        if not isinstance(sd, Mapping):
            return
        rates = sd.get("per_position")
        if rates is None:
            rates = sd.get("per_position_acceptance_rates")
        per_pos = [float(x) for x in (rates or []) if _num(x) is not None]
        length = _num(sd.get("acceptance_length"))
        self.report["acceptance"] = {
            "length": length,
            "rate": _num(sd.get("acceptance_rate")),
            "per_position": per_pos,
            "drafts": _num(sd.get("drafts", sd.get("num_drafts"))),
        }
        if length is not None:
            self.measure("bench", "acceptance_length", length, unit="tokens/step", release=rid)
        for i, rate in enumerate(per_pos):
            self.measure("bench", f"acceptance_rate_pos{i}", rate, release=rid)

    def _roofline(self) -> None:
        roof = self.spec.roofline
        if roof is None:
            return
        power = roof.power or {}
        out = roofline_figures(self.report, bandwidth_gbs=roof.bandwidth_gbs,
                               decode_bytes=roof.model_bytes,
                               level=f"c{self.spec.plan.gate.keep_concurrency}",
                               time_scale=roof.time_scale,
                               bandwidth_source=roof.bandwidth_source,
                               power_mode=power.get("power_mode"))
        if out is None:
            return
        for key in ("baseline_pct", "speculative_pct"):
            if key in out:
                self.measure("bench", f"roofline.{key}", out[key], unit="%",
                             limit_tok_s=out["limit_tok_s"])
        self.report["roofline"] = out


CARRIED = ("baseline", "candidate", "gate", "tune", "acceptance", "roofline")
VERIFIED = ("kept", "disabled", "not_verified", "no_speculation")  # outcomes that commit


def unchanged_report(spec: VerifySpec, state: release.ReleaseState,
                     health: tuple[int, str] | None,
                     previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of a host whose desired release is current and verified: nothing done.

    ``previous``: this host's last verification report (kept/disabled); when it verified the
    release that runs now, its figures are carried over (marked ``carried_from``)."""
    v = Verifier(spec, _NoIO())
    v.ctx.running = state.current
    v.report["last_good"] = state.last_good
    if health is not None:
        v.measure("health", "health_status", health[0], 200, health[0] == 200)
    msg = (f"release {state.current} is current and last-good; not re-benchmarked "
           "(--data specdec_reverify=true to re-verify)")
    if (previous and previous.get("outcome") in VERIFIED
            and previous.get("active_release") == state.current):
        for key in CARRIED:
            v.report[key] = previous.get(key)
        v.report["previous_outcome"] = previous["outcome"]
        v.report["carried_from"] = previous.get("run_id")
        msg += f"; last verified in run {previous.get('run_id')}: {previous.get('message')}"
    return v.finish("unchanged", "done", msg)


class _NoIO:
    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        raise AssertionError("no host IO")

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        raise AssertionError("no HTTP")

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        raise AssertionError("no HTTP")

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        raise AssertionError("no bench")

    def sleep(self, seconds: float) -> None:
        pass

    def monotonic(self) -> float:
        return 0.0


# -- real IO pieces (no pyinfra) -------------------------------------------------------------------


def http_get(url: str, timeout: float, key: str | None = None,
             ca_file: str | None = None) -> tuple[int, str]:
    """GET with the standard library (works under pyinfra's gevent monkey-patching, which
    breaks httpx's sync transport); ``key``: sent as the Bearer token; ``ca_file``: the CA an
    https server's certificate must chain to (else the system's)."""
    import http.client
    import ssl
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    ctx = ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return int(resp.status), resp.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError):
        return 0, ""


HOST_GET_MARK = "@@specdec-http"


def host_get_command(url: str, timeout: float) -> str:
    """A GET run on a host (curl): the body, then a line with the status (000: no answer)."""
    import shlex

    return (f"curl -sS -m {max(1, int(timeout))} -o - -w '\\n{HOST_GET_MARK} %{{http_code}}\\n' "
            f"{shlex.quote(url)} 2>/dev/null; true")


def parse_host_get(lines: list[str]) -> tuple[int, str]:
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(HOST_GET_MARK + " "):
            code = lines[i].split()[-1]
            status = ascii_int(code, 3) or 0
            return status, "\n".join(lines[:i]).removesuffix("\n")
    return 0, ""


def bench_subprocess(url: str, model: str, out: Path, run: RoundBench, timeout_s: float,
                     tokenizer: str | None = None, key_file: str | None = None,
                     ca_file: str | None = None) -> dict[str, Any]:
    """``python -m specdec.cli bench`` in a child (no asyncio inside pyinfra's gevent)."""
    import os

    cmd = [sys.executable, "-m", "specdec.cli", "bench", url, "--model", model, *run.argv(),
           "--json", str(out), "--no-progress"]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    if key_file:
        cmd += ["--api-key-file", key_file]
    if ca_file:
        cmd += ["--ca-file", ca_file]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        raise BenchError(f"no result within {timeout_s:.0f}s (engine hung?)") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
        raise BenchError(lines[-1].removeprefix("specdec: error: ") if lines
                         else f"bench exited {proc.returncode}")
    try:
        res = json.loads(out.read_text())
    except (OSError, ValueError):
        raise BenchError(f"bench wrote no readable JSON to {out}") from None
    if not isinstance(res, dict):
        raise BenchError("bench JSON is not an object")
    return res


def secret_sha256(secret: str | None) -> str | None:
    return hashlib.sha256(secret.encode()).hexdigest() if secret else None
