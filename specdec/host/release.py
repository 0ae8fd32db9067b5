"""Release bookkeeping on a host, as pure shell-command builders and output parsers.

A release is ``/var/lib/specdec/releases/<id>/``; ``current`` and ``last-good`` are symlinks to
``releases/<id>`` (relative, so a copied state dir stays valid). Switching is atomic: ``ln -sfn``
to a temporary name of the switch's own, then ``mv -T`` over the pointer. `activate` holds the
guard's ``flock`` (`GUARD_LOCK`), as the guard's revert and the commit do, so none of the three
interleave. ``decision.json`` in a release records the
verification outcome, e.g. ``{"outcome": "disabled", "active": "<baseline id>"}``.

Used by the pyinfra roles, the verification step and rollback; nothing here talks to a host.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.host import layout

__all__ = [
    "GUARD_LOCK",
    "MARK",
    "ReleaseState",
    "activate",
    "aux_restart",
    "desired_release",
    "parse_state",
    "read_state",
    "remove",
    "switch",
    "to_prune",
]

MARK = "@@specdec-release"
GUARD_LOCK = ".guard.lock"  # in the state dir; flock'ed by the guard, commit and activate
FLOCK_WAIT_S = 120  # the guard holds it while it restarts the engine
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _check_id(release_id: str) -> str:
    if not _ID.fullmatch(release_id):
        raise ValueError(f"release id {release_id!r} is not a plain name")
    return release_id


def switch(pointer: str, release_id: str, tag: str = "switch") -> str:
    """Point ``pointer`` (a path, or a name relative to the cwd) at ``releases/<id>``, through
    the temporary name ``<pointer>.<tag>.tmp`` (one per kind of switch)."""
    rid = _check_id(release_id)
    tmp = f"{pointer}.{tag}.tmp"
    target = f"releases/{rid}"
    return (
        f"ln -sfn {shlex.quote(target)} {shlex.quote(tmp)} && "
        f"mv -T {shlex.quote(tmp)} {shlex.quote(pointer)}"
    )


def activate(release_id: str) -> str:
    """Point ``current`` at ``releases/<release_id>`` atomically, under the guard's lock."""
    lock = shlex.quote(f"{layout.STATE_DIR}/{GUARD_LOCK}")
    inner = switch(layout.CURRENT, release_id, "activate")
    return f"flock -w {FLOCK_WAIT_S} {lock} sh -c {shlex.quote(inner)}"


def aux_restart(old: str, new: str) -> str:
    """After a switch from release dir ``old`` to ``new`` (shell words, e.g. ``"$cur"``): restart
    each auxiliary unit (`layout.AUX_SERVICES`, in start order) whose file differs or that is not
    running; stop one the new release no longer has. Identical units keep running. The firewall
    is reloaded, not restarted (its ruleset replaces the table in one transaction: never a
    moment without it)."""
    parts = []
    for name in layout.AUX_SERVICES:
        u = f"{name}.service"
        verb = "reload-or-restart" if name == layout.FIREWALL_SERVICE else "restart"
        parts.append(
            f"if [ -e {new}/{u} ]; then if ! cmp -s {old}/{u} {new}/{u} || "
            f"! systemctl is-active -q {u}; then systemctl {verb} {u}; fi; "
            f"elif [ -e {old}/{u} ]; then systemctl stop {u}; fi")
    return "; ".join(parts)


def read_state() -> str:
    """A read-only command printing the pointers, the releases (newest first) and decisions.

    Output: ``@@specdec-release current <target>``, ``... last-good <target>``, one
    ``... release <id>`` per release, then ``... decision <id>`` followed by its decision.json.
    """
    q = shlex.quote
    return "; ".join(
        [
            f"echo {MARK} current $(readlink {q(layout.CURRENT)} 2>/dev/null)",
            f"echo {MARK} last-good $(readlink {q(layout.LAST_GOOD)} 2>/dev/null)",
            f"if [ -d {q(layout.RELEASES_DIR)} ]; then cd {q(layout.RELEASES_DIR)} && "
            f"for r in $(ls -1t); do [ -d \"$r\" ] && echo {MARK} release \"$r\"; done; "
            f"for r in $(ls -1t); do if [ -f \"$r/decision.json\" ]; then "
            f"echo {MARK} decision \"$r\"; cat \"$r/decision.json\"; echo; fi; done; fi",
            "true",
        ]
    )


@dataclass(frozen=True)
class ReleaseState:
    current: str | None = None  # release id `current` points at
    last_good: str | None = None
    releases: tuple[str, ...] = ()  # newest first
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)


def _target_id(target: str) -> str | None:
    target = target.strip().rstrip("/")
    if not target:
        return None
    return target.rsplit("/", 1)[-1] or None


def parse_state(lines: Iterable[str]) -> ReleaseState:
    """Parse the output of `read_state`. A malformed decision.json is recorded as ``{}``."""
    current = last_good = None
    releases: list[str] = []
    decisions: dict[str, dict[str, Any]] = {}
    buf: list[str] | None = None
    buf_id = ""

    def flush() -> None:
        if buf is not None:
            try:
                doc = json.loads("\n".join(buf) or "null")
            except json.JSONDecodeError:
                doc = None
            decisions[buf_id] = doc if isinstance(doc, dict) else {}

    for line in lines:
        if line.startswith(MARK + " "):
            flush()
            buf = None
            _, kind, *rest = line.split(" ", 2)
            value = rest[0] if rest else ""
            if kind == "current":
                current = _target_id(value)
            elif kind == "last-good":
                last_good = _target_id(value)
            elif kind == "release" and value.strip():
                releases.append(value.strip())
            elif kind == "decision":
                buf, buf_id = [], value.strip()
        elif buf is not None:
            buf.append(line)
    flush()
    return ReleaseState(current, last_good, tuple(releases), decisions)


def desired_release(candidate: str, state: ReleaseState) -> str:
    """The release that should be current: the candidate, unless the host already verified it
    and recorded that speculation was disabled in favour of another (baseline) release, or that
    the tune phase kept another release of it (its tuned k: outcome ``tuned``)."""
    decision = state.decisions.get(candidate) or {}
    active = decision.get("active")
    if decision.get("outcome") in ("disabled", "tuned") and isinstance(active, str) \
            and _ID.fullmatch(active):
        return active
    return candidate


def to_prune(releases: Sequence[str], keep: int, protect: Iterable[str | None]) -> list[str]:
    """Releases to delete: all but the ``keep`` newest, never a protected one."""
    protected = {p for p in protect if p}
    kept = 0
    out: list[str] = []
    for rid in releases:
        if rid in protected:
            continue
        if kept < keep:
            kept += 1
            continue
        out.append(rid)
    return out


def remove(release_ids: Sequence[str]) -> str:
    """Delete the given release directories."""
    paths = " ".join(shlex.quote(layout.release_dir(_check_id(r))) for r in release_ids)
    return f"rm -rf -- {paths}"


def prune_doomed(state: ReleaseState, keep: int, protect: Iterable[str | None] = ()
                 ) -> list[str]:
    """`to_prune` of the host's releases, never its current or last-good one."""
    return to_prune(state.releases, keep, [state.current, state.last_good, *protect])
