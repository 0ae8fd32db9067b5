"""``specdec watch``: a reader per host over SSH (`specdec.watch.ssh`), their windows into each
host's (and serving group's) `Monitor`, a look every interval: the table or JSON, the watch file,
the exposition.

Continuous (default): one SSH session per host for as long as the watch runs, a reader window
per ``interval``; a session that ends (host down, release switched, SSH cut) is started again
after a back-off (5 s doubling to 60 s), and the host's row says why meanwhile. ``--once``: one
window per host, in parallel, merged with the window the watch file kept, then one look.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specdec.engines.registry import engine_of
from specdec.errors import SpecdecError, one_line
from specdec.plan.types import GatePolicy, Group
from specdec.report.fleet import latest_run, write_fleet
from specdec.watch import store
from specdec.watch.gatefacts import gate_facts, load_gate_report
from specdec.watch.monitor import Monitor, Running
from specdec.watch.running import plan_from_json, time_scale
from specdec.watch.ssh import Connection, Session
from specdec.watch.verdict import Levels, Tracker
from specdec.watch.window import clean, parse_sample

__all__ = ["Options", "Target", "Watch", "reader_config"]

BACKOFF = (5.0, 10.0, 20.0, 40.0, 60.0)
_RELEASE = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a release id as `current` names it


@dataclass(frozen=True)
class Target:
    host: str
    conn: Connection
    policy: GatePolicy
    action: str = "report"
    group: Group | None = None


@dataclass(frozen=True)
class Options:
    interval_s: float = 10.0  # wall seconds per reader window (and per look)
    window_s: float = 600.0  # the sliding window, device seconds
    min_draft_tokens: float = 2000.0
    confirm: int = 2
    once: bool = False
    reports: Path = Path("reports")
    state: Path | None = None  # the inventory's state: where reverify marks go (None: none)
    poll_s: float | None = None  # reader poll period, wall (default: interval/4, 0.25..1 s)
    refresh_html: bool = True

    @property
    def poll(self) -> float:
        return self.poll_s or max(0.25, min(1.0, self.interval_s / 4))


def reader_config(plan: Any, opts: Options, windows: int) -> dict[str, Any]:
    """The on-host reader's config for what ``plan`` runs (`Engine.metrics_sources`)."""
    sources = []
    for s in engine_of(plan).metrics_sources(plan):
        host = f"[{s.address}]" if ":" in s.address else s.address
        url = f"http://{host}:{s.port}"
        sources.append({"role": s.role, "url": url + s.path, "format": s.format,
                        "counters": [list(c) for c in s.counters],
                        "gauges": [list(g) for g in s.gauges], "weight": s.weight,
                        "truth_url": url + "/lab/truth" if s.truth else None})
    return {"sources": sources, "window": opts.interval_s, "poll": opts.poll,
            "windows": windows, "follow": windows == 0}


@dataclass
class _Event:
    host: str
    kind: str  # hello | sample | down
    data: Any = None
    t: float = field(default_factory=time.time)


class Watch:
    def __init__(self, targets: Sequence[Target], opts: Options,
                 emit: Callable[[list[dict[str, Any]]], None],
                 session: Callable[[Connection], Any] = Session) -> None:
        self.targets = {t.host: t for t in targets}
        self.opts = opts
        self.emit = emit
        self.session = session
        self.events: queue.Queue[_Event] = queue.Queue()
        self.stop = threading.Event()
        self.monitors: dict[str, Monitor] = {}
        self.sessions: dict[str, Any] = {}
        self.stamps: dict[str, float | None] = {}  # the deciding reports' mtimes
        self.scales: dict[str, float | None] = {}
        for t in targets:
            lv = Levels.of(t.policy, opts.confirm, opts.min_draft_tokens)
            self.monitors[t.host] = Monitor(t.host, (t.host,), t.policy, lv, opts.window_s,
                                            action="report" if t.group else t.action)
            if t.group is not None and f"group:{t.group.name}" not in self.monitors:
                members = tuple(m for m in t.group.members if m in self.targets)
                self.monitors[f"group:{t.group.name}"] = Monitor(
                    f"group:{t.group.name}", members, t.policy, lv, opts.window_s,
                    action=t.action)
        self._restore(store.load(opts.reports))

    # -- the watch file ----------------------------------------------------------------------
    def _restore(self, doc: Mapping[str, Any]) -> None:
        hosts = doc.get("hosts") or {}
        for name, mon in self.monitors.items():
            saved = hosts.get(name) if isinstance(hosts, Mapping) else None
            if not isinstance(saved, Mapping) or saved.get("window_s") != self.opts.window_s:
                continue
            mon.tracker = Tracker.from_dict(saved.get("verdict"))
            for member, rows in (saved.get("samples") or {}).items():
                for raw in rows if member in mon.members else []:
                    if (s := store.sample_from(raw)) is not None:
                        mon.window(member).add(s)
            running = saved.get("running") or {}
            for member in mon.members:
                r = running.get(member)
                if isinstance(r, Mapping) and isinstance(r.get("method"), str):
                    mon.running[member] = Running(r.get("release"), r["method"],
                                                  int(r.get("k") or 0), str(r.get("engine")),
                                                  r.get("time_scale"),
                                                  tuple(r.get("caveats") or ()))

    def _doc(self) -> dict[str, Any]:
        hosts = {}
        for name, mon in self.monitors.items():
            hosts[name] = {
                "row": mon.row(), "verdict": mon.tracker.to_dict(),
                "window_s": self.opts.window_s,
                "running": {m: vars(r) for m, r in mon.running.items()},
                "samples": {m: [store.sample_to(s) for s in mon.window(m).samples]
                            for m in mon.members}}
        return {"updated_at": datetime.now(UTC).isoformat(timespec="seconds"), "hosts": hosts}

    # -- a host's reader ---------------------------------------------------------------------
    def _feed(self, t: Target, windows: int) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                sess = self.sessions[t.host] = self.session(t.conn)
                try:
                    hello = sess.hello()
                    self.events.put(_Event(t.host, "hello", hello))
                    plan = plan_from_json(hello.get("plan"), t.host) \
                        if hello.get("plan") is not None else None
                    if plan is None:
                        raise OSError("no release is current on the host (not deployed)")
                    sess.configure(reader_config(plan, self.opts, windows))
                    for w in sess.lines():
                        failures = 0
                        self.events.put(_Event(t.host, "sample", w))
                        if self.stop.is_set():
                            break
                finally:
                    sess.close()
            except (OSError, SpecdecError, ValueError) as exc:
                failures += 1
                self.events.put(_Event(t.host, "down", clean(one_line(str(exc)), 300)))
            if windows:
                self.events.put(_Event(t.host, "done"))
                return
            self.stop.wait(BACKOFF[min(failures, len(BACKOFF) - 1)] if failures else 0.5)

    # -- events ------------------------------------------------------------------------------
    def _monitors_of(self, host: str) -> list[Monitor]:
        t = self.targets[host]
        out = [self.monitors[host]]
        if t.group is not None:
            out.append(self.monitors[f"group:{t.group.name}"])
        return out

    def _gate(self, host: str) -> None:
        """The host's deciding report, read again when the deploy wrote a new one."""
        found = load_gate_report(self.opts.reports, host, self.opts.state)
        stamp = None
        if found is not None:
            with contextlib.suppress(OSError):
                stamp = found[1].stat().st_mtime
        if found is None or self.stamps.get(host) == stamp:
            return
        self.stamps[host] = stamp
        pol = self.targets[host].policy
        gate = gate_facts(found[0], found[1], (pol.keep_concurrency, pol.guard_concurrency))
        for mon in self._monitors_of(host):
            if mon.gate is None or host == mon.members[0]:
                mon.gate = gate

    def _on_hello(self, host: str, hello: Mapping[str, Any]) -> None:
        try:
            plan = plan_from_json(hello.get("plan"), host) if hello.get("plan") else None
        except SpecdecError:
            plan = None
        if plan is None:
            return
        caveats = tuple(s.caveat for s in engine_of(plan).metrics_sources(plan) if s.caveat)
        scale = time_scale(plan)
        self.scales[host] = scale
        current = hello.get("current")
        release = current if isinstance(current, str) and _RELEASE.fullmatch(current) else None
        run = Running(release, plan.method, plan.num_speculative_tokens,
                      plan.engine, scale, caveats)
        for mon in self._monitors_of(host):
            mon.set_running(host, run)
        self.stamps.pop(host, None)
        self._gate(host)

    def _on_sample(self, host: str, w: Mapping[str, Any], t: float) -> None:
        truth = w.get("time_scale")
        scale = truth if isinstance(truth, int | float) and truth > 0 else self.scales.get(host)
        s = parse_sample(w, t, scale)
        cpu = w.get("cpu") if isinstance(w.get("cpu"), int | float) else None
        for mon in self._monitors_of(host):  # a restart of the same release: its samples hold
            mon.add(host, s, cpu)
            mon.status[host] = "deploying" if s.deploying else "ok" if s.ok else \
                ("; ".join(s.errors) or "no engine source answered")
        run = self.monitors[host].running.get(host)
        if run is not None and run.release is not None and w.get("current") != run.release:
            for mon in self._monitors_of(host):
                mon.status[host] = "release switched; reading again"

    def _handle(self, ev: _Event) -> None:
        if ev.kind == "hello":
            self._on_hello(ev.host, ev.data)
        elif ev.kind == "sample":
            self._on_sample(ev.host, ev.data, ev.t)
        elif ev.kind == "down":
            for mon in self._monitors_of(ev.host):
                mon.status[ev.host] = f"not read: {ev.data}"

    # -- looks -------------------------------------------------------------------------------
    def look(self) -> list[dict[str, Any]]:
        now = time.time()
        rows = []
        for host in self.targets:
            if host in self.stamps:
                self._gate(host)
        with store.locked(self.opts.reports):
            for mon in self.monitors.values():
                mon.look(now, self.opts.state)
                rows.append(mon.row(now))
            store.save(self.opts.reports, self._doc())
        if self.opts.refresh_html:
            with contextlib.suppress(SpecdecError, OSError):  # no run yet: no page
                write_fleet(latest_run(self.opts.reports))
        return rows

    def run(self, duration_s: float | None = None) -> list[dict[str, Any]]:
        windows = 1 if self.opts.once else 0
        threads = [threading.Thread(target=self._feed, args=(t, windows), daemon=True,
                                    name=f"watch-{t.host}") for t in self.targets.values()]
        for th in threads:
            th.start()
        end = None if duration_s is None else time.monotonic() + duration_s
        rows: list[dict[str, Any]] = []
        try:
            if self.opts.once:
                done = 0
                while done < len(threads):
                    ev = self.events.get()
                    done += ev.kind == "done"
                    self._handle(ev)
                rows = self.look()
                self.emit(rows)
                return rows
            next_look = time.monotonic() + self.opts.interval_s
            while end is None or time.monotonic() < end:
                try:
                    ev = self.events.get(timeout=max(0.05, next_look - time.monotonic()))
                    self._handle(ev)
                except queue.Empty:
                    pass
                if time.monotonic() >= next_look:
                    rows = self.look()
                    self.emit(rows)
                    next_look += self.opts.interval_s
        finally:
            self.stop.set()
            for sess in list(self.sessions.values()):
                sess.close()
        return rows


def rows_json(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps({"hosts": list(rows)}, sort_keys=True, default=str)
