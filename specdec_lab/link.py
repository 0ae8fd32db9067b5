"""A lab host's link conditions: delay, jitter and loss on its veth (``lab_link`` per host in
the lab inventory), as ``tc qdisc … netem`` would set them.

``lab_link: {delay_ms: 80, jitter_ms: 30, loss_pct: 0}`` applies netem's model to each
direction of the host's /30 link (as ``netem`` on both ends of the veth would): every packet
waits ``delay ± jitter`` (uniform), ``loss`` percent are dropped. So 80 ms ± 30 ms is an RTT of
about 160 ms between the control node and the host; loopback on the host is not affected.

How: ``tc qdisc replace dev <veth> root netem …`` on both ends when the kernel has
``sch_netem``. This machine's kernel has none (``tc`` answers "Specified qdisc kind is
unknown"), so the lab then queues the link's packets to `specdec_lab.linkemu` (NFQUEUE, the
same model in user space): two ``iptables -t mangle`` rules in the host's namespace and one
process there, recorded in the instance's state as ``link`` and stopped by ``lab down``.
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specdec_lab.errors import LabError
from specdec_lab.system import Proc, run

__all__ = ["LINKEMU", "Link", "apply", "emulator_argv", "netem_args", "parse_link"]

LINKEMU = Path(__file__).with_name("linkemu.py")
QUEUE = 0  # nfnetlink queues are per network namespace: each host has its own queue 0
_KEYS = {"delay_ms": 10_000.0, "jitter_ms": 10_000.0, "loss_pct": 100.0}  # upper bounds


@dataclass(frozen=True)
class Link:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        loss = f", {self.loss_pct:g}% loss" if self.loss_pct else ""
        return f"{self.delay_ms:g} ms ± {self.jitter_ms:g} ms{loss}"


def parse_link(host: str, value: Any) -> Link | None:
    """``lab_link`` of ``host``: None (no link conditions) or a mapping of the three keys."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value or set(value) - set(_KEYS):
        raise LabError(f"lab_link={value!r}: expected a mapping of "
                       f"{', '.join(_KEYS)} (numbers)", host=host)
    kw: dict[str, float] = {}
    for key, top in _KEYS.items():
        x = value.get(key, 0)
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) \
                or not 0 <= x <= top:
            raise LabError(f"lab_link.{key}={x!r}: a number in [0, {top:g}]", host=host)
        kw[key] = float(x)
    return Link(**kw)


def netem_args(link: Link) -> list[str]:
    """``tc qdisc replace … netem`` arguments for ``link`` (iproute2's tc-netem(8) syntax)."""
    args = ["netem", "delay", f"{link.delay_ms:g}ms"]
    if link.jitter_ms:
        args.append(f"{link.jitter_ms:g}ms")
    if link.loss_pct:
        args += ["loss", f"{link.loss_pct:g}%"]
    return args


def emulator_argv(netns: str, link: Link) -> list[str]:
    """The user-space emulator's command line (``lab down`` recognises it by ``--tag``)."""
    return ["ip", "netns", "exec", netns, "python3", "-I", str(LINKEMU), "--queue", str(QUEUE),
            "--delay-ms", f"{link.delay_ms:g}", "--jitter-ms", f"{link.jitter_ms:g}",
            "--loss-pct", f"{link.loss_pct:g}", "--tag", netns]


def _rules(netns: str, op: str) -> list[list[str]]:
    q = ["-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]
    ipt = ["ip", "netns", "exec", netns, "iptables", "-t", "mangle", op]
    return [[*ipt, "POSTROUTING", "-o", "eth0", *q], [*ipt, "PREROUTING", "-i", "eth0", *q]]


def _netem(veth: str, netns: str, link: Link) -> bool:
    """netem on both ends; False when the kernel has no netem (nothing is left applied)."""
    first = run(["tc", "qdisc", "replace", "dev", veth, "root", *netem_args(link)],
                f"tc qdisc replace dev {veth}", check=False)
    if first.returncode != 0:
        return False
    run(["ip", "netns", "exec", netns, "tc", "qdisc", "replace", "dev", "eth0", "root",
         *netem_args(link)], f"{netns}: tc qdisc replace dev eth0")
    return True


def apply(netns: str, veth: str, link: Link, log_path: Path, timeout_s: float = 10.0
          ) -> Proc | None:
    """Put ``link`` on the host's veth: netem, else the NFQUEUE emulator (returned; the
    caller records it). Raises `LabError` when neither works."""
    if _netem(veth, netns, link):
        return None
    ready = log_path.with_suffix(".ready")
    ready.unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen([*emulator_argv(netns, link), "--ready", str(ready)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    proc = Proc(popen.pid)
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if popen.poll() is not None or time.monotonic() > deadline:
            if popen.poll() is None:
                popen.kill()
            popen.wait()
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise LabError(f"{netns}: no netem in this kernel and the NFQUEUE link emulator "
                           f"did not start: {tail[0][:160]}")
        time.sleep(0.05)
    for argv in _rules(netns, "-A"):  # after the emulator is bound: no packet waits unqueued
        run(argv, f"{netns}: iptables -A NFQUEUE")
    return proc
