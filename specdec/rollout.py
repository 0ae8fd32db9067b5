"""Batch rollout: run the deploy on a fleet batch by batch, canary first.

``specdec rollout INVENTORY --batches 1,25%,100%`` runs
``pyinfra -y INVENTORY deploys/specdec.py --limit <batch hosts>`` once per batch. Batch sizes
follow Ansible's ``serial``: each item is the size of the next batch (a count, or a percentage
of all targeted hosts, rounded down, at least 1); the last item repeats until every host had
its turn. A Dynamo serving group is one unit: its members go into one batch together, never
split (`specdec.groups.inventory`). After each batch the per-host reports decide: a host is failed
when its outcome is ``rolled_back``, ``failed`` or ``held`` (or it has no report at all); when a
batch's failed share
*exceeds* ``--max-fail-percent`` (default 0) the rollout stops and the hosts of later batches
are left untouched and reported ``skipped``.

Everything is validated before the first batch runs (batch spec, limits, run id, reports
directory, inventory, every host's name, data and HF token: bad input exits 2 with nothing
touched). The run id reaches the deploy through ``$SPECDEC_RUN_ID`` and the
reports directory through ``$SPECDEC_REPORTS_DIR``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.apikey import read_key
from specdec.errors import RolloutError, redact
from specdec.hftoken import read_token
from specdec.hostdata import parse_hosts
from specdec.pki import read_pem
from specdec.plan import plan_host_settings
from specdec.report import (
    REPORTS_ENV,
    RUN_ID_ENV,
    check_run_id,
    load_reports,
    safe_name,
    skipped_report,
    write_fleet,
    write_host_report,
)
from specdec.settings import HostSettings

__all__ = [
    "FAILED",
    "Batch",
    "RolloutPlan",
    "RolloutResult",
    "batch_hosts",
    "batch_units",
    "check_hosts",
    "check_reports_dir",
    "exceeds",
    "parse_batches",
    "parse_max_fail",
    "pyinfra_command",
    "run_rollout",
]

FAILED = ("rolled_back", "failed", "held")  # held: not verified, last-good kept
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEPLOY = PROJECT_ROOT / "deploys" / "specdec.py"


@dataclass(frozen=True)
class Batch:
    count: int | None = None
    percent: int | None = None

    def size(self, total: int) -> int:
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, total * self.percent // 100)


def parse_batches(spec: str) -> list[Batch]:
    """``"1,25%,100%"`` → batches; a bad item is a one-line `RolloutError`."""
    items = [x.strip() for x in spec.split(",")]
    if not spec.strip() or any(not x for x in items):
        raise RolloutError(f"--batches={spec!r}: expected a comma-separated list like 1,25%,100%")
    out: list[Batch] = []
    for item in items:
        if item.endswith("%"):
            num = item[:-1]
            if not num.isdigit() or not 1 <= int(num) <= 100:
                raise RolloutError(f"--batches={spec!r}: {item!r} is not a percentage in "
                                   "1%..100%")
            out.append(Batch(percent=int(num)))
        else:
            if not item.isdigit() or int(item) < 1:
                raise RolloutError(f"--batches={spec!r}: {item!r} is not a host count >= 1 "
                                   "or a percentage like 25%")
            out.append(Batch(count=int(item)))
    return out


def parse_max_fail(value: str | float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise RolloutError(f"--max-fail-percent={value!r}: not a number") from None
    if not 0 <= v <= 100 or v != v:
        raise RolloutError(f"--max-fail-percent={value!r}: must be in 0..100")
    return v


def batch_hosts(hosts: Sequence[str], batches: Sequence[Batch]) -> list[list[str]]:
    """Split ``hosts`` (rollout order) into batches; the last batch size repeats."""
    if not batches:
        raise RolloutError("--batches: no batches")
    out: list[list[str]] = []
    i = 0
    total = len(hosts)
    k = 0
    while i < total:
        size = batches[min(k, len(batches) - 1)].size(total)
        out.append(list(hosts[i:i + size]))
        i += size
        k += 1
    return out


def batch_units(units: Sequence[Sequence[str]], batches: Sequence[Batch]) -> list[list[str]]:
    """As `batch_hosts`, over deploy units (a Dynamo serving group's members, or one host): a
    batch takes whole units until it holds its size in hosts (at least one unit), so a group is
    never split across batches (a canary batch of 1 is a whole group when a group comes first)."""
    if not batches:
        raise RolloutError("--batches: no batches")
    total = sum(len(u) for u in units)
    out: list[list[str]] = []
    i, k = 0, 0
    while i < len(units):
        size = batches[min(k, len(batches) - 1)].size(total)
        batch: list[str] = []
        while i < len(units) and (not batch or len(batch) + len(units[i]) <= size):
            batch.extend(units[i])
            i += 1
        out.append(batch)
        k += 1
    return out


def exceeds(failed: int, size: int, max_fail_percent: float) -> bool:
    """Ansible's rule: stop when the failed share of the batch is *above* the limit."""
    return size > 0 and failed * 100.0 / size > max_fail_percent


def check_reports_dir(root: Path) -> Path:
    root = root.expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise RolloutError(f"--reports={str(root)!r}: not writable "
                           f"({exc.strerror or type(exc).__name__})") from None
    return root


@dataclass(frozen=True)
class RolloutPlan:
    inventory: Path
    hosts: list[str]  # targeted hosts, rollout order
    batches: list[list[str]]
    max_fail_percent: float
    run_id: str
    reports_root: Path
    data: tuple[str, ...] = ()  # --data KEY=VALUE passed through to pyinfra
    extra_args: tuple[str, ...] = ()
    deploy: Path = DEPLOY
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> device, method…

    @property
    def run_dir(self) -> Path:
        return self.reports_root / self.run_id


@dataclass
class RolloutResult:
    run_dir: Path
    outcomes: dict[str, str] = field(default_factory=dict)
    stopped_after: int | None = None  # batch number (1-based) that stopped the rollout
    exit_code: int = 0


def pyinfra_command(plan: RolloutPlan, batch: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pyinfra", "-y", str(plan.inventory), str(plan.deploy)]
    for h in batch:
        cmd += ["--limit", h]
    for d in plan.data:
        cmd += ["--data", d]
    cmd += list(plan.extra_args)
    return cmd


# A runner returns pyinfra's exit status, or (status, its last error line).
Runner = Callable[[list[str], Mapping[str, str], Path], "int | tuple[int, str]"]
_PYINFRA_ERROR = "--> pyinfra error"


def _subprocess_runner(cmd: list[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
    """Run pyinfra, echoing its output live (redacted); keep its last error line for the
    reports."""
    last = ""
    with subprocess.Popen(cmd, env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = redact(raw)  # nothing token-shaped reaches the terminal or a report
            sys.stdout.write(line)
            sys.stdout.flush()
            if _PYINFRA_ERROR in line:
                last = line.split(_PYINFRA_ERROR, 1)[1].strip(" :\n")
                last = re.sub(r"^in \S+ line \d+: ", "", last)
    return proc.returncode, last


def _outcomes(run_dir: Path, batch: Sequence[str]) -> dict[str, dict[str, Any]]:
    by_name = {str(r["host"]): r for r in load_reports(run_dir)}
    return {h: by_name[h] for h in batch if h in by_name}


def run_rollout(plan: RolloutPlan, runner: Runner = _subprocess_runner,
                say: Callable[[str], None] = print) -> RolloutResult:
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "hosts.json").write_text(json.dumps(plan.hosts) + "\n")
    env = dict(os.environ)
    env[RUN_ID_ENV] = plan.run_id
    env[REPORTS_ENV] = str(plan.reports_root)
    result = RolloutResult(run_dir)
    n = len(plan.batches)
    for k, batch in enumerate(plan.batches, 1):
        say(f"specdec rollout {plan.run_id}: batch {k}/{n}: {', '.join(batch)}")
        ran = runner(pyinfra_command(plan, batch), env, PROJECT_ROOT)
        rc, error = ran if isinstance(ran, tuple) else (ran, "")
        reports = _outcomes(run_dir, batch)
        failed = 0
        for h in batch:
            rep = reports.get(h)
            if rep is None:
                why = f"pyinfra exited {rc} before this host was verified"
                why += f": {error}" if error else " (see the pyinfra output)"
                rep = skipped_report(h, plan.run_id, why, outcome="failed", phase="deploy",
                                     **plan.meta.get(h, {}))
                write_host_report(run_dir, rep, fleet=False)
            result.outcomes[h] = str(rep.get("outcome"))
            failed += result.outcomes[h] in FAILED
        if rc != 0 and failed == 0:
            say(f"specdec rollout: pyinfra exited {rc} although every host of batch {k} "
                "reported success; stopping to be safe")
            failed = len(batch)
        say(f"specdec rollout {plan.run_id}: batch {k}/{n}: {len(batch) - failed} ok, "
            f"{failed} failed")
        if failed:
            result.exit_code = 1
        if exceeds(failed, len(batch), plan.max_fail_percent) and k < n:
            result.stopped_after = k
            rest = [h for b in plan.batches[k:] for h in b]
            why = (f"not deployed: batch {k} had {failed}/{len(batch)} failed hosts "
                   f"(more than --max-fail-percent {plan.max_fail_percent:g}%)")
            for h in rest:
                write_host_report(run_dir, skipped_report(h, plan.run_id, why,
                                                          **plan.meta.get(h, {})), fleet=False)
                result.outcomes[h] = "skipped"
            say(f"specdec rollout: stopping after batch {k}; {len(rest)} host(s) untouched")
            break
    write_fleet(run_dir)
    return result


def _cli_value(arg: str) -> Any:
    """A ``--data`` value as pyinfra reads it (pyinfra 3.10, pyinfra_cli/util.py,
    parse_cli_arg): true/false, an integer, JSON, else the string."""
    if arg.lower() in ("true", "false"):
        return arg.lower() == "true"
    try:
        return int(arg)
    except ValueError:
        pass
    try:
        return json.loads(arg)
    except ValueError:
        return arg


def parse_with_data(hosts: Sequence[tuple[str, Mapping[str, Any]]],
                    data: Sequence[str] = ()) -> list[HostSettings]:
    """Every host's settings with the ``--data`` overrides (as the deploy will see them)."""
    overrides = {k.strip(): _cli_value(v) for k, v in (d.split("=", 1) for d in data)}
    return parse_hosts(hosts, overrides)


def check_hosts(hosts: Sequence[tuple[str, Mapping[str, Any]]],
                data: Sequence[str] = ()) -> list[HostSettings]:
    """Refuse bad input before the first batch, as the deploy's prepare would: every host's
    name, ``specdec_*`` data (with the ``--data`` overrides) and HF token. Raises `ConfigError`;
    returns the hosts' settings."""
    settings = []
    for name, host_data in hosts:  # host by host: the first bad one is the error
        s = parse_with_data([(name, host_data)], data)[0]
        read_token(name, s.hf_token_file)
        if s.api_key_file:  # a named key file must be there (the default one is made)
            read_key(s.api_key_file, name)
        if s.tls_cert_file and s.tls_key_file:
            read_pem(s.tls_cert_file, "specdec_tls.cert", name)
            read_pem(s.tls_key_file, "specdec_tls.key", name)
        settings.append(s)
    return settings


def host_meta(s: HostSettings) -> dict[str, Any]:
    """Device and method of a host from its settings (offline), for reports of hosts the
    deploy never verified; empty when it cannot be planned offline."""
    try:
        p = plan_host_settings(s, None)
    except Exception:  # noqa: BLE001 - best effort: the deploy reports the real error
        return {}
    return {"device": p.device, "engine": p.engine, "runtime": p.runtime, "model": p.model,
            "method": p.method, "draft": p.draft,
            "num_speculative_tokens": p.num_speculative_tokens}


def existing_run(root: Path, run_id: str) -> bool:
    d = root / check_run_id(run_id)
    return d.is_dir() and any(p for p in d.glob("*.json"))


def host_file(run_dir: Path, host: str) -> Path:
    return run_dir / f"{safe_name(host)}.json"
