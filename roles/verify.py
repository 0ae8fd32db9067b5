"""Verify the activated release (thin: the logic is `specdec.verify.verifier`).

Runs after `serve`. At execution time it reads the host's release pointers again and decides:

* nothing to verify (the desired release is current *and* last-good, the engine was not
  restarted, no ``--data specdec_reverify=true``) and the engine answers ``/health`` → report
  ``unchanged``, "No changes", and the deploy lock released here (nothing else follows);
* otherwise a Python callback on the control node (`specdec.verify.verifier.Verifier`): health,
process
  checks, benchmarks, gate, then keep / disable / roll back. A rolled-back or failed host is
  then failed with a one-line reason (never counted as a success), after its deploy lock is
  released.

Every outcome writes ``reports/<run-id>/<host>.json`` and refreshes the fleet summary.
Where the benchmark client runs is ``specdec_bench_mode`` (`specdec.bench.remote`): by default
on the host beside the engine (uploaded, run over SSH against loopback, its JSON collected from
stdout), else in the engine's image, or on the control node as a subprocess.
Benchmark knobs (per gate round and arm, `specdec.gate.rounds.BenchSettings`) come from the
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
import os
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, HiddenValue, deploy, operation
from pyinfra.api.operation import OperationMeta

from specdec.catalog import GIB, load_catalog
from specdec.config import apikey
from specdec.errors import SpecdecError, redact
from specdec.host.identify import Identity
from specdec.host.layout import KEEP_RELEASES
from specdec.host.power import PowerState, mode_bandwidth
from specdec.host.release import ReleaseState, prune_doomed
from specdec.host.release import remove as remove_releases
from specdec.plan.types import http_url
from specdec.report.fleet import CACHE_DIR, safe_name
from specdec.roles.common import DeployError, HostPlan, state_dir, tune_store
from specdec.roles.facts import DeviceIdentity, JetsonPower, SpecdecReleases
from specdec.roles.group import verify_serving_group
from specdec.roles.hostio import PyinfraIO, previous_report, write_report
from specdec.roles.lock import LockLost, connector_args, fail_command, release_now, run_dir, run_id
from specdec.roles.lock import skip_host as _skip_host
from specdec.roles.serve import ServeResult
from specdec.verify import verifier as sv
from specdec.verify.progress import Progress
from specdec.verify.spec import HostIO, Roofline, VerifySpec

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


def bench_settings(roofline: Roofline | None = None) -> sv.BenchSettings:
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


def _roofline_timeout(kw: dict[str, Any], roofline: Roofline | None) -> float:
    if roofline is None or roofline.tokens_per_s <= 0:
        return 0.0
    wall_tps = roofline.tokens_per_s / roofline.time_scale
    tokens = ((kw.get("requests", _DEFAULT.requests) + kw.get("warmup", _DEFAULT.warmup))
              * kw.get("max_tokens", _DEFAULT.max_tokens))
    return 4.0 * tokens / wall_tps


def make_io(conn: dict[str, Any], spec: VerifySpec) -> HostIO:
    """Factory (tests replace it)."""
    return PyinfraIO(conn, spec)


def _roofline(hp: HostPlan) -> Roofline | None:
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
    return Roofline(device.bandwidth_gbs, nbytes, scale if scale > 0 else 1.0) \
        if nbytes > 0 else None


def _with_power(roof: Roofline | None, state: PowerState | None,
                device_id: str, ident: Identity | None) -> Roofline | None:
    cat = load_catalog()
    device = cat.devices.get(device_id)
    if roof is None or device is None:
        return roof
    l4t = ident.l4t if ident else None
    if state is None:  # no nvpmodel: the peak on the host's L4T (a Nano on JetPack 5: 68.3)
        peak, src = mode_bandwidth(device, None, None, l4t)
        return roof if peak == roof.bandwidth_gbs else dataclasses.replace(
            roof, bandwidth_gbs=peak, bandwidth_source=src)
    module = cat.module(ident.module_id, ident.carrier) if ident else None
    rec = state.record(device, module, l4t)
    return dataclasses.replace(roof, bandwidth_gbs=rec["bandwidth_gbs"],
                               bandwidth_source=rec["bandwidth_source"], power=rec)


def _run_verify(spec: VerifySpec, state: Any, conn: dict[str, Any],
                token: HiddenValue | None, result: dict[str, Any]) -> None:
    # The token travels masked (pyinfra may print a callback's arguments at -vvv).
    secret = token.unmask() if token is not None else None
    verifier = sv.Verifier(spec, make_io(conn, spec),
                           progress=Progress(spec.plan.host, secret=secret))
    try:
        rep = verifier.run(state)
    except LockLost as exc:  # another rollout owns the host now: change nothing more
        rep = verifier.finish("failed", "lock", str(exc))
    except Exception as exc:  # noqa: BLE001 - an unexpected error must still fail cleanly
        rep = verifier.finish("failed", "internal", f"verification crashed: {exc!r}")
    result.update(rep)
    write_report(rep, secret, spec)


@operation(is_idempotent=False)
def verify_release(spec: VerifySpec, changed: tuple[OperationMeta, ...],
                   token: HiddenValue | None = None):
    """Verify the running release; keep, disable or roll back.

    + spec: what to verify (`specdec.verify.spec.VerifySpec`)
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
    # as read under the lock, or live once this run changed the host (roles/factcache.py)
    state = host.get_fact(SpecdecReleases)
    why = sv.needs_verification(state, spec.desired, restarted, spec.reverify)
    if why is None:
        key = apikey.read_key(spec.api_key_file) if spec.api_key_file else None
        health = sv.http_get(http_url(spec.address, spec.plan.port, spec.plan.tls) + "/health",
                             5.0, key, spec.ca_file)
        if health[0] == 200:
            write_report(sv.unchanged_report(spec, state, health, previous_report(spec)), secret)
            host.noop(f"release {state.current} verified before; not re-benchmarked")
            # nothing follows on this host but the unlock: released here, one round trip less
            release_now(connector_args())
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
        return
    # releases the verify step made (the tune's points, the baseline) are pruned now, under the
    # lock, not by the next run (read live: this run changed the host)
    after = host.get_fact(SpecdecReleases)
    doomed = prune_doomed(after, KEEP_RELEASES, (spec.desired,))
    if doomed:
        yield remove_releases(doomed)


def verify_spec(hp: HostPlan, served: ServeResult, token: HiddenValue | None,
                prior: ReleaseState | None) -> VerifySpec:
    """What to verify on this host (prepare phase)."""
    settings = hp.settings
    if prior is None:
        prior = host.get_fact(SpecdecReleases)  # before this run changes anything
    base = hp.baseline
    files = base.release_files if base is not None else ()
    secret = token.unmask() if token is not None else None
    roofline = _roofline(hp)
    return VerifySpec(
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
        cache_dir=state_dir() / CACHE_DIR / safe_name(host.name),
        work_dir=run_dir() / "bench",
        bench=bench_settings(roofline),
        roofline=roofline,
        run_id=run_id(),
        tune_cache=tune_store(settings),
        bench_mode=settings.bench_mode,
        api_key_file=hp.secrets.api_key_file if hp.secrets is not None else None,
        ca_file=hp.secrets.api_ca_file if hp.secrets is not None else None,
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
    # asked in prepare, so verify_release's reads are answered by the read under the lock
    # (roles/factcache.py) unless this run changed the host
    host.get_fact(JetsonPower)
    host.get_fact(DeviceIdentity)
    if hp.group is not None:  # a serving group verifies as one (roles/group.py)
        verify_serving_group(hp, spec, served, token)
        return
    verify_release(
        name="Verify the release (health, limits, benchmark, gate)",
        spec=spec,
        changed=served.changed,
        token=token,
    )
