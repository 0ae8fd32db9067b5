"""The scheduler thread: drives `EngineCore` in real time.

One thread runs engine steps back to back. Each step's physical duration (from the timing model,
times the ``slowdown`` fault factor) is multiplied by the time scale and slept, against absolute
deadlines so Python overhead between steps is absorbed instead of accumulating. When the step's
time is up, every sequence's new tokens are handed to its HTTP handler at once (one SSE chunk per
engine step). Requests that arrive meanwhile join the next step (continuous batching).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from specdec_lab.emulator.core import EngineCore, SeqOutput, SeqRequest, StepResult
from specdec_lab.emulator.faults import Faults

__all__ = ["SHUTDOWN", "Scheduler", "Sink"]

SHUTDOWN = None
Sink = queue.Queue  # items: (SeqOutput, publish perf_counter) or SHUTDOWN
StepHook = Callable[[StepResult, float, float], None]  # (result, wall seconds, publish time)


class Scheduler:
    def __init__(self, core: EngineCore, *, time_scale: float, faults: Faults,
                 on_step: StepHook | None = None,
                 on_idle: Callable[[], None] | None = None,
                 fault_counter: Callable[[], int] | None = None) -> None:
        self.core = core
        self.time_scale = time_scale
        self.faults = faults
        self.on_step = on_step
        self.on_idle = on_idle
        self.completed = 0  # finished sequences
        # what hang_after/slowdown count: answered requests (the server's), else sequences
        self._fault_counter = fault_counter
        self._cv = threading.Condition()
        self._sinks: dict[int, Sink] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-core", daemon=True)

    # -- API for handlers -----------------------------------------------------------------------
    def submit(self, reqs: list[SeqRequest], sink: Sink) -> list[int]:
        with self._cv:
            ids = [self.core.add(r) for r in reqs]
            for i in ids:
                self._sinks[i] = sink
            self._cv.notify()
        return ids

    def abort(self, ids: list[int]) -> None:
        with self._cv:
            for i in ids:
                self.core.abort(i)
                self._sinks.pop(i, None)

    def counts(self) -> tuple[int, int]:
        with self._cv:
            return len(self.core.running), len(self.core.waiting)

    @property
    def fault_count(self) -> int:
        return self._fault_counter() if self._fault_counter is not None else self.completed

    @property
    def hung(self) -> bool:
        return self.faults.hung(self.fault_count)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
            sinks = set(map(id, self._sinks.values()))
            for s in list(self._sinks.values()):
                if id(s) in sinks:
                    s.put(SHUTDOWN)
                    sinks.discard(id(s))
            self._sinks.clear()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self) -> None:
        prev_end: float | None = None
        while not self._stop.is_set():
            with self._cv:
                while not self._stop.is_set() and (not self.core.has_work() or self.hung):
                    prev_end = None
                    self._cv.wait(0.5)
                    if self.on_idle is not None:
                        self.on_idle()
                if self._stop.is_set():
                    return
                res = self.core.step()
            if res is None:
                continue
            wall = res.duration_s * self.faults.step_factor(self.fault_count) * self.time_scale
            now = time.perf_counter()
            end = now + wall if prev_end is None else max(prev_end + wall, now)
            while True:
                left = end - time.perf_counter()
                if left <= 0 or self._stop.wait(left):
                    break
            if self._stop.is_set():
                return
            prev_end = end
            published = time.perf_counter()
            self._publish(res.outputs, published)
            if self.on_step is not None:
                self.on_step(res, wall, published)

    def _publish(self, outputs: tuple[SeqOutput, ...], t: float) -> None:
        with self._cv:
            for out in outputs:
                sink = self._sinks.get(out.seq_id)
                if out.finished:
                    self._sinks.pop(out.seq_id, None)
                    self.completed += 1
                if sink is not None:
                    sink.put((out, t))
