"""Process checks: the engine process (MainPID, or the container's PID for docker) has an
effective memlock limit ≥ the plan's, and the HF token is in neither its argv nor its environment
(compared by SHA-256 only, so nothing secret travels or is printed)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from specdec.host import layout
from specdec.verify.phases.host import SERVICE, Ctx, VerifyFailure

__all__ = ["check_process", "memlock_ok", "parse_limits_memlock"]


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


def _command(runtime: str) -> str:
    q = shlex.quote
    pid_cmd = f"pid=$(systemctl show -p MainPID --value {SERVICE})"
    if runtime == "docker":
        pid_cmd += (f"; cpid=$(docker inspect -f '{{{{.State.Pid}}}}' "
                    f"{q(layout.SERVICE_NAME)} 2>/dev/null); "
                    f"[ -n \"$cpid\" ] && [ \"$cpid\" != 0 ] && pid=$cpid")
    hashes = ("tr '\\0' '\\n' < /proc/$pid/{f} 2>/dev/null | "
              "{{ while IFS= read -r w; do printf '%s' \"$w\" | sha256sum; "
              "printf '%s\\n' \"$w\" | tr -c 'A-Za-z0-9_\\n-' '\\n' | "
              "while IFS= read -r x; do [ -n \"$x\" ] && printf '%s' \"$x\" | sha256sum; "
              "done; done; }} | cut -d' ' -f1 | sort -u")
    return (f"{pid_cmd}; echo \"@@pid $pid\"; "
            f"grep -i '^Max locked memory' /proc/$pid/limits 2>/dev/null; "
            f"echo @@argv; {hashes.format(f='cmdline')}; "
            f"echo @@environ; {hashes.format(f='environ')}; true")


def check_process(ctx: Ctx, rid: str, label: str) -> None:
    """Effective memlock of the engine process and no HF token in its argv/environment."""
    plan = ctx.spec.plan
    out = ctx.sh(_command(plan.runtime), "reading the engine process limits", 60)
    pid = next((ln.split()[1] for ln in out if ln.startswith("@@pid ") and
                len(ln.split()) > 1), None)
    if not pid or pid == "0":
        raise VerifyFailure("process", f"{label} ({rid}): no engine process found")
    soft = parse_limits_memlock(out)
    ok = memlock_ok(plan.memlock, soft)
    ctx.measure("process", "memlock", soft, plan.memlock, ok, "bytes", release=rid, pid=pid)
    if not ok:
        raise VerifyFailure(
            "process", f"{label} ({rid}): engine pid {pid} has memlock {soft or 'unknown'}, "
            f"the plan needs {plan.memlock}")
    if not ctx.spec.secret_sha256:
        return
    section = ""
    found: dict[str, bool] = {"argv": False, "environ": False}
    for ln in out:
        if ln in ("@@argv", "@@environ"):
            section = ln[2:]
        elif section and ln.strip() == ctx.spec.secret_sha256:
            found[section] = True
    for where in ("argv", "environ"):
        ctx.measure("process", f"hf_token_in_{where}", found[where], False, not found[where],
                    release=rid)
    if found["argv"] or found["environ"]:
        where = " and ".join(k for k, v in found.items() if v)
        raise VerifyFailure("process",
                            f"{label} ({rid}): the HF token is in the engine's {where}")
