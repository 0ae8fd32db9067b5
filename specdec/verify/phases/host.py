"""The shared state of one verification and its primitives on the host."""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specdec.errors import one_line, redact
from specdec.host import guard, layout, release
from specdec.verify.spec import FileSpec, HostIO, VerifySpec

__all__ = ["SERVICE", "Ctx", "VerifyFailure", "now_iso", "upload_command"]

SERVICE = f"{layout.SERVICE_NAME}.service"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class VerifyFailure(Exception):
    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase
        self.reason = " ".join(reason.split())


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


@dataclass
class Ctx:
    """One host's verification: the spec, the host, what runs there, and the report."""

    spec: VerifySpec
    io: HostIO
    report: dict[str, Any]
    base_url: str
    running: str | None = None
    releases: set[str] = field(default_factory=set)
    last_good: str | None = None
    progress: Callable[[str, str], None] | None = None  # (phase, line): the terminal's view
    phase: str = "verify"  # what the progress lines say is going on

    @property
    def levels(self) -> list[int]:
        g = self.spec.plan.gate
        return sorted({g.keep_concurrency, g.guard_concurrency})

    # -- recording ---------------------------------------------------------------------------
    def event(self, text: str) -> None:
        line = one_line(text)
        self.report["events"].append({"time": now_iso(), "message": line})
        if self.progress is not None:
            self.progress(self.phase, line)

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

    # -- the host ----------------------------------------------------------------------------
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

    def disarm(self) -> None:
        self.sh(guard.disarm_command(), "disarming the guard")

    def switch(self, rid: str) -> None:
        """Make ``rid`` current and restart the engine on it."""
        arm = self._guard_arm(rid, self.spec.plan.health_timeout_s)
        self.sh(f"{release.activate(rid)} && {arm + ' && ' if arm else ''}"
                f"systemctl daemon-reload && systemctl restart {SERVICE}",
                f"activating release {rid}", 300)
        self.running = rid
        self.event(f"activated release {rid} and restarted the engine")

    def ensure_uploaded(self, rid: str, files: Sequence[FileSpec]) -> None:
        if rid in self.releases:
            return
        if not files:
            raise VerifyFailure("release", f"release {rid} is not on the host")
        for f in files:
            self.sh(upload_command(f), f"uploading {f.path}")
        self.releases.add(rid)
        self.event(f"uploaded release {rid}")

    def unit_state(self) -> dict[str, str]:
        ok, out = self.io.run(
            f"systemctl show {SERVICE} -p ActiveState -p SubState -p Result -p NRestarts "
            f"-p MainPID", 30)
        return parse_unit_state(out) if ok else {}

    def journal_tail(self) -> list[str]:
        ok, out = self.io.run(
            f"journalctl -u {SERVICE} -n 300 --no-pager -o cat 2>/dev/null | tail -n 300 || true",
            30)
        return out if ok else []


def parse_unit_state(lines: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep:
            out[key] = value
    return out
