"""The per-host deploy lock, a lease, as pure shell-command builders and output parsers.

Two rollouts to one host must not interleave. The lock is the directory
``/var/lib/specdec/deploy.lock`` holding ``info``: the control node, its machine-id, pid, run
id, a random token, and the lease: the host's boot id, the host's monotonic clock when it was
last renewed (``/proc/uptime``: seconds since boot, which no wall-clock step moves) and its
length. Every step is one shell command on the host:

* **acquire**: build the lock complete under a name unique to this attempt (``info`` and an
  ``owner.<token>`` marker), then ``mv -T`` it onto ``deploy.lock``: a rename onto a non-empty
  directory fails, so a lock is never seen half-written and exactly one of any number of
  racers gets it (verified by its marker).
* **renew**: rewrite ``info`` with the clock now, only while it still carries our token; the
  deploy renews during long phases (`leased` wraps a long command in a renewing loop; the
  verify step renews between its host commands), so a live holder's lease never runs out.
* **takeover** of a stale lock: rename its ``info`` to a name unique to us (exactly one renamer
  succeeds), verify it is the stale holder's token (else put it back), then rename the whole
  directory away to a unique name, delete that, and acquire as above. A lock without ``info``
  (a taker that died between its rename and its cleanup, or a hand-made one) is first
  *adopted*: ``ln`` gives it an ``info`` of ours, which fails if it has one (so only one taker
  adopts, and never a lock someone just published), then taken over as above.
* **release**: the same claim-and-verify with our own token, so a late release never removes
  someone else's lock.

All of them also run under ``flock`` on ``.deploy.lock.flock`` (released by the kernel when the
process dies, so it can never go stale); the renames keep the protocol correct on their own
(``tests/unit/test_lock_race.py`` races both, with and without ``info``).

A held lock is *stale* when its holder ran on this control node (same host name and
``/etc/machine-id``) and that pid is gone, or when its lease ran out on the host's monotonic
clock: in the boot it was renewed in, when more than the lease has passed since; after a reboot
(another boot id), once the host has been up longer than the lease (the holder had a whole lease
to renew). A lock without a lease (an older version's, or without ``info``) is judged by the
first time a deploy saw it so (a ``seen`` stamp of boot id and uptime it leaves there). The
wall clock plays no part: a clock that jumps a year either way changes nothing. Used by
``roles/lock.py``; nothing here talks to a host.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specdec.config.rawinput import ascii_int
from specdec.host import layout

__all__ = [
    "LEASE_S",
    "MARK",
    "LockInfo",
    "LockStatus",
    "acquire_command",
    "claim_left",
    "describe",
    "is_stale",
    "leased",
    "machine_id",
    "new_lock",
    "parse_acquire",
    "release_command",
    "renew_command",
    "takeover_command",
]

MARK = "@@specdec-lock"
LEASE_S = 900  # renewed at least every LEASE_S / 3 while the deploy holds it
RENEW_EVERY_S = LEASE_S // 3
FLOCK_FILE = ".deploy.lock.flock"
FLOCK_WAIT_S = 60
# The host's clocks (tests point these at files of their own).
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
UPTIME_FILE = "/proc/uptime"
_VALUE = re.compile(r"[A-Za-z0-9._:@+-]{1,128}")
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")
_BOOT = re.compile(r"[0-9a-f-]{1,64}")


@dataclass(frozen=True)
class LockInfo:
    control: str  # control node host name
    pid: int  # pyinfra process on the control node
    run_id: str
    token: str  # random; proves ownership at renewal and release
    machine: str = ""  # control node's /etc/machine-id ("" in locks of older versions)
    boot: str = ""  # the host's boot id at the last renewal ("" in locks without a lease)
    renewed: int = 0  # the host's uptime (s) at the last renewal
    lease: int = 0  # seconds the lease runs from a renewal (0: no lease)

    def to_text(self) -> str:
        return (
            f"control={self.control}\nmachine={self.machine}\npid={self.pid}\n"
            f"run={self.run_id}\ntoken={self.token}\nboot={self.boot}\n"
            f"renewed={self.renewed}\nlease={self.lease}\n"
        )

    @classmethod
    def parse(cls, lines: Iterable[str]) -> LockInfo | None:
        kv: dict[str, str] = {}
        for line in lines:
            key, sep, value = line.strip().partition("=")
            if sep:
                kv.setdefault(key, value)
        try:
            boot = kv.get("boot", "")
            return cls(kv["control"], int(kv["pid"]), kv["run"], kv["token"],
                       kv.get("machine", ""), boot if _BOOT.fullmatch(boot) else "",
                       int(kv.get("renewed") or 0), int(kv.get("lease") or 0))
        except (KeyError, ValueError):
            return None


def _clean(value: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._:@+-]", "_", value)[:128]
    return value if _VALUE.fullmatch(value) else "unknown"


@cache
def machine_id() -> str:
    """This machine's systemd machine-id (machine-id(5)); "unknown" when unreadable."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if _MACHINE_ID.fullmatch(text):
            return text
    return "unknown"


def new_lock(run_id: str) -> LockInfo:
    return LockInfo(control=_clean(socket.gethostname()), pid=os.getpid(),
                    run_id=_clean(run_id), token=secrets.token_hex(8), machine=machine_id())


def _q(x: str) -> str:
    return shlex.quote(x)


def _clock() -> str:
    """``$boot`` and ``$up`` (whole seconds) from the host's clocks."""
    return (f"boot=$(cat {_q(BOOT_ID_FILE)}); up=$(cut -d. -f1 {_q(UPTIME_FILE)}); ")


def _lock(state_dir: str) -> str:
    return _q(f"{state_dir}/deploy.lock")


def _info_file(info: LockInfo, path: str) -> str:
    """Write ``info`` with the lease from now (``$boot``, ``$up``) to ``path``."""
    fmt = _q("control=%s\nmachine=%s\npid=%s\nrun=%s\ntoken=%s\nboot=%s\nrenewed=%s\n"
             "lease=%s\n")
    fields = " ".join(_q(str(v)) for v in (info.control, info.machine, info.pid, info.run_id,
                                            info.token))
    return f"printf {fmt} {fields} \"$boot\" \"$up\" {LEASE_S} > {path}"


def _publish(info: LockInfo, state_dir: str) -> str:
    """Write our lock under a unique name and rename it into place; or report the holder,
    stamping a lock without a lease (or a claim left by a taker that died) with when it was
    first seen so."""
    lock = _lock(state_dir)
    new = _q(f"{state_dir}/deploy.lock.new.{info.token}")
    owner = _q(f"owner.{info.token}")
    return (
        f"rm -rf {new}; mkdir {new} && {_info_file(info, f'{new}/info')} && "
        f": > {new}/{owner} && if mv -T {new} {lock} 2>/dev/null && "
        f"[ -e {lock}/{owner} ]; then echo {MARK} acquired \"$boot\" \"$up\"; "
        f"else rm -rf {new}; "
        f"grep -qs '^lease=[1-9]' {lock}/info || {_stamp(lock, 'seen', info.token)}; "
        f"[ ! -d {lock}/claim ] || {_stamp(lock, 'claim/seen', info.token)}; "
        f"echo {MARK} held \"$boot\" \"$up\"; cat {lock}/info 2>/dev/null; "
        f"echo \"seen=$(cat {lock}/seen 2>/dev/null)\"; "
        f"echo \"claim=$(cat {lock}/claim/seen 2>/dev/null)\"; echo; fi"
    )


def _stamp(lock: str, name: str, token: str) -> str:
    """``<lock>/<name>`` = ``$boot $up``, unless there is one (``ln``: the first one stays)."""
    tmp = f"{lock}/{name}.{token}"
    return (f"{{ [ -e {lock}/{name} ] || {{ printf '%s %s\\n' \"$boot\" \"$up\" > {tmp} "
            f"2>/dev/null && ln {tmp} {lock}/{name} 2>/dev/null; rm -f {tmp}; }}; }}")


def _dir(state_dir: str | None) -> str:
    return layout.STATE_DIR if state_dir is None else state_dir  # read now: tests move it


def _flocked(script: str, state_dir: str, serialize: bool) -> str:
    prefix = f"mkdir -p {_q(state_dir)} && "
    if not serialize:
        return prefix + script
    return (prefix + f"flock -w {FLOCK_WAIT_S} {_q(state_dir + '/' + FLOCK_FILE)} "
            f"sh -c {_q(script)}")


def acquire_command(info: LockInfo, state_dir: str | None = None,
                    serialize: bool = True) -> str:
    """Take the lock or report its holder: prints ``MARK acquired <boot> <uptime>`` or
    ``MARK held <boot> <uptime>`` followed by the holder's info lines, ``seen=`` and
    ``claim=``."""
    d = _dir(state_dir)
    return _flocked(_clock() + _publish(info, d), d, serialize)


def _claimed(lock: str, token: str, then: str, moves: bool, retries: int = 0) -> str:
    """Run ``then`` holding the lock's claim (``mkdir <lock>/claim``: one holder at a time, and
    a lock's ``info`` is never renamed while anyone looks at it), when its info carries
    ``token``. ``moves``: ``then`` moves the lock away (with the claim in it); otherwise, and
    when the token is not there, the claim is dropped."""
    take = f"mkdir {lock}/claim 2>/dev/null"
    if retries:
        take = (f"{{ n=0; until {take}; do n=$((n + 1)); [ $n -lt {retries} ] || break; "
                f"sleep 0.1; done; [ $n -lt {retries} ]; }}")
    match = f"grep -qxF {_q('token=' + token)} {lock}/info"
    if moves:
        return (f"if {take}; then if {match} && {then}; then :; else rm -rf {lock}/claim; fi; "
                "fi; ")
    return f"if {take}; then if {match}; then {then}; fi; rm -rf {lock}/claim; fi; "


def _dispose(lock: str, name: str) -> str:
    """Rename the lock directory to a unique name, then delete it there (again, should a
    racer's stamp have landed in it while the first ``rm`` ran)."""
    return (f"mv -T {lock} {name} && {{ rm -rf {name} 2>/dev/null || "
            f"{{ sleep 0.2; rm -rf {name}; }}; }}")


def takeover_command(stale: LockInfo | None, info: LockInfo,
                     state_dir: str | None = None, serialize: bool = True,
                     break_claim: str | None = None) -> str:
    """Replace a stale lock (only the very holder judged stale), then take it. ``stale`` None:
    a lock without ``info``, adopted first (see the module doc). ``break_claim``: the stamp
    (``boot uptime``) of a claim judged left behind by a taker that died: it is broken first
    (only by whoever renames that stamp away)."""
    state_dir = _dir(state_dir)
    lock = _lock(state_dir)
    gone = _q(f"{state_dir}/deploy.lock.stale.{info.token}")
    drop = ""
    if break_claim is not None:
        mine = _q(f"{state_dir}/deploy.lock/claim.broken.{info.token}")
        drop += (f"if [ \"$(cat {lock}/claim/seen 2>/dev/null)\" = {_q(break_claim)} ] && "
                 f"mv -T {lock}/claim/seen {mine}.seen 2>/dev/null; then "
                 f"mv -T {lock}/claim {mine} && rm -rf {mine} {mine}.seen; fi; ")
    if stale is not None:
        drop += _claimed(lock, stale.token, _dispose(lock, gone), moves=True)
    else:
        token = f"adopt.{info.token}"
        adopt = _q(f"{state_dir}/deploy.lock.{token}")
        drop += (f"printf 'token=%s\\n' {_q(token)} > {adopt} && "
                 f"if [ -d {lock} ] && ln {adopt} {lock}/info 2>/dev/null; then rm -f {adopt}; "
                 f"{_claimed(lock, token, _dispose(lock, gone), moves=True)}"
                 f"else rm -f {adopt}; fi; ")
    return _flocked(_clock() + drop + _publish(info, state_dir), state_dir, serialize)


def renew_command(info: LockInfo, state_dir: str | None = None, serialize: bool = True) -> str:
    """Renew our lease: prints ``MARK renewed`` while the lock carries our token, else
    ``MARK lost`` (it was taken over: stop changing the host)."""
    state_dir = _dir(state_dir)
    lock = _lock(state_dir)
    new = _q(f"{state_dir}/deploy.lock/info.new.{info.token}")
    write = f"{_info_file(info, new)} && mv -f {new} {lock}/info && r=renewed"
    script = (f"{_clock()}r=lost; {_claimed(lock, info.token, write, False, retries=50)}"
              f"echo {MARK} $r \"$boot\" \"$up\"")
    return _flocked(script, state_dir, serialize)


def leased(command: str, info: LockInfo, state_dir: str | None = None) -> str:
    """``command`` with the lease renewed every `RENEW_EVERY_S` while it runs (a long download
    or pull); the loop stops with it, or when the lock is not ours any more."""
    renew = renew_command(info, state_dir)
    loop = (f"while sleep {RENEW_EVERY_S}; do {{ {renew}; }} 2>/dev/null | "
            f"grep -q ' renewed ' || break; done")
    return (f"( {loop} ) >/dev/null 2>&1 & renewer=$!; {{ {command}; }}; rc=$?; "
            "kill $renewer 2>/dev/null; exit $rc")


def release_command(info: LockInfo, state_dir: str | None = None,
                    serialize: bool = True) -> str:
    """Remove the lock only if it still carries our token."""
    state_dir = _dir(state_dir)
    lock = _lock(state_dir)
    gone = _q(f"{state_dir}/deploy.lock.released.{info.token}")
    return _flocked(_claimed(lock, info.token, _dispose(lock, gone), True, retries=50)
                    + "true", state_dir, serialize)


@dataclass(frozen=True)
class LockStatus:
    acquired: bool
    holder: LockInfo | None = None
    boot: str | None = None  # the host's boot id now
    uptime: int | None = None  # the host's monotonic clock now (s)
    seen: tuple[str, int] | None = None  # a lease-less lock, first seen (boot id, uptime)
    state: str = ""  # acquired | held | renewed | lost
    claim: tuple[str, int] | None = None  # a claim on it, first seen (boot id, uptime)

    @property
    def claim_stamp(self) -> str | None:
        return f"{self.claim[0]} {self.claim[1]}" if self.claim else None

    @property
    def age(self) -> int | None:
        """Seconds since the holder's last renewal, when it was in this boot."""
        h = self.holder
        if h is None or self.uptime is None or not h.lease or h.boot != self.boot:
            return None
        return max(0, self.uptime - h.renewed)


def _int(words: list[str], i: int) -> int | None:
    return int(words[i]) if len(words) > i and words[i].isascii() and words[i].isdigit() \
        else None


def _seen(line: str) -> tuple[str, int] | None:
    words = line.partition("=")[2].split()
    if len(words) == 2 and _BOOT.fullmatch(words[0]) and (n := ascii_int(words[1], 18)) \
            is not None:
        return words[0], n
    return None


def parse_acquire(lines: Iterable[str]) -> LockStatus:
    """Parse what acquire, takeover or renew printed."""
    lines = list(lines)
    for i, line in enumerate(lines):
        words = line.split()
        if not line.startswith(MARK + " ") or len(words) < 2:
            continue
        state = words[1]
        boot = words[2] if len(words) > 2 and _BOOT.fullmatch(words[2]) else None
        up = _int(words, 3)
        if state == "held":
            rest = lines[i + 1:]
            seen = next((_seen(ln) for ln in rest if ln.startswith("seen=")), None)
            claim = next((_seen(ln) for ln in rest if ln.startswith("claim=")), None)
            return LockStatus(False, LockInfo.parse(
                ln for ln in rest if not ln.startswith(("seen=", "claim="))),
                boot, up, seen, state, claim)
        if state in ("acquired", "renewed", "lost"):
            return LockStatus(state != "lost", None, boot, up, None, state)
    return LockStatus(False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ran_out(boot: str, since: int, lease: int, now_boot: str, now_up: int) -> bool:
    """A lease renewed at uptime ``since`` of boot ``boot`` has run out by (now_boot, now_up)."""
    if boot == now_boot:
        return now_up - since > lease
    return now_up > lease  # rebooted since: the holder had a whole lease to renew


def claim_left(status: LockStatus, lease_s: int = LEASE_S) -> bool:
    """Whether the lock's claim was left by a taker that died (a live one holds it for a few
    milliseconds; this one has been there a whole lease)."""
    if status.claim is None or status.boot is None or status.uptime is None:
        return False
    return _ran_out(status.claim[0], status.claim[1], lease_s, status.boot, status.uptime)


def is_stale(
    status: LockStatus,
    *,
    control: str | None = None,
    machine: str | None = None,
    pid_alive: Callable[[int], bool] = _pid_alive,
    lease_s: int = LEASE_S,
) -> bool:
    """Whether a held lock may be taken over (the host's monotonic clock and boot id only)."""
    now_boot, now_up = status.boot, status.uptime
    if now_boot is None or now_up is None:
        return False
    holder = status.holder
    if holder is not None:
        me = machine if machine is not None else machine_id()
        here = (holder.control == _clean(control or socket.gethostname())
                and me != "unknown" and holder.machine == me)
        if here and not pid_alive(holder.pid):
            return True
        if holder.lease > 0 and holder.boot:
            return _ran_out(holder.boot, holder.renewed, holder.lease, now_boot, now_up)
    if status.seen is None:  # no lease: judged from when it was first seen so
        return False
    return _ran_out(status.seen[0], status.seen[1], lease_s, now_boot, now_up)


def describe(status: LockStatus) -> str:
    h = status.holder
    if h is None or not h.lease:
        what = "no holder info" if h is None else f"run {h.run_id} of an older version"
        return (f"deploy lock {layout.LOCK_FILE} is held ({what}: being taken over, or left "
                f"behind; it is replaced {LEASE_S // 60} min after a deploy first saw it so)")
    age = f", renewed {status.age}s ago" if status.age is not None else ""
    where = h.control + (f" [{h.machine[:8]}]" if h.machine else "")
    return (
        f"deploy lock {layout.LOCK_FILE} is held by run {h.run_id} "
        f"(pid {h.pid} on {where}{age}); another rollout is in progress — retry when it "
        f"ends; a holder that stops renewing its {LEASE_S // 60} min lease loses it"
    )
