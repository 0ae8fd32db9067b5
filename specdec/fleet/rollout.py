"""Batch rollout: run the deploy on a fleet batch by batch, canary first.

``specdec rollout INVENTORY --batches 1,25%,100%`` runs
``pyinfra -y INVENTORY deploys/specdec.py --limit <batch hosts>`` once per batch. Batch sizes
follow Ansible's ``serial``: each item is the size of the next batch (a count, or a percentage
of all targeted hosts, rounded down, at least 1); the last item repeats until every host had
its turn. A Dynamo serving group is one unit: its members go into one batch together, never
split (`specdec.plan.groups`). After each batch the per-host reports decide: a host is failed
when its outcome is ``rolled_back``, ``failed`` or ``held`` (or it has no report at all); when a
batch's failed share
*exceeds* ``--max-fail-percent`` (default 0) the rollout stops and the hosts of later batches
are left untouched and reported ``skipped``.

A host pyinfra could not connect to, or lost the connection to (its own output says so, per
host: ``[host] Could not connect …``, ``Command socket/SSH error …``; pyinfra 3.10
``connectors/ssh.py`` ``connect``, ``api/util.py`` ``log_host_command_error``), and that left
no verified report, is ``unreachable``: not a failed deploy. As Ansible counts UNREACHABLE
apart from failed (``max_fail_percentage`` counts only failed hosts, ``lib/ansible/plugins/
strategy/linear.py``; a batch whose every host failed or was unreachable ends the play,
``playbook_executor.py``), unreachable hosts have their own budget,
``--max-unreachable-percent`` (default 100), and a batch in which no host was reached stops
the rollout. ``specdec rollout --resume RUN`` runs the hosts of RUN that did not converge
again, under the same run id: their reports replace the old ones, which are kept in the new
report's ``attempts``.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from specdec.config.apikey import read_key
from specdec.config.hftoken import read_token
from specdec.config.pki import read_tls_pair
from specdec.config.settings import HostSettings
from specdec.errors import RolloutError, redact
from specdec.fleet.batches import Batch, batch_hosts, batch_units, exceeds, parse_batches
from specdec.fleet.resume import CONVERGED
from specdec.fleet.shard import Coordinator
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import plan_host_settings
from specdec.report.fleet import (
    REPORTS_ENV,
    RUN_ID_ENV,
    check_run_id,
    load_reports,
    skipped_report,
    write_fleet,
    write_host_report,
)
from specdec.tune.store import ENV as TUNE_CACHE_ENV
from specdec.tune.store import KEY as TUNE_KEY
from specdec.tune.store import check_location

__all__ = [
    "CONVERGED",
    "FAILED",
    "UNREACHABLE",
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
UNREACHABLE = "unreachable"
# pyinfra 3.10's per-host lines for a host it cannot reach: connect errors
# (pyinfra/connectors/ssh.py: raise_connect_error "SSH error", "Could not resolve hostname",
# "Could not connect", "EOF error") and a connection lost under a command
# (pyinfra/api/util.py log_host_command_error: "Command socket/SSH error: ...").
_LOST = re.compile(r"^\s*\[([A-Za-z0-9@/._-]+)\]\s+(Could not connect|SSH error|EOF error|"
                   r"Could not resolve hostname|Command socket/SSH error)\b(.*)$")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = Path(str(resources.files("specdec.deploys"))) / "specdec.py"


def parse_max_fail(value: str | float, flag: str = "--max-fail-percent") -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise RolloutError(f"{flag}={value!r}: not a number") from None
    if not 0 <= v <= 100 or v != v:
        raise RolloutError(f"{flag}={value!r}: must be in 0..100")
    return v


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
    max_unreachable_percent: float = 100.0
    resume: bool = False  # --resume: the run exists; its reports are the earlier attempts
    params: dict[str, Any] = field(default_factory=dict)  # run.json: what --resume reuses
    tune_cache: str | None = None  # --tune-cache, passed to pyinfra as $SPECDEC_TUNE_CACHE

    @property
    def run_dir(self) -> Path:
        return self.reports_root / self.run_id


@dataclass
class RolloutResult:
    run_dir: Path
    outcomes: dict[str, str] = field(default_factory=dict)
    stopped_after: int | None = None  # batch number (1-based) that stopped the rollout
    exit_code: int = 0  # 0 all converged, 1 a host failed, 3 only unreachable hosts left


def pyinfra_command(plan: RolloutPlan, batch: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pyinfra", "-y", str(plan.inventory), str(plan.deploy)]
    for h in batch:
        cmd += ["--limit", h]
    for d in plan.data:
        cmd += ["--data", d]
    cmd += list(plan.extra_args)
    return cmd


# A runner returns pyinfra's exit status, or (status, its last error line), or (status, last
# error line, {host: why it was unreachable}).
Runner = Callable[[list[str], Mapping[str, str], Path],
                  "int | tuple[int, str] | tuple[int, str, dict[str, str]]"]
_PYINFRA_ERROR = "--> pyinfra error"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lost_hosts(lines: Iterable[str]) -> dict[str, str]:
    """Hosts pyinfra's output says it could not reach, or lost: host -> its line."""
    out: dict[str, str] = {}
    for raw in lines:
        m = _LOST.match(_ANSI.sub("", raw))
        if m:
            out.setdefault(m.group(1), " ".join((m.group(2) + m.group(3)).split())[:300])
    return out


def _subprocess_runner(cmd: list[str], env: Mapping[str, str],
                       cwd: Path) -> tuple[int, str, dict[str, str]]:
    """Run pyinfra, echoing its output live (redacted); keep its last error line for the
    reports and the hosts it could not reach."""
    last = ""
    lost: dict[str, str] = {}
    with subprocess.Popen(cmd, env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = redact(raw)  # nothing token-shaped reaches the terminal or a report
            sys.stdout.write(line)
            sys.stdout.flush()
            for h, why in lost_hosts([line]).items():
                lost.setdefault(h, why)
            if _PYINFRA_ERROR in line:
                last = line.split(_PYINFRA_ERROR, 1)[1].strip(" :\n")
                last = re.sub(r"^in \S+ line \d+: ", "", last)
    return proc.returncode, last, lost


def _outcomes(run_dir: Path, batch: Sequence[str]) -> dict[str, dict[str, Any]]:
    by_name = {str(r["host"]): r for r in load_reports(run_dir)}
    return {h: by_name[h] for h in batch if h in by_name}


def _ran(ran: int | tuple[Any, ...]) -> tuple[int, str, dict[str, str]]:
    if isinstance(ran, int):
        return ran, "", {}
    rc, error, *rest = ran
    return int(rc), str(error), dict(rest[0]) if rest else {}


def _attempt(rep: Mapping[str, Any]) -> dict[str, Any]:
    return {k: rep.get(k) for k in ("outcome", "phase", "message", "finished_at")}


def _judge(plan: RolloutPlan, h: str, rep: dict[str, Any] | None, rc: int, error: str,
           lost: Mapping[str, str]) -> dict[str, Any]:
    """The host's report for this batch: the deploy's, or one written for it here (failed,
    or unreachable when pyinfra could not reach it and nothing was verified)."""
    why_lost = lost.get(h)
    if rep is None or (why_lost and rep.get("outcome") == "failed"):
        if why_lost:
            msg = (f"unreachable: {why_lost}; not deployed or not confirmed (a release it "
                   "activated is reverted by the host's guard at its deadline); "
                   f"'specdec rollout --resume {plan.run_id}' finishes it")
            if rep is not None:
                msg += f" (the deploy said: {rep.get('message')})"
            extra = {**plan.meta.get(h, {}), **{k: rep[k] for k in ("device", "engine",
                     "method") if rep is not None and rep.get(k)}}
            return skipped_report(h, plan.run_id, msg, outcome=UNREACHABLE, phase="connect",
                                  **extra)
        why = f"pyinfra exited {rc} before this host was verified"
        why += f": {error}" if error else " (see the pyinfra output)"
        return skipped_report(h, plan.run_id, why, outcome="failed", phase="deploy",
                              **plan.meta.get(h, {}))
    return rep


def write_run_params(plan: RolloutPlan) -> None:
    """``hosts.json`` (the rollout's order) and ``run.json`` (what ``--resume`` reuses), once
    per run."""
    run_dir = plan.run_dir
    if not (run_dir / "hosts.json").exists():
        (run_dir / "hosts.json").write_text(json.dumps(plan.hosts) + "\n")
    if plan.params and not (run_dir / "run.json").exists():
        (run_dir / "run.json").write_text(json.dumps(plan.params, indent=1, sort_keys=True)
                                          + "\n")


def run_rollout(plan: RolloutPlan, runner: Runner = _subprocess_runner,
                say: Callable[[str], None] = print,
                coord: Coordinator | None = None) -> RolloutResult:
    coord = coord or Coordinator()
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_params(plan)
    earlier = {str(r["host"]): r for r in load_reports(run_dir)} if plan.resume else {}
    env = _deploy_env(plan)
    result = RolloutResult(run_dir)
    n = len(plan.batches)
    tag = f"{plan.run_id}" + (f" [shard {coord.label}]" if coord.label else "")
    any_failed = any_unreachable = False
    for k, batch in enumerate(plan.batches, 1):
        batch, stop = coord.before_batch(k, list(batch))
        if stop:
            _skip_rest(plan, result, k - 1, f"not deployed: {stop}", say, earlier)
            break
        if not batch:
            continue
        say(f"specdec rollout {tag}: batch {k}/{n}: {', '.join(batch)}")
        rc, error, lost = _ran(runner(pyinfra_command(plan, batch), env, PROJECT_ROOT))
        failed, unreachable = _record_batch(plan, result, batch, (rc, error, lost), earlier)
        if rc != 0 and failed == 0 and unreachable == 0:
            say(f"specdec rollout: pyinfra exited {rc} although every host of batch {k} "
                "reported success; stopping to be safe")
            failed = len(batch)
        say(f"specdec rollout {tag}: batch {k}/{n}: {len(batch) - failed - unreachable} ok, "
            f"{failed} failed, {unreachable} unreachable")
        any_failed |= failed > 0
        any_unreachable |= unreachable > 0
        why = _over_budget(plan, k, len(batch), failed, unreachable)
        shared = coord.after_batch(k, batch, failed, unreachable, why is not None)
        why = why or shared
        if why and k < n:
            _skip_rest(plan, result, k, f"not deployed: {why}", say, earlier)
            break
    result.exit_code = 1 if any_failed else 3 if any_unreachable else 0
    write_fleet(run_dir)
    return result


def _deploy_env(plan: RolloutPlan) -> dict[str, str]:
    """pyinfra's environment: ours, with the run id, the reports root and the tune cache."""
    env = dict(os.environ)
    env[RUN_ID_ENV] = plan.run_id
    env[REPORTS_ENV] = str(plan.reports_root)
    if plan.tune_cache:
        env[TUNE_CACHE_ENV] = plan.tune_cache
    return env


def _record_batch(plan: RolloutPlan, result: RolloutResult, batch: Sequence[str],
                  ran: tuple[int, str, dict[str, str]],
                  earlier: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """Each host's report for the batch (a resumed host's keeps its earlier attempts) and
    outcome; how many failed and how many were unreachable."""
    rc, error, lost = ran
    reports = _outcomes(plan.run_dir, batch)
    failed = unreachable = 0
    for h in batch:
        rep = _judge(plan, h, reports.get(h), rc, error, lost)
        before = earlier.get(h)
        if before is not None:
            rep["attempts"] = [*before.get("attempts", []), _attempt(before)]
        if rep is not reports.get(h) or before is not None:
            write_host_report(plan.run_dir, rep, fleet=False)
        result.outcomes[h] = str(rep.get("outcome"))
        failed += result.outcomes[h] in FAILED
        unreachable += result.outcomes[h] == UNREACHABLE
    return failed, unreachable


def _over_budget(plan: RolloutPlan, k: int, size: int, failed: int, unreachable: int
                 ) -> str | None:
    """Why batch ``k`` stops the rollout: too many failed or unreachable hosts (None: it
    does not)."""
    if exceeds(failed, size, plan.max_fail_percent):
        return (f"batch {k} had {failed}/{size} failed hosts (more than "
                f"--max-fail-percent {plan.max_fail_percent:g}%)")
    if unreachable == size or exceeds(unreachable, size, plan.max_unreachable_percent):
        return (f"batch {k} had {unreachable}/{size} unreachable hosts ("
                + ("none reached" if unreachable == size else
                   f"more than --max-unreachable-percent "
                   f"{plan.max_unreachable_percent:g}%") + ")")
    return None


def _skip_rest(plan: RolloutPlan, result: RolloutResult, k: int, why: str,
               say: Callable[[str], None], earlier: Mapping[str, Mapping[str, Any]]) -> None:
    """The hosts of later batches: ``skipped`` (a resumed host keeps its earlier report)."""
    result.stopped_after = k
    rest = [h for b in plan.batches[k:] for h in b]
    for h in rest:
        if h in earlier:
            result.outcomes[h] = str(earlier[h].get("outcome"))
            continue
        write_host_report(plan.run_dir, skipped_report(h, plan.run_id, why,
                                                       **plan.meta.get(h, {})), fleet=False)
        result.outcomes[h] = "skipped"
    say(f"specdec rollout: stopping after batch {k}; {len(rest)} host(s) untouched ({why})")


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
            read_tls_pair(s.tls_cert_file, s.tls_key_file, host=name)
        if s.tune_cache:  # the deploy opens it before any change; a URL needs its store
            check_location(TUNE_KEY, s.tune_cache, name)
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
