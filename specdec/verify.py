"""Verification of a freshly activated release, run from the control node inside the deploy.

Plain Python: everything that touches the host, HTTP or the benchmark goes through a `HostIO`
(``roles/verify.py`` wires it to pyinfra's ``host.run_shell_command``, httpx and a ``specdec
bench`` subprocess; the unit tests use fakes).

Flow (`Verifier.run`):

1. **health** — poll the unit (``systemctl show``: failed, crash-looping, restarted → fail fast,
   with the journal's last error line, OOM recognised) and ``GET /health`` then
   ``GET /v1/models`` (served model listed) until ``plan.health_timeout_s``;
2. **process** — the engine process (MainPID, or the container's PID for docker) has an
   effective memlock limit ≥ the plan's, and the HF token is in neither its argv nor its
   environment (compared by SHA-256 only, so nothing secret travels or is printed);
3. **bench** — the candidate and the baseline (speculation off) release, each benchmarked by
   the bench tool; the baseline's JSON is cached per baseline release id and reused;
4. **gate** — `specdec.gate.decide`; *keep* marks the candidate last-good; *disable* (also an
   inconclusive result, conservatively) switches to the baseline release (uploaded if needed),
   confirms it healthy, marks it last-good and records ``decision.json``;
5. any failure restores the last-good release (activate, daemon-reload, restart, confirm it
   serves) → outcome ``rolled_back``; without one → ``failed``. Both fail the host.

While a release other than last-good runs, the host's guard (`specdec.guard`) is armed with a
deadline that covers the current phase (re-armed before each); committing or restoring disarms
it. If this control node loses the host, the host reverts to last-good on its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from specdec import guard, layout, release
from specdec.errors import BenchError, GateError, SpecdecError, one_line, redact
from specdec.plan_types import Plan
from specdec.roofline import roofline_figures

__all__ = [
    "FAILURE_OUTCOMES",
    "BenchSettings",
    "FileSpec",
    "HostIO",
    "Roofline",
    "VerifyFailure",
    "VerifySpec",
    "Verifier",
    "bench_summary",
    "engine_url",
    "memlock_ok",
    "needs_verification",
    "parse_limits_memlock",
    "parse_unit_state",
    "upload_command",
]

SERVICE = f"{layout.SERVICE_NAME}.service"
FAILURE_OUTCOMES = ("rolled_back", "failed")
_OOM = re.compile(r"out of memory|outofmemory|oom[- ]?kill|\boom\b|cannot allocate memory", re.I)
_ERRORISH = re.compile(r"error|exception|fatal|killed|traceback|failed", re.I)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class HostIO(Protocol):
    """What verification needs from the world."""

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        """Run a shell command on the host as root: (success, stdout lines)."""
        ...

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        """GET from the control node: (status, body); status 0 when unreachable."""
        ...

    def bench(self, url: str, model: str, out: Path) -> dict[str, Any]:
        """Benchmark ``url``; write and return the bench JSON. Raises `BenchError`."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def monotonic(self) -> float: ...


@dataclass(frozen=True)
class FileSpec:
    path: str
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"


@dataclass(frozen=True)
class BenchSettings:
    requests: int = 32
    max_tokens: int = 128
    warmup: int = 2
    timeout_s: float = 600.0  # per arm; a hung engine ends the benchmark here


@dataclass(frozen=True)
class Roofline:
    bandwidth_gbs: float  # peak memory bandwidth (in the host's power mode when known)
    model_bytes: int  # bytes read per decode step at batch 1 (weights, or active experts)
    time_scale: float = 1.0  # engine emulator: wall seconds per emulated second
    bandwidth_source: str = "catalog device peak"
    power: dict[str, Any] | None = None  # the host's power mode and clocks (Jetsons)

    @property
    def tokens_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 / self.model_bytes if self.model_bytes > 0 else 0.0


@dataclass(frozen=True)
class VerifySpec:
    plan: Plan  # the candidate's plan
    address: str  # host address the control node reaches the engine at
    candidate: str  # release id of the plan
    desired: str  # what serve made current (candidate, or a recorded baseline)
    baseline_id: str | None = None  # speculation-off release; None when the plan has none
    baseline_files: tuple[FileSpec, ...] = ()  # uploaded when the baseline release is absent
    restarted: bool = False  # serve restarted the engine in this run
    reverify: bool = False
    benchmark: bool = True  # False (specdec_verify=false): health and process checks only
    prior_current: str | None = None  # `current` before this deploy changed anything
    secret_sha256: str | None = None  # of the HF token; the token itself never comes here
    cache_dir: Path | None = None  # baseline bench cache (reports/cache/<host>)
    work_dir: Path | None = None  # where bench JSONs of this run go
    bench: BenchSettings = field(default_factory=BenchSettings)
    roofline: Roofline | None = None
    poll_s: float = 2.0
    run_id: str = ""
    bench_mode: str = "host"  # where the bench client runs (specdec.bench.remote.MODES)


class VerifyFailure(Exception):
    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase
        self.reason = " ".join(reason.split())


# -- pure helpers --------------------------------------------------------------------------------


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


def parse_unit_state(lines: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep:
            out[key] = value
    return out


def parse_limits_memlock(lines: Iterable[str]) -> str | None:
    """The soft ``Max locked memory`` from /proc/PID/limits: "unlimited" or bytes."""
    for line in lines:
        if line.lower().startswith("max locked memory"):
            fields = line[len("max locked memory"):].split()
            return fields[0] if fields else None
    return None


def memlock_ok(required: str, soft: str | None) -> bool:
    if soft is None:
        return False
    if soft == "unlimited":
        return True
    if required in ("unlimited", "infinity"):
        return False
    try:
        return int(soft) >= int(required)
    except ValueError:
        return False


def upload_command(f: FileSpec) -> str:
    """Write a (non-secret) file atomically through the shell."""
    q = shlex.quote
    data = base64.b64encode(f.content.encode()).decode()
    parent = f.path.rsplit("/", 1)[0] or "/"
    tmp = f"{f.path}.specdec-tmp"
    return (
        f"install -d -m 0755 {q(parent)} && printf '%s' {q(data)} | base64 -d > {q(tmp)} && "
        f"chown {q(f.owner)}:{q(f.group)} {q(tmp)} && chmod {q(f.mode)} {q(tmp)} && "
        f"mv -f {q(tmp)} {q(f.path)}"
    )


def _level(result: Mapping[str, Any], conc: int) -> Mapping[str, Any]:
    levels = result.get("concurrency") or {}
    lvl = levels.get(str(conc)) if isinstance(levels, Mapping) else None
    return lvl if isinstance(lvl, Mapping) else {}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


def bench_summary(result: Mapping[str, Any], levels: Sequence[int]) -> dict[str, Any]:
    """Headline figures of a bench JSON: per concurrency throughput and TPOT p50."""
    out: dict[str, Any] = {}
    for c in levels:
        lvl = _level(result, c)
        out[f"c{c}"] = {
            "throughput_tok_s": _num(lvl.get("throughput_tok_s", lvl.get("output_throughput"))),
            "tpot_ms_p50": _num(lvl.get("tpot_ms_p50", lvl.get("median_tpot_ms"))),
            "failed": lvl.get("failed"),
            "completed": lvl.get("completed"),
        }
    sd = result.get("spec_decode")
    out["spec_decode"] = dict(sd) if isinstance(sd, Mapping) else None
    return out


def _journal_reason(lines: Sequence[str]) -> tuple[str, str | None]:
    """(kind, last error-looking line) from the engine's journal tail."""
    text = [ln.strip() for ln in lines if ln.strip()]
    kind = "oom" if any(_OOM.search(ln) for ln in text) else "crash"
    line = next((ln for ln in reversed(text) if _OOM.search(ln)), None) if kind == "oom" else None
    if line is None:
        line = next((ln for ln in reversed(text) if _ERRORISH.search(ln)), None)
    if line is None and text:
        line = text[-1]
    # Redact before cutting: a token cut in half is no longer token-shaped.
    return kind, (one_line(line)[:200] if line else None)


# -- the verifier ----------------------------------------------------------------------------------


class Verifier:
    """One host's verification. `run` never raises for a verification failure: the outcome is
    in the returned report (``rolled_back``/``failed`` mean the host must be failed)."""

    def __init__(self, spec: VerifySpec, io: HostIO) -> None:
        self.spec = spec
        self.io = io
        plan = spec.plan
        self.levels = sorted({plan.gate.keep_concurrency, plan.gate.guard_concurrency})
        self.base_url = engine_url(spec.address, plan.port)
        self.report: dict[str, Any] = {
            "schema": 1,
            "run_id": spec.run_id,
            "host": plan.host,
            "address": spec.address,
            "device": plan.device,
            "engine": plan.engine,
            "runtime": plan.runtime,
            "model": plan.model,
            "method": plan.method,
            "draft": plan.draft,
            "num_speculative_tokens": plan.num_speculative_tokens,
            "candidate_release": spec.candidate,
            "baseline_release": spec.baseline_id,
            "desired_release": spec.desired,
            "outcome": None,
            "phase": None,
            "message": None,
            "started_at": now_iso(),
            "finished_at": None,
            "active_release": None,
            "last_good": None,
            "measurements": [],
            "events": [],
            "baseline": None,
            "candidate": None,
            "gate": None,
            "acceptance": None,
            "roofline": None,
            "power": spec.roofline.power if spec.roofline is not None else None,
        }
        self.running: str | None = None
        self.releases: set[str] = set()
        self.last_good: str | None = None

    # -- recording ---------------------------------------------------------------------------

    def event(self, text: str) -> None:
        self.report["events"].append({"time": now_iso(), "message": one_line(text)})

    def measure(self, phase: str, name: str, value: Any, threshold: Any = None,
                ok: bool | None = None, unit: str | None = None, **extra: Any) -> None:
        m = {"phase": phase, "name": name, "value": value, "threshold": threshold,
             "unit": unit, "ok": ok, "time": now_iso()}
        m.update(extra)
        self.report["measurements"].append(
            {k: redact(v) if isinstance(v, str) else v for k, v in m.items()})

    def finish(self, outcome: str, phase: str, message: str) -> dict[str, Any]:
        self.report.update(outcome=outcome, phase=phase, message=" ".join(redact(message).split()),
                           finished_at=now_iso(), active_release=self.running)
        return self.report

    # -- host primitives ---------------------------------------------------------------------

    def sh(self, command: str, what: str, timeout: float | None = 120) -> list[str]:
        ok, out = self.io.run(command, timeout)
        if not ok:
            last = next((ln.strip() for ln in reversed(out) if ln.strip()), "")
            raise VerifyFailure("host", f"{what} failed on the host" + (f": {last}" if last
                                                                         else ""))
        return out

    def _guard_arm(self, rid: str, seconds: float) -> str | None:
        """The command arming the host's guard for ``rid`` (None when ``rid`` is last-good)."""
        if self.last_good is None or rid == self.last_good:
            return None
        return guard.arm_command(rid, guard.deadline_for(seconds))

    def arm(self, seconds: float) -> None:
        """Re-arm the guard for what runs now: it reverts unless confirmed within ``seconds``."""
        if self.running is not None and (cmd := self._guard_arm(self.running, seconds)):
            self.sh(cmd, "arming the guard")

    def commit(self, rid: str, extra: str = "") -> None:
        """Mark ``rid`` last-good and disarm the guard (fails if the guard reverted it)."""
        self.sh(guard.commit_command(rid) + (f" && {extra}" if extra else ""),
                "marking last-good")
        self.last_good = rid
        self.report["last_good"] = rid

    def unit_state(self) -> dict[str, str]:
        ok, out = self.io.run(
            f"systemctl show {SERVICE} -p ActiveState -p SubState -p Result -p NRestarts "
            f"-p MainPID", 30)
        return parse_unit_state(out) if ok else {}

    def journal_tail(self) -> list[str]:
        ok, out = self.io.run(
            f"journalctl -u {SERVICE} -n 40 --no-pager -o cat 2>/dev/null | tail -n 40 || true",
            30)
        return out if ok else []

    def unit_failure(self, label: str, st: Mapping[str, str]) -> VerifyFailure:
        kind, line = _journal_reason(self.journal_tail())
        state = f"{st.get('ActiveState', '?')}/{st.get('SubState', '?')}"
        if st.get("Result") and st.get("Result") != "success":
            state += f" ({st['Result']})"
        what = "ran out of memory (OOM)" if kind == "oom" else "failed"
        msg = f"engine of {label} {what}: unit {state}"
        if line:
            msg += f"; last log line: {line}"
        return VerifyFailure("oom" if kind == "oom" else "unit", msg)

    def switch(self, rid: str) -> None:
        """Make ``rid`` current and restart the engine on it."""
        arm = self._guard_arm(rid, self.spec.plan.health_timeout_s)
        self.sh(f"{release.activate(rid)} && {arm + ' && ' if arm else ''}"
                f"systemctl daemon-reload && systemctl restart {SERVICE}",
                f"activating release {rid}", 300)
        self.running = rid
        self.event(f"activated release {rid} and restarted the engine")

    def wait_healthy(self, rid: str, label: str, phase: str = "health") -> float:
        """Poll unit and HTTP until healthy; returns seconds taken. Raises `VerifyFailure`."""
        timeout = float(self.spec.plan.health_timeout_s)
        t0 = self.io.monotonic()
        st = self.unit_state()
        restarts0 = _int(st.get("NRestarts"))
        inactive_seen = 0
        last_http = "no answer yet"
        served = self.spec.plan.served_model_name
        while True:
            active, sub = st.get("ActiveState", ""), st.get("SubState", "")
            restarts = _int(st.get("NRestarts"))
            if (active == "failed" or sub == "auto-restart"
                    or (restarts0 is not None and restarts is not None and restarts > restarts0)):
                raise self.unit_failure(label, st)
            inactive_seen = inactive_seen + 1 if active == "inactive" else 0
            if inactive_seen >= 2:
                raise self.unit_failure(label, st)
            if active in ("active", "activating", "reloading", ""):
                status, _ = self.io.http_get(self.base_url + "/health", 5.0)
                if status == 200:
                    mstatus, body = self.io.http_get(self.base_url + "/v1/models", 5.0)
                    ids = _model_ids(body) if mstatus == 200 else []
                    if served in ids:
                        took = self.io.monotonic() - t0
                        self.measure(phase, f"time_to_healthy[{label}]", round(took, 2),
                                     timeout, True, "s", release=rid)
                        self.event(f"{label} ({rid}) healthy after {took:.1f}s")
                        return took
                    last_http = (f"/v1/models answered {mstatus} serving {ids}"
                                 if mstatus else "/v1/models unreachable")
                else:
                    last_http = f"/health answered {status}" if status else "/health unreachable"
            elapsed = self.io.monotonic() - t0
            if elapsed >= timeout:
                self.measure(phase, f"time_to_healthy[{label}]", round(elapsed, 2), timeout,
                             False, "s", release=rid)
                raise VerifyFailure(
                    "health", f"{label} ({rid}) not healthy after {timeout:.0f}s "
                    f"(health_timeout_s): {last_http}")
            self.io.sleep(min(self.spec.poll_s, max(0.0, timeout - elapsed)))
            st = self.unit_state()

    def check_process(self, rid: str, label: str) -> None:
        """Effective memlock of the engine process and no HF token in its argv/environment."""
        plan = self.spec.plan
        q = shlex.quote
        pid_cmd = f"pid=$(systemctl show -p MainPID --value {SERVICE})"
        if plan.runtime == "docker":
            pid_cmd += (f"; cpid=$(docker inspect -f '{{{{.State.Pid}}}}' "
                        f"{q(layout.SERVICE_NAME)} 2>/dev/null); "
                        f"[ -n \"$cpid\" ] && [ \"$cpid\" != 0 ] && pid=$cpid")
        hashes = ("tr '\\0' '\\n' < /proc/$pid/{f} 2>/dev/null | "
                  "{{ while IFS= read -r w; do printf '%s' \"$w\" | sha256sum; "
                  "printf '%s\\n' \"$w\" | tr -c 'A-Za-z0-9_\\n-' '\\n' | "
                  "while IFS= read -r x; do [ -n \"$x\" ] && printf '%s' \"$x\" | sha256sum; "
                  "done; done; }} | cut -d' ' -f1 | sort -u")
        cmd = (f"{pid_cmd}; echo \"@@pid $pid\"; "
               f"grep -i '^Max locked memory' /proc/$pid/limits 2>/dev/null; "
               f"echo @@argv; {hashes.format(f='cmdline')}; "
               f"echo @@environ; {hashes.format(f='environ')}; true")
        out = self.sh(cmd, "reading the engine process limits", 60)
        pid = next((ln.split()[1] for ln in out if ln.startswith("@@pid ") and
                    len(ln.split()) > 1), None)
        if not pid or pid == "0":
            raise VerifyFailure("process", f"{label} ({rid}): no engine process found")
        soft = parse_limits_memlock(out)
        ok = memlock_ok(plan.memlock, soft)
        self.measure("process", "memlock", soft, plan.memlock, ok, "bytes", release=rid, pid=pid)
        if not ok:
            raise VerifyFailure(
                "process", f"{label} ({rid}): engine pid {pid} has memlock {soft or 'unknown'}, "
                f"the plan needs {plan.memlock}")
        if self.spec.secret_sha256:
            section = ""
            found: dict[str, bool] = {"argv": False, "environ": False}
            for ln in out:
                if ln in ("@@argv", "@@environ"):
                    section = ln[2:]
                elif section and ln.strip() == self.spec.secret_sha256:
                    found[section] = True
            for where in ("argv", "environ"):
                self.measure("process", f"hf_token_in_{where}", found[where], False,
                             not found[where], release=rid)
            if found["argv"] or found["environ"]:
                where = " and ".join(k for k, v in found.items() if v)
                raise VerifyFailure(
                    "process", f"{label} ({rid}): the HF token is in the engine's {where}")

    def ensure_uploaded(self, rid: str, files: Sequence[FileSpec]) -> None:
        if rid in self.releases:
            return
        if not files:
            raise VerifyFailure("release", f"release {rid} is not on the host")
        for f in files:
            self.sh(upload_command(f), f"uploading {f.path}")
        self.releases.add(rid)
        self.event(f"uploaded release {rid}")

    # -- measurement ---------------------------------------------------------------------------

    def _bench_path(self, arm: str, rid: str, n: int) -> Path:
        base = self.spec.work_dir or Path(".")
        return base / f"{_safe(self.spec.plan.host)}.{arm}.{rid}.r{n}.bench.json"

    def bench(self, arm: str, rid: str, n: int = 1) -> dict[str, Any]:
        out = self._bench_path(arm, rid, n)
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = self.io.monotonic()
        try:
            res = self.io.bench(self.base_url, self.spec.plan.served_model_name, out)
        except (SpecdecError, OSError, ValueError, subprocess.SubprocessError) as exc:
            raise VerifyFailure("bench", f"benchmark of the {arm} ({rid}) failed: "
                                f"{_one_line(exc)}") from None
        took = self.io.monotonic() - t0
        summ = bench_summary(res, self.levels)
        for c in self.levels:
            lvl = summ[f"c{c}"]
            if not lvl["throughput_tok_s"]:
                raise VerifyFailure("bench", f"benchmark of the {arm} ({rid}) measured no "
                                    f"throughput at concurrency {c}")
            self.measure("bench", f"{arm}.c{c}.throughput_tok_s", lvl["throughput_tok_s"],
                         unit="tok/s", release=rid, round=n)
            self.measure("bench", f"{arm}.c{c}.tpot_ms_p50", lvl["tpot_ms_p50"], unit="ms",
                         release=rid, round=n)
        self.event(f"benchmarked the {arm} ({rid}), round {n}, in {took:.1f}s")
        res = dict(res)
        res["_file"] = str(out)
        return res

    def _summarise(self, arm: str, rid: str, results: Sequence[Mapping[str, Any]],
                   cached: bool) -> None:
        """Per-arm figures for the report: means over the rounds."""
        summs = [bench_summary(r, self.levels) for r in results]
        out: dict[str, Any] = {"release": rid, "cached": cached, "rounds": len(results),
                               "files": [str(r.get("_file", "")) for r in results]}
        for c in self.levels:
            k = f"c{c}"
            lvl: dict[str, Any] = {}
            for key in ("throughput_tok_s", "tpot_ms_p50"):
                vals = [s[k][key] for s in summs if s[k][key] is not None]
                lvl[key] = sum(vals) / len(vals) if vals else None
            out[k] = lvl
        out["spec_decode"] = summs[-1]["spec_decode"] if summs else None
        out["device_time"] = results[-1].get("device_time") if results else None
        self.report[arm] = out

    def cached_baseline(self, rid: str) -> dict[str, Any] | None:
        if self.spec.reverify or self.spec.cache_dir is None:
            return None
        path = self.spec.cache_dir / f"{rid}.json"
        try:
            res = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(res, dict) or not isinstance(res.get("concurrency"), dict):
            return None
        summ = bench_summary(res, self.levels)
        if any(not summ[f"c{c}"]["throughput_tok_s"] for c in self.levels):
            return None
        cfg = res.get("config")
        if isinstance(cfg, Mapping):
            want = self.spec.bench
            if (cfg.get("requests"), cfg.get("max_tokens")) != (want.requests, want.max_tokens):
                self.event(f"cached baseline of {rid} was measured with other bench settings; "
                           "measuring again")
                return None
        where = (res.get("runner") or {}).get("where", "control")
        if where != self.spec.bench_mode:  # a client across a link measures other TTFT/E2EL
            self.event(f"cached baseline of {rid} was measured from {where}; measuring again")
            return None
        scale = dict(self.spec.plan.env).get("SPECDEC_EMU_TIME_SCALE")
        basis = (res.get("device_time") or {}).get("time_scale")
        if (scale is None) != (basis is None) or (
                basis is not None and float(basis) != float(str(scale))):
            self.event(f"cached baseline of {rid} is in another time basis; measuring again")
            return None
        res["_file"] = str(path)
        for c in self.levels:
            self.measure("bench", f"baseline.c{c}.throughput_tok_s",
                         summ[f"c{c}"]["throughput_tok_s"], unit="tok/s", release=rid,
                         cached=True)
            self.measure("bench", f"baseline.c{c}.tpot_ms_p50", summ[f"c{c}"]["tpot_ms_p50"],
                         unit="ms", release=rid, cached=True)
        self.event(f"reused the cached baseline benchmark of {rid}")
        return res

    def store_baseline(self, rid: str, res: Mapping[str, Any]) -> None:
        if self.spec.cache_dir is None:
            return
        try:
            self.spec.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.spec.cache_dir / f".{rid}.json.tmp"
            tmp.write_text(json.dumps({k: v for k, v in res.items() if k != "_file"}, indent=1))
            tmp.replace(self.spec.cache_dir / f"{rid}.json")
        except OSError:
            self.event("could not write the baseline cache")

    def activate_and_check(self, rid: str, label: str) -> None:
        self.switch(rid)
        self.wait_healthy(rid, label)
        self.check_process(rid, label)

    # -- the flow ------------------------------------------------------------------------------

    def run(self, state: release.ReleaseState) -> dict[str, Any]:
        spec = self.spec
        self.running = state.current
        self.releases = set(state.releases)
        self.last_good = state.last_good
        restore_to = state.last_good or (
            spec.prior_current if spec.prior_current in self.releases else None)
        self.report["last_good"] = state.last_good
        try:
            return self._verify(state)
        except VerifyFailure as fail:
            self.event(f"{fail.phase}: {fail.reason}")
            return self._recover(fail, restore_to)

    def _verify(self, state: release.ReleaseState) -> dict[str, Any]:
        spec = self.spec
        cand, base = spec.candidate, spec.baseline_id
        running = state.current
        if running is None:
            raise VerifyFailure("release", "no release is current on the host")
        if running != spec.desired and running == state.last_good:
            return self._reverted_by_guard(running)
        label = _label(running, cand, base)
        self.arm(spec.plan.health_timeout_s)
        self.wait_healthy(running, label)
        self.check_process(running, label)

        if base is None or not spec.plan.speculative or not spec.benchmark:
            self.commit(running)
            why = ("the benchmark phase is off (specdec_verify=false)" if spec.benchmark is False
                   else "speculation is off in the plan")
            return self.finish("kept", "done", f"{why}; release {running} is healthy and "
                               f"marked last-good")

        rounds: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
        cached = self.cached_baseline(base)
        if cached is not None:
            rounds["baseline"].append(cached)
        from specdec.gate import decide

        policy = spec.plan.gate
        n = 0
        while True:
            n += 1
            # Measure what runs first, then switch once for the other arm (ABAB over rounds).
            first = "baseline" if self.running == base else "candidate"
            for arm in (first, "candidate" if first == "baseline" else "baseline"):
                if len(rounds[arm]) >= n:
                    continue
                rid = cand if arm == "candidate" else base
                if self.running != rid:
                    if arm == "baseline":
                        self.ensure_uploaded(base, spec.baseline_files)
                    self.activate_and_check(rid, arm)
                self.arm(self.spec.bench.timeout_s)
                res = self.bench(arm, rid, n)
                rounds[arm].append(res)
                if arm == "baseline" and n == 1:
                    self.store_baseline(base, res)
            try:
                dec = decide(rounds["baseline"], rounds["candidate"], policy)
            except GateError as exc:
                raise VerifyFailure("gate", f"the gate refused the results: {exc}") from None
            self.measure("gate", "decision", dec.decision, round=n)
            if (dec.decision != "inconclusive" or n >= max(1, policy.max_rounds)
                    or not getattr(dec, "keep_possible", True)):
                break
            self.event(f"round {n} inconclusive ({dec.reason}); measuring another round")
        for arm in ("baseline", "candidate"):
            self._summarise(arm, cand if arm == "candidate" else base, rounds[arm],
                            cached is not None and arm == "baseline")
        self.report["gate"] = dec.to_dict()
        for r in dec.rules:
            self.measure("gate", r.name, r.measured, r.threshold, r.verdict == "pass",
                         verdict=r.verdict, ci=list(r.ci))
        self._acceptance(rounds["candidate"][-1])
        self._roofline()

        if dec.decision == "keep":
            if self.running != cand:
                self.activate_and_check(cand, "candidate")
            self.commit(cand, f"rm -f {shlex.quote(layout.release_dir(cand) + '/decision.json')}")
            self.event(f"kept speculation; last-good is {cand}")
            return self.finish("kept", "done", f"speculation kept: {dec.reason}")

        reason = dec.reason if dec.decision == "disable" else \
            f"inconclusive, disabled conservatively: {dec.reason}"
        if self.running != base:
            self.ensure_uploaded(base, spec.baseline_files)
            self.activate_and_check(base, "baseline")
        decision = {"outcome": "disabled", "active": base, "candidate": cand,
                    "reason": reason, "time": now_iso(), "run_id": spec.run_id}
        self.sh(upload_command(FileSpec(f"{layout.release_dir(cand)}/decision.json",
                                        json.dumps(decision, indent=2) + "\n")),
                "recording the decision")
        self.commit(base)
        self.event(f"disabled speculation; last-good is the baseline {base}")
        return self.finish("disabled", "done", f"speculation disabled: {reason}")

    def _reverted_by_guard(self, good: str) -> dict[str, Any]:
        """``current`` went back to last-good between serve and verify: the host's guard did
        it (the control node lost the host past the deadline). Confirm it serves; roll back."""
        ok, out = self.io.run(f"tail -n 1 {guard.LOG_FILE} 2>/dev/null || true", 30)
        line = " ".join(out[-1].split()) if ok and out else ""
        desired = self.spec.desired
        self.event(f"release {desired} is not current: {line or 'reverted to last-good'}")
        try:
            self.wait_healthy(good, "last-good", phase="restore")
        except VerifyFailure as again:
            return self.finish("failed", "guard", f"the host's guard reverted {desired} to "
                               f"last-good {good}, which does not serve: {again.reason}")
        return self.finish("rolled_back", "guard",
                           f"the host's guard reverted {desired} to last-good {good} (not "
                           f"confirmed in time{': ' + line if line else ''}); "
                           f"rolled back to last-good {good} (serving)")

    def _recover(self, fail: VerifyFailure, target: str | None) -> dict[str, Any]:
        failing = self.running
        what = f"{fail.phase}: {fail.reason}"
        if target is None or target not in self.releases:
            note = "no last-good release to restore"
            try:
                st = self.unit_state()
                if st.get("ActiveState") in ("failed", "activating") or \
                        st.get("SubState") == "auto-restart":
                    self.io.run(f"systemctl stop {SERVICE}", 120)
                    note += "; the failing engine was stopped"
            except Exception:  # noqa: BLE001 - best effort on an already failed host
                pass
            return self.finish("failed", fail.phase, f"{what}; {note}")
        if target == failing and fail.phase not in ("health", "unit", "oom"):
            return self.finish("failed", fail.phase,
                               f"{what}; the failing release {target} is the last-good one")
        try:
            self.switch(target)
            self.wait_healthy(target, "last-good", phase="restore")
            self.sh(guard.disarm_command(), "disarming the guard")
        except VerifyFailure as again:
            # The guard stays armed: the host reverts on its own at the deadline.
            return self.finish("failed", fail.phase,
                               f"{what}; restoring last-good {target} failed too: {again.reason}"
                               f" (the host's guard reverts it unless confirmed)")
        if failing == target:
            return self.finish("failed", fail.phase,
                               f"{what}; restarted last-good {target}, which serves again")
        self.report["last_good"] = target
        return self.finish("rolled_back", fail.phase,
                           f"{what}; rolled back to last-good {target} (serving)")

    def _acceptance(self, cand: Mapping[str, Any]) -> None:
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
            self.measure("bench", "acceptance_length", length,
                         unit="tokens/step", release=self.spec.candidate)
        for i, rate in enumerate(per_pos):
            self.measure("bench", f"acceptance_rate_pos{i}", rate, release=self.spec.candidate)

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


CARRIED = ("baseline", "candidate", "gate", "acceptance", "roofline")


def unchanged_report(spec: VerifySpec, state: release.ReleaseState,
                     health: tuple[int, str] | None,
                     previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of a host whose desired release is current and verified: nothing done.

    ``previous``: this host's last verification report (kept/disabled); when it verified the
    release that runs now, its figures are carried over (marked ``carried_from``)."""
    v = Verifier(spec, _NoIO())
    v.running = state.current
    v.report["last_good"] = state.last_good
    if health is not None:
        v.measure("health", "health_status", health[0], 200, health[0] == 200)
    msg = (f"release {state.current} is current and last-good; not re-benchmarked "
           "(--data specdec_reverify=true to re-verify)")
    if (previous and previous.get("outcome") in ("kept", "disabled")
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

    def bench(self, url: str, model: str, out: Path) -> dict[str, Any]:
        raise AssertionError("no bench")

    def sleep(self, seconds: float) -> None:
        pass

    def monotonic(self) -> float:
        return 0.0


# -- real IO pieces (no pyinfra) -------------------------------------------------------------------


def http_get(url: str, timeout: float) -> tuple[int, str]:
    """GET with the standard library (works under pyinfra's gevent monkey-patching, which
    breaks httpx's sync transport)."""
    import http.client
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http only
            return int(resp.status), resp.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError):
        return 0, ""


def bench_subprocess(url: str, model: str, out: Path, settings: BenchSettings,
                     levels: Sequence[int]) -> dict[str, Any]:
    """``python -m specdec.cli bench`` in a child (no asyncio inside pyinfra's gevent)."""
    import os

    cmd = [sys.executable, "-m", "specdec.cli", "bench", url, "--model", model,
           "--concurrency", ",".join(str(c) for c in levels),
           "--requests", str(settings.requests), "--max-tokens", str(settings.max_tokens),
           "--warmup", str(settings.warmup), "--json", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=settings.timeout_s,
                              env=env, check=False)
    except subprocess.TimeoutExpired:
        raise BenchError(f"no result within {settings.timeout_s:.0f}s (engine hung?)") from None
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


# -- small helpers ---------------------------------------------------------------------------


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


def _label(rid: str, cand: str, base: str | None) -> str:
    return "candidate" if rid == cand else "baseline" if rid == base else "release"


def engine_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"http://{host}:{port}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip("._") or "host"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
