"""Verify the activated release (thin: the logic is `specdec.verify`).

Runs after `serve`. At execution time it reads the host's release pointers again and decides:

* nothing to verify (the desired release is current *and* last-good, the engine was not
  restarted, no ``--data specdec_reverify=true``) and the engine answers ``/health`` → report
  ``unchanged``, "No changes";
* otherwise a Python callback on the control node (`specdec.verify.Verifier`): health, process
  checks, benchmarks, gate, then keep / disable / roll back. A rolled-back or failed host is
  then failed with a one-line reason (never counted as a success), after its deploy lock is
  released.

Every outcome writes ``reports/<run-id>/<host>.json`` and refreshes the fleet summary.
Where the benchmark client runs is ``specdec_bench_mode`` (`specdec.bench.remote`): by default
on the host beside the engine (uploaded, run over SSH against loopback, its JSON collected from
stdout), else in the engine's image, or on the control node as a subprocess.
Benchmark knobs (per gate round and arm, `specdec.rounds.BenchSettings`) come from the
environment of the control node: ``SPECDEC_BENCH_REQUESTS`` (4, candidate at c=1),
``SPECDEC_BENCH_BASELINE_REQUESTS`` (2, baseline at c=1), ``SPECDEC_BENCH_GUARD_REQUESTS`` (8,
at c=8), ``SPECDEC_BENCH_MAX_TOKENS`` (64), ``SPECDEC_BENCH_WARMUP`` (2),
``SPECDEC_BENCH_RAMP_TOKENS`` (32, the c=8 level's unmeasured first request per client),
``SPECDEC_BENCH_TIMEOUT`` (per arm; a hung engine fails here: 600 s, longer for a device
whose bandwidth roofline makes the benchmark slow). The figures in the README's gate power
table hold for the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, HiddenValue, deploy, operation
from pyinfra.api.operation import OperationMeta

from roles.common import DeployError, HostPlan
from roles.facts import DeviceIdentity, JetsonPower, SpecdecReleases
from roles.lock import connector_args, fail_command, host_run, release_now, run_dir, run_id
from roles.lock import skip_host as _skip_host
from roles.serve import ServeResult
from specdec import verify as sv
from specdec.bench import remote
from specdec.catalog import GIB, load_catalog
from specdec.errors import SpecdecError, redact
from specdec.identify import Identity
from specdec.power import PowerState
from specdec.release import ReleaseState
from specdec.report import reports_root, safe_name, write_host_report
from specdec.rounds import RoundBench

__all__ = ["PyinfraIO", "bench_settings", "make_io", "verify", "verify_spec"]

_DEFAULT = sv.BenchSettings()
_BENCH_ENV = {
    "requests": ("SPECDEC_BENCH_REQUESTS", int, _DEFAULT.requests),
    "baseline_requests": ("SPECDEC_BENCH_BASELINE_REQUESTS", int, _DEFAULT.baseline_requests),
    "ramp_tokens": ("SPECDEC_BENCH_RAMP_TOKENS", int, _DEFAULT.ramp_tokens),
    "guard_requests": ("SPECDEC_BENCH_GUARD_REQUESTS", int, _DEFAULT.guard_requests),
    "max_tokens": ("SPECDEC_BENCH_MAX_TOKENS", int, _DEFAULT.max_tokens),
    "warmup": ("SPECDEC_BENCH_WARMUP", int, _DEFAULT.warmup),
    "timeout_s": ("SPECDEC_BENCH_TIMEOUT", float, _DEFAULT.timeout_s),
}


def bench_settings(roofline: sv.Roofline | None = None) -> sv.BenchSettings:
    """Bench knobs from the environment. Without ``$SPECDEC_BENCH_TIMEOUT`` the per-arm
    timeout is 600 s, or longer for a slow device: 4x the time the c=1 pass would take at
    the bandwidth roofline (so a hung engine is caught, and a slow Nano is not)."""
    kw: dict[str, Any] = {}
    for field, (env, typ, default) in _BENCH_ENV.items():
        raw = os.environ.get(env)
        if raw is None or raw == "":
            kw[field] = default
            if field == "timeout_s":
                kw[field] = max(default, _roofline_timeout(kw, roofline))
            continue
        try:
            val = typ(raw)
        except ValueError:
            raise DeployError(f"${env}={raw!r}: must be a number") from None
        if val < (0 if field in ("warmup", "ramp_tokens") else 1):
            raise DeployError(f"${env}={raw!r}: out of range")
        kw[field] = val
    return sv.BenchSettings(**kw)


def _roofline_timeout(kw: dict[str, Any], roofline: sv.Roofline | None) -> float:
    if roofline is None or roofline.tokens_per_s <= 0:
        return 0.0
    wall_tps = roofline.tokens_per_s / roofline.time_scale
    tokens = ((kw.get("requests", _DEFAULT.requests) + kw.get("warmup", _DEFAULT.warmup))
              * kw.get("max_tokens", _DEFAULT.max_tokens))
    return 4.0 * tokens / wall_tps


class PyinfraIO:
    """`specdec.verify.HostIO` on a pyinfra host, inside an executing operation."""

    def __init__(self, conn: dict[str, Any], spec: sv.VerifySpec) -> None:
        self.conn = conn
        self.spec = spec

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        return host_run(command, self.conn, timeout)

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        return sv.http_get(url, timeout)

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        mode, timeout = self.spec.bench_mode, self.spec.bench.timeout_s
        if mode == "control":  # the target's tokenizer counts tokens if there is no usage
            res = sv.bench_subprocess(url, model, out, run, timeout,
                                      tokenizer=self.spec.plan.model)
            res["runner"] = {"where": "control"}
        else:  # beside the engine, against loopback: no link in the figures
            res = remote.run_on_host(self.run, remote.bundle(), self.spec.plan.port, model,
                                     run.argv(), timeout, mode, self.spec.plan.image)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
        return res

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # gevent-patched under the pyinfra CLI

    def monotonic(self) -> float:
        return time.monotonic()


def make_io(conn: dict[str, Any], spec: sv.VerifySpec) -> sv.HostIO:
    """Factory (tests replace it)."""
    return PyinfraIO(conn, spec)


def _roofline(hp: HostPlan) -> sv.Roofline | None:
    try:
        cat = load_catalog()
        device = cat.device(hp.plan.device)
    except SpecdecError:
        return None
    model = cat.models.get(hp.plan.model)
    nbytes = model.decode_bytes if model is not None else int(hp.plan.fit.target_gib * GIB)
    try:  # the lab's engine emulator runs faster than the device by this factor
        scale = float(dict(hp.plan.env).get("SPECDEC_EMU_TIME_SCALE", "1") or 1)
    except ValueError:
        scale = 1.0
    return sv.Roofline(device.bandwidth_gbs, nbytes, scale if scale > 0 else 1.0) \
        if nbytes > 0 else None


def _with_power(roof: sv.Roofline | None, state: PowerState | None,
                device_id: str, ident: Identity | None) -> sv.Roofline | None:
    cat = load_catalog()
    device = cat.devices.get(device_id)
    if roof is None or state is None or device is None:
        return roof
    rec = state.record(device, cat.modules.get(ident.module_id or "") if ident else None)
    return dataclasses.replace(roof, bandwidth_gbs=rec["bandwidth_gbs"],
                               bandwidth_source=rec["bandwidth_source"], power=rec)


def _last_verified(spec: sv.VerifySpec) -> Path | None:
    return spec.cache_dir / "last-verified.json" if spec.cache_dir is not None else None


def _write(rep: dict[str, Any], secret: str | None, spec: sv.VerifySpec | None = None) -> None:
    try:
        path = write_host_report(run_dir(), rep, secret)
        last = _last_verified(spec) if spec is not None else None
        if last is not None and rep.get("outcome") in sv.VERIFIED:
            last.parent.mkdir(parents=True, exist_ok=True)
            last.write_text(path.read_text())  # already scrubbed
    except OSError as exc:
        host.noop(f"could not write the report: {exc.strerror or exc}")


def _previous(spec: sv.VerifySpec) -> dict[str, Any] | None:
    last = _last_verified(spec)
    try:
        doc = json.loads(last.read_text()) if last is not None else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _run_verify(spec: sv.VerifySpec, state: Any, conn: dict[str, Any],
                token: HiddenValue | None, result: dict[str, Any]) -> None:
    # The token travels masked (pyinfra may print a callback's arguments at -vvv).
    secret = token.unmask() if token is not None else None
    verifier = sv.Verifier(spec, make_io(conn, spec))
    try:
        rep = verifier.run(state)
    except Exception as exc:  # noqa: BLE001 - an unexpected error must still fail cleanly
        rep = verifier.finish("failed", "internal", f"verification crashed: {exc!r}")
    result.update(rep)
    _write(rep, secret, spec)


@operation(is_idempotent=False)
def verify_release(spec: sv.VerifySpec, changed: tuple[OperationMeta, ...],
                   token: HiddenValue | None = None):
    """Verify the running release; keep, disable or roll back.

    + spec: what to verify (`specdec.verify.VerifySpec`)
    + changed: serve's operations whose change restarted the engine
    + token: the HF token (only to keep it out of reports; compared by hash on the host)
    """
    if not host.state.is_executing:
        host.noop("verify after activation: health, limits, benchmark, gate")
        return
    secret = token.unmask() if token is not None else None
    restarted = any(op.is_complete() and op.did_change() for op in changed)
    # The power mode now (after Jetson tuning): its bandwidth is the roofline's, and the report
    # records it with the clocks.
    roofline = _with_power(spec.roofline, host.get_fact(JetsonPower), spec.plan.device,
                           host.get_fact(DeviceIdentity))
    spec = dataclasses.replace(spec, restarted=restarted, roofline=roofline)
    state = host.get_fact(SpecdecReleases)  # live: facts are not cached in pyinfra 3.10
    why = sv.needs_verification(state, spec.desired, restarted, spec.reverify)
    if why is None:
        health = sv.http_get(sv.engine_url(spec.address, spec.plan.port) + "/health", 5.0)
        if health[0] == 200:
            _write(sv.unchanged_report(spec, state, health, _previous(spec)), secret)
            host.noop(f"release {state.current} verified before; not re-benchmarked")
            return
        why = f"unchanged release {state.current} does not answer /health"
    host.noop(f"verifying: {why}")
    conn = connector_args()
    result: dict[str, Any] = {}
    yield FunctionCommand(_run_verify, (spec, state, conn, token, result), {})
    if result.get("outcome") in sv.FAILURE_OUTCOMES or not result:
        release_now(conn)
        msg = str(result.get("message") or "verification did not complete")
        msg = redact(msg, secret)
        yield fail_command(f"{host.name}: {result.get('outcome', 'failed')}: {msg}")


def verify_spec(hp: HostPlan, served: ServeResult, token: HiddenValue | None,
                prior: ReleaseState | None) -> sv.VerifySpec:
    """What to verify on this host (prepare phase)."""
    settings = hp.settings
    if prior is None:
        prior = host.get_fact(SpecdecReleases)  # before this run changes anything
    base = hp.baseline
    files = tuple(sv.FileSpec(f.path, f.content, f.mode, f.owner, f.group)
                  for f in (base.release_files if base is not None else ()))
    secret = token.unmask() if token is not None else None
    roofline = _roofline(hp)
    return sv.VerifySpec(
        plan=hp.plan,
        address=str(host.data.get("ssh_hostname") or host.name),
        candidate=served.candidate,
        desired=served.desired,
        baseline_id=base.release_id if base is not None else None,
        baseline_files=files,
        reverify=settings.reverify,
        benchmark=settings.verify,
        prior_current=prior.current,
        secret_sha256=sv.secret_sha256(secret),
        cache_dir=reports_root() / "cache" / safe_name(host.name),
        work_dir=run_dir() / "bench",
        bench=bench_settings(roofline),
        roofline=roofline,
        run_id=run_id(),
        tune_root=reports_root(),
        bench_mode=settings.bench_mode,
    )


@deploy("Verify")
def verify(hp: HostPlan, served: ServeResult, token: HiddenValue | None = None,
           prior: ReleaseState | None = None) -> None:
    """Health, limits, benchmark and gate after `serve`; keep, disable, or roll back.

    + hp: the host's plan and renderings
    + served: what serve activated and which of its operations restart the engine
    + token: the HF token read on the control node (never sent anywhere by this role)
    + prior: the release state before this run changed anything (`deploy_lock`'s)
    """
    if _skip_host():
        return
    spec = verify_spec(hp, served, token, prior)
    if hp.group is not None:  # a Dynamo serving group verifies as one (roles/dynamo.py)
        from roles.dynamo import verify_group

        verify_group(hp, spec, served, token)
        return
    verify_release(
        name="Verify the release (health, limits, benchmark, gate)",
        spec=spec,
        changed=served.changed,
        token=token,
    )
