"""A lab link's delay, jitter and loss in user space, for kernels without ``sch_netem``.

``tc qdisc … netem`` is the lab's first choice (`specdec_lab.link`). Where the kernel has no
netem (``CONFIG_NET_SCH_NETEM`` unset, as on the Firecracker kernels this project's machines
run), the lab queues the host's packets to this process instead: two ``iptables -j NFQUEUE``
rules inside the host's network namespace (``POSTROUTING -o eth0``: the host's egress;
``PREROUTING -i eth0``: its ingress, i.e. the control side's egress) and this process, started
in that namespace, holds each packet and gives its verdict later, as netem's ``tfifo`` does:

* each packet gets its own delay, ``delay ± jitter`` drawn uniformly (netem's default when no
  distribution table is given: ``tabledist()`` in torvalds/linux ``net/sched/sch_netem.c``,
  "default uniform distribution"), and is released at ``arrival + delay`` in time order, so
  jitter reorders packets as netem does;
* ``loss`` percent of packets are dropped at arrival (netem's random loss model);
* at most ``limit`` packets wait (netem's default limit, 1000); more are dropped.

Stdlib only and runnable as a file (``python3 linkemu.py --queue 0 --delay-ms 80 …``): it runs
in the host's namespace through ``ip netns exec``. The rules carry ``--queue-bypass``, so if
this process is gone the link passes packets undelayed instead of dropping them. Protocol:
``nfnetlink_queue`` (include/uapi/linux/netfilter/nfnetlink_queue.h).
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_CFG_MASK, NFQA_CFG_FLAGS = 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_COPY_META = 1, 1
NFQA_CFG_F_GSO = 4  # whole GSO packets, as netem sees them on a veth
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_DROP, NF_ACCEPT = 0, 1
NETEM_LIMIT = 1000  # netem's default `limit`
NAME = "specdec-lab-link"  # in the command line, so the lab recognises its own process
_HDR = struct.Struct("=IHHII")


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def _msg(kind: int, queue: int, attrs: bytes, flags: int, seq: int) -> bytes:
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue) + attrs
    return _HDR.pack(_HDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _attrs(data: bytes) -> dict[int, bytes]:
    out, i = {}, 0
    while i + 4 <= len(data):
        n, kind = struct.unpack_from("=HH", data, i)
        if n < 4:
            break
        out[kind & 0x3FFF] = data[i + 4:i + n]
        i += (n + 3) & ~3
    return out


class Shaper:
    """One queue's packets, each released (or dropped) per netem's model."""

    def __init__(self, queue: int, delay_ms: float, jitter_ms: float, loss_pct: float,
                 limit: int = NETEM_LIMIT, seed: int | None = None) -> None:
        self.queue, self.limit = queue, limit
        self.delay, self.jitter, self.loss = delay_ms / 1e3, jitter_ms / 1e3, loss_pct / 100
        self.rng = random.Random(seed)
        self.heap: list[tuple[float, int, int]] = []  # (release time, arrival order, id)
        self.seq = 0
        self.stats = {"packets": 0, "dropped_loss": 0, "dropped_limit": 0}
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))

    def _request(self, kind: int, attrs: bytes) -> None:
        self.seq += 1
        self.sock.send(_msg(kind, self.queue, attrs, NLM_F_REQUEST | NLM_F_ACK, self.seq))
        while True:
            data = self.sock.recv(65536)
            _, mtype, _, seq, _ = _HDR.unpack_from(data)
            if mtype == NLMSG_ERROR and seq == self.seq:
                err = -struct.unpack_from("=i", data, _HDR.size)[0]
                if err:
                    raise OSError(err, f"nfnetlink_queue {self.queue}: {os.strerror(err)}")
                return

    def bind(self) -> None:
        self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("!BxH",
                                                                          NFQNL_CFG_CMD_BIND, 0)))
        self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0,
                                                                             NFQNL_COPY_META))
                      + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", self.limit * 4)))
        self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO))
                      + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO)))

    def verdict(self, packet_id: int, verdict: int) -> None:
        self.sock.send(_msg(NFQNL_MSG_VERDICT, self.queue,
                            _attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id)),
                            NLM_F_REQUEST, 0))

    def sample(self) -> float | None:
        """This packet's delay in seconds, or None: lost."""
        if self.loss and self.rng.random() < self.loss:
            return None
        return max(0.0, self.delay + self.rng.uniform(-self.jitter, self.jitter))

    def arrive(self, packet_id: int, now: float) -> None:
        self.stats["packets"] += 1
        delay = self.sample()
        if delay is None:
            self.stats["dropped_loss"] += 1
            self.verdict(packet_id, NF_DROP)
        elif len(self.heap) >= self.limit:
            self.stats["dropped_limit"] += 1
            self.verdict(packet_id, NF_DROP)
        elif delay == 0:
            self.verdict(packet_id, NF_ACCEPT)
        else:
            heapq.heappush(self.heap, (now + delay, self.stats["packets"], packet_id))

    def release(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            self.verdict(heapq.heappop(self.heap)[2], NF_ACCEPT)

    def handle(self, data: bytes, now: float) -> None:
        i = 0
        while i + _HDR.size <= len(data):
            n, mtype, _, _, _ = _HDR.unpack_from(data, i)
            if n < _HDR.size:
                break
            if mtype == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                hdr = _attrs(data[i + _HDR.size + 4:i + n]).get(NFQA_PACKET_HDR)
                if hdr is not None and len(hdr) >= 4:
                    self.arrive(struct.unpack_from("!I", hdr)[0], now)
            i += (n + 3) & ~3

    def loop(self, stop: list[bool]) -> None:
        while not stop[0]:
            now = time.monotonic()
            self.release(now)
            wait = min(1.0, max(0.0, self.heap[0][0] - now)) if self.heap else 1.0
            try:
                ready, _, _ = select.select([self.sock], [], [], wait)
            except InterruptedError:
                continue
            if ready:
                try:
                    data = self.sock.recv(1 << 17)
                except OSError as exc:  # ENOBUFS: the kernel dropped queue messages
                    print(f"{NAME}: {exc}", file=sys.stderr)
                    continue
                self.handle(data, time.monotonic())
        for _, _, pid in self.heap:  # let what waits through on the way out
            self.verdict(pid, NF_ACCEPT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--loss-pct", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=NETEM_LIMIT)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--tag", default="", help="who this runs for (the lab host's namespace)")
    ap.add_argument("--ready", default=None, help="write 'ready' here once bound")
    args = ap.parse_args(argv)
    shaper = Shaper(args.queue, args.delay_ms, args.jitter_ms, args.loss_pct, args.limit,
                    args.seed)
    shaper.bind()
    stop = [False]

    def _stop(_sig: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready:
        with open(args.ready, "w") as fh:
            fh.write("ready\n")
    shaper.loop(stop)
    print(f"{NAME} {args.tag}: {shaper.stats}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
