"""`specdec watch` on the host: reads the engine's own counters on the host and prints one JSON
line per window. Standard library only, Python 3.8+, nothing written on the host, no port opened:
the control node runs it over SSH as ``python3 -I -c <this file> `` (`specdec.watch.ssh`).

Protocol (one line each, JSON): it first prints ``{"hello": {...}}`` (the running release's
``plan.json``, ``current``, whether a deploy holds the host); then reads one config line on stdin
(``sources``: where and what to read, as `specdec.engines.base.MetricsSource` says; ``window``
and ``poll`` in seconds; ``windows``, 0 for no end; ``follow``: exit when stdin closes, i.e. when
the control node or its SSH session is gone); then prints a ``{"w": {...}}`` line per window:
per source the counter deltas over the window (a counter that fell means the engine restarted:
the delta counts from zero and ``restart`` is set), the time-weighted histogram of the batch
gauge (seconds per value), the mean of the waiting gauge, for drained JSON iteration stats the
iterations missed (gaps in ``iter``); and its own CPU seconds. While the deploy lock or the
guard's pending marker is there it reads nothing (a deploy benchmarks the engine; TRT-LLM's
iteration stats drain on read and must have one reader).
"""

import json
import math
import os
import re
import sys
import threading
import time
import urllib.request

STATE = sys.argv[1] if len(sys.argv) > 1 else "/var/lib/specdec"  # tests give another
BUSY = ("deploy.lock", "pending")
MAX_BODY = 16 * 1024 * 1024
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def _get(url, timeout=5.0):
    req = urllib.request.Request(url, headers={"Accept": "*/*"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback http
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}")
        body = resp.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise OSError(f"response over {MAX_BODY} bytes")
    return body.decode("utf-8", "replace")


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def prometheus_values(text, names):
    """Sum of each wanted sample name over its label sets (malformed lines skipped)."""
    out = {}  # type: dict[str, float]
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in names:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(v):
            out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def _path(entry, path):
    v = entry
    for key in path.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(key)
    return v if _finite(v) else None


def _value(entry, expr):
    total = 1.0
    for part in expr.split("*"):
        v = _path(entry, part)
        if v is None:
            return None
        total *= v
    return total


class Source:
    def __init__(self, cfg):
        self.role = cfg["role"]
        self.url = cfg["url"]
        self.format = cfg["format"]
        self.counters = [tuple(x) for x in cfg["counters"]]
        self.gauges = dict(tuple(x) for x in cfg.get("gauges", []))
        self.weight = cfg.get("weight")
        self.truth = cfg.get("truth_url")
        self.last = None  # prometheus: cumulative values at the last poll
        self.last_iter = None
        self.last_t = None
        self.reset()

    def reset(self):
        self.d = {k: 0.0 for k, _ in self.counters}
        self.busy, self.wait_s, self.gauge_s = {}, 0.0, 0.0
        self.polls = self.fails = self.missed = 0
        self.restart, self.err = False, None

    def _gauge(self, running, waiting, dt):
        if running is None or dt <= 0:
            return
        key = str(int(round(max(0.0, running))))
        self.busy[key] = self.busy.get(key, 0.0) + dt
        self.wait_s += (waiting or 0.0) * dt
        self.gauge_s += dt

    def poll(self, now):
        try:
            text = _get(self.url)
        except Exception as exc:  # noqa: BLE001 - any failure is one counted error
            self.fails += 1
            self.err = f"{type(exc).__name__}: {exc}"[:160]
            self.last_t = None
            return False
        self.polls += 1
        if self.format == "prometheus":
            self._prometheus(text, now)
        else:
            self._iterations(text)
        return True

    def _prometheus(self, text, now):
        names = {n for _, n in self.counters} | set(self.gauges.values())
        vals = prometheus_values(text, names)
        cum = {k: vals.get(n, 0.0) for k, n in self.counters}
        if self.last is not None:
            fell = any(cum[k] < self.last[k] for k in cum)
            self.restart = self.restart or fell
            for k in cum:
                self.d[k] += cum[k] if fell else cum[k] - self.last[k]
        self.last = cum
        run, wait = self.gauges.get("running"), self.gauges.get("waiting")
        if self.last_t is not None and run in vals:
            self._gauge(vals[run], vals.get(wait) if wait else None, now - self.last_t)
        self.last_t = now

    def _iterations(self, text):
        try:
            entries = json.loads(text)
        except ValueError:
            self.err = "the iteration stats are not JSON"
            return
        prime = self.last_iter is None
        for it in entries if isinstance(entries, list) else []:
            if isinstance(it, str):
                try:
                    it = json.loads(it)
                except ValueError:
                    continue
            if not isinstance(it, dict):
                continue
            n = it.get("iter")
            if _finite(n):
                if self.last_iter is not None and n <= self.last_iter:
                    self.restart = True
                elif self.last_iter is not None and n > self.last_iter + 1:
                    self.missed += int(n - self.last_iter - 1)
                self.last_iter = n
            if prime:  # from before this reader: remembered, not counted
                continue
            for k, expr in self.counters:
                v = _value(it, expr)
                if v is not None:
                    self.d[k] += v
            w = _value(it, self.weight) if self.weight else None
            run = _value(it, self.gauges["running"]) if "running" in self.gauges else None
            wait = _value(it, self.gauges["waiting"]) if "waiting" in self.gauges else None
            if w is not None:
                self._gauge(run, wait, w / 1000.0)
        if prime and self.last_iter is None:
            self.last_iter = -1

    def report(self):
        out = {"role": self.role, "ok": self.polls > 0, "polls": self.polls,
               "fails": self.fails, "err": self.err, "d": self.d, "busy": self.busy,
               "waiting": self.wait_s / self.gauge_s if self.gauge_s > 0 else None,
               "gauge_s": self.gauge_s, "restart": self.restart, "missed": self.missed}
        self.reset()
        return out


def _state():
    try:
        current = os.path.basename(os.readlink(STATE + "/current"))
    except OSError:
        current = None
    busy = any(os.path.exists(STATE + "/" + f) for f in BUSY)
    return current, busy


def _plan():
    try:
        with open(STATE + "/current/plan.json") as fh:
            doc = json.loads(fh.read(1024 * 1024))
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _truth(sources):
    for s in sources:
        if s.truth:
            try:
                scale = json.loads(_get(s.truth, 3.0)).get("time_scale")
            except Exception:  # noqa: BLE001 - a real engine has no /lab/truth
                continue
            if _finite(scale) and scale > 0:
                return scale
    return None


def _emit(doc):
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _watch_stdin(stop):
    try:
        while sys.stdin.readline():
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def main():
    current, busy = _state()
    _emit({"hello": {"plan": _plan(), "current": current, "busy": busy,
                     "python": "{}.{}".format(*sys.version_info[:2])}})
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    cfg = json.loads(line)
    sources = [Source(s) for s in cfg["sources"]]
    window, poll = float(cfg["window"]), float(cfg["poll"])
    stop = threading.Event()
    if cfg.get("follow"):
        threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    scale = _truth(sources)
    seq = 0
    while not stop.is_set():
        start = time.monotonic()
        end = start + window
        locked = False
        while not stop.is_set():
            now = time.monotonic()
            cur, busy = _state()
            if cur != current:
                break
            if busy:
                locked = True
                for s in sources:
                    s.last_t = None
            else:
                for s in sources:
                    s.poll(now)
            if now >= end:
                break
            stop.wait(max(0.0, min(poll, end - time.monotonic())))
        seq += 1
        cur, busy = _state()
        _emit({"w": {"seq": seq, "t": time.time(), "span": time.monotonic() - start,
                     "cpu": time.process_time(), "current": cur, "busy": busy or locked,
                     "time_scale": scale, "src": [s.report() for s in sources]}})
        if cur != current or (cfg.get("windows") and seq >= int(cfg["windows"])):
            break
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(0)
