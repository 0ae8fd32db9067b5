"""The verifier's world on pyinfra hosts: `HostIO` on the host an operation runs on
(`PyinfraIO`) or on another host of the run (`MemberIO`), and the host reports written on the
control node."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import StringCommand
from pyinfra.context import ctx_host

from specdec.bench import remote
from specdec.config import apikey
from specdec.config.readback import check_tree, parse_json
from specdec.gate.rounds import RoundBench
from specdec.report.fleet import write_host_report
from specdec.roles.common import state_dir
from specdec.roles.lock import host_run, keep_lease, run_dir
from specdec.verify import verifier as sv
from specdec.verify.spec import VerifySpec
from specdec.watch import marks as watch_marks

__all__ = ["MemberIO", "PyinfraIO", "previous_report", "write_report"]


class PyinfraIO:
    """`specdec.verify.spec.HostIO` on a pyinfra host, inside an executing operation."""

    def __init__(self, conn: dict[str, Any], spec: VerifySpec) -> None:
        self.conn = conn
        self.spec = spec

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        keep_lease(host.name, lambda c, t: host_run(c, self.conn, t))
        return host_run(command, self.conn, timeout)

    def _key(self) -> str | None:
        path = self.spec.api_key_file
        return apikey.read_key(path) if path else None

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        return sv.http_get(url, timeout, self._key(), self.spec.ca_file)

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        ok, lines = self.run(sv.host_get_command(url, timeout), timeout + 30)
        return sv.parse_host_get(lines) if ok else (0, "")

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        mode, timeout = self.spec.bench_mode, self.spec.bench.timeout_s
        if mode == "control":  # the target's tokenizer counts tokens if there is no usage
            res = sv.bench_subprocess(url, model, out, run, timeout,
                                      tokenizer=self.spec.plan.model,
                                      key_file=self.spec.api_key_file,
                                      ca_file=self.spec.ca_file)
            res["runner"] = {"where": "control"}
        else:  # beside the engine, against loopback: no link in the figures
            res = remote.run_on_host(self.run, remote.bundle(), self.spec.plan.port, model,
                                     run.argv(), timeout, mode, self.spec.plan.image,
                                     tls=remote.tls_mode(self.spec.plan.tls,
                                                         self.spec.ca_file is not None))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
        return res

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # gevent-patched under the pyinfra CLI

    def monotonic(self) -> float:
        return time.monotonic()


class MemberIO(PyinfraIO):
    """`specdec.verify.spec.HostIO` on another host of the run (a serving group's member)."""

    def __init__(self, member: Any, conn: dict[str, Any], spec: VerifySpec) -> None:
        super().__init__(conn, spec)
        self.member = member

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        keep_lease(self.member.name, self._run)
        return self._run(command, timeout)

    def _run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        kwargs = dict(self.conn)
        if timeout:
            kwargs["_timeout"] = int(timeout)
        st = self.member.state
        with ctx_host.use(self.member):
            ok, output = self.member.run_shell_command(
                StringCommand(command), print_output=st.print_output,
                print_input=st.print_input, **kwargs)
        return bool(ok), list(output.stdout_lines)


def last_verified(spec: VerifySpec) -> Path | None:
    return spec.cache_dir / "last-verified.json" if spec.cache_dir is not None else None


def write_report(rep: dict[str, Any], secret: str | None, spec: VerifySpec | None = None) -> None:
    # a verified outcome answers a `specdec watch` reverify mark: recorded here, then cleared
    mark = (watch_marks.get(state_dir(), str(rep.get("host")))
            if rep.get("outcome") in sv.VERIFIED else None)
    if mark is not None:
        rep = {**rep, "watch_mark": mark}
    try:
        path = write_host_report(run_dir(), rep, secret)
        if mark is not None:
            watch_marks.clear(state_dir(), str(rep.get("host")))
        last = last_verified(spec) if spec is not None else None
        if last is not None and rep.get("outcome") in sv.VERIFIED:
            last.parent.mkdir(parents=True, exist_ok=True)
            last.write_text(path.read_text())  # already scrubbed
    except OSError as exc:
        host.noop(f"could not write the report: {exc.strerror or exc}")


def previous_report(spec: VerifySpec) -> dict[str, Any] | None:
    """This host's last verified report (its figures are carried into an unchanged run's):
    read back, so checked as input (`specdec.config.readback`); a bad one is not carried."""
    last = last_verified(spec)
    try:
        doc = check_tree(parse_json(last.read_bytes(), "report"), "report") \
            if last is not None else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
