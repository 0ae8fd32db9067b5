"""Health: poll the unit (failed, crash-looping, restarted → fail fast, with the engine's own
reason from the journal, OOM recognised) and ``GET /health`` then ``GET /v1/models`` (the
served model listed) until the plan's ``health_timeout_s``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from specdec.errors import one_line
from specdec.verify.phases.host import Ctx, VerifyFailure

__all__ = ["journal_reason", "unit_failure", "wait_healthy"]

_OOM = re.compile(r"out of memory|outofmemory|oom[- ]?kill|\boom\b|cannot allocate memory", re.I)
_ERRORISH = re.compile(r"error|exception|fatal|killed|traceback|failed", re.I)
# systemd's own lines about the unit (``-o cat`` drops the sender): never the engine's reason
_SYSTEMD = re.compile(
    r"^[\w@.-]+\.service: |^(Started|Starting|Stopped|Stopping|Failed to start) ")
_STARTED = re.compile(r"^(Started|Starting) ")
# a Python exception line, after any prefix (vLLM's "(EngineCore_DP0 pid=7) ERROR … [core.py:1]")
_EXC = re.compile(r"(?:^|[\s\])])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit): \S.*)$")
_ABOVE = re.compile(r"root cause above", re.I)


def _last_start(text: list[str]) -> list[str]:
    """The lines after the unit's last start: an earlier run's error is not this run's."""
    idx = [i for i, ln in enumerate(text) if _STARTED.match(ln)]
    return text[idx[-1] + 1:] if idx else text


def _root_cause(lines: list[str]) -> str | None:
    """The first exception of the run that is not a pointer back to another one (vLLM's engine
    core failure ends in "RuntimeError: Engine core initialization failed. See root cause
    above."; the root cause is the engine core's own exception, earlier)."""
    excs = [m.group(1) for ln in lines if (m := _EXC.search(ln))]
    return next((e for e in excs if not _ABOVE.search(e)), excs[0] if excs else None)


def journal_reason(lines: Sequence[str]) -> tuple[str, str | None]:
    """(kind, the engine's own reason) from the unit's journal tail: for an OOM the last OOM
    line; else the run's root exception; else its last error-looking line; systemd's lines
    only when the engine said nothing."""
    # Redact before anything is cut: a token cut in half is no longer token-shaped.
    text = [one_line(ln.strip()) for ln in lines if ln.strip()]
    run = _last_start(text)
    engine = [ln for ln in run if not _SYSTEMD.search(ln)]
    kind = "oom" if any(_OOM.search(ln) for ln in run) else "crash"
    line = next((ln for ln in reversed(engine) if _OOM.search(ln)), None) if kind == "oom" else None
    if line is None:
        line = _root_cause(engine)
    if line is None:
        line = next((ln for ln in reversed(engine or run) if _ERRORISH.search(ln)), None)
    if line is None and run:
        line = run[-1]
    return kind, (line[:200] if line else None)


def unit_failure(ctx: Ctx, label: str, st: Mapping[str, str]) -> VerifyFailure:
    kind, line = journal_reason(ctx.journal_tail())
    state = f"{st.get('ActiveState', '?')}/{st.get('SubState', '?')}"
    if st.get("Result") and st.get("Result") != "success":
        state += f" ({st['Result']})"
    what = "ran out of memory (OOM)" if kind == "oom" else "failed"
    msg = f"engine of {label} {what}: unit {state}"
    if line:
        msg += f"; last log line: {line}"
    return VerifyFailure("oom" if kind == "oom" else "unit", msg)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v not in (None, "", "[not set]") else None
    except ValueError:
        return None


def _model_ids(body: str) -> list[str]:
    try:
        doc = json.loads(body)
        return [str(m.get("id")) for m in doc.get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError, TypeError):
        return []


def wait_healthy(ctx: Ctx, rid: str, label: str, phase: str = "health") -> float:
    """Poll unit and HTTP until healthy; returns seconds taken. Raises `VerifyFailure`."""
    timeout = float(ctx.spec.plan.health_timeout_s)
    io = ctx.io
    t0 = io.monotonic()
    st = ctx.unit_state()
    restarts0 = _int(st.get("NRestarts"))
    inactive_seen = 0
    last_http = "no answer yet"
    served = ctx.spec.plan.served_model_name
    while True:
        active, sub = st.get("ActiveState", ""), st.get("SubState", "")
        restarts = _int(st.get("NRestarts"))
        if (active == "failed" or sub == "auto-restart"
                or (restarts0 is not None and restarts is not None and restarts > restarts0)):
            raise unit_failure(ctx, label, st)
        inactive_seen = inactive_seen + 1 if active == "inactive" else 0
        if inactive_seen >= 2:
            raise unit_failure(ctx, label, st)
        if active in ("active", "activating", "reloading", ""):
            status, _ = io.http_get(ctx.base_url + "/health", 5.0)
            if status == 200:
                mstatus, body = io.http_get(ctx.base_url + "/v1/models", 5.0)
                ids = _model_ids(body) if mstatus == 200 else []
                if served in ids:
                    took = io.monotonic() - t0
                    ctx.measure(phase, f"time_to_healthy[{label}]", round(took, 2), timeout,
                                True, "s", release=rid)
                    ctx.event(f"{label} ({rid}) healthy after {took:.1f}s")
                    return took
                last_http = (f"/v1/models answered {mstatus} serving {ids}"
                             if mstatus else "/v1/models unreachable")
            else:
                last_http = f"/health answered {status}" if status else "/health unreachable"
        elapsed = io.monotonic() - t0
        if elapsed >= timeout:
            ctx.measure(phase, f"time_to_healthy[{label}]", round(elapsed, 2), timeout, False,
                        "s", release=rid)
            raise VerifyFailure(
                "health", f"{label} ({rid}) not healthy after {timeout:.0f}s "
                f"(health_timeout_s): {last_http}")
        io.sleep(min(ctx.spec.poll_s, max(0.0, timeout - elapsed)))
        st = ctx.unit_state()
