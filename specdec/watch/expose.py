"""The watch's verdicts and estimates in Prometheus' text exposition format (0.0.4), served by
``specdec watch --serve ADDR`` on the control node and/or written to ``--textfile FILE`` for a
node_exporter textfile collector. Every figure is device time (``specdec_watch_time_scale`` says
when a host is the lab's emulator). The exposition names the fleet's hosts and what they run:
it listens on loopback unless given a bearer token (``--serve-token-file``), which every request
must then carry (Prometheus' ``authorization`` / ``bearer_token_file``)."""

from __future__ import annotations

import hmac
import http.server
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specdec.watch.verdict import VERDICTS

__all__ = ["CODES", "Exposition", "render", "write_textfile"]

# specdec_watch_verdict_code: one number per verdict, for Grafana's state timeline
CODES = {"no traffic": 0, "not paying": 1, "marginal": 2, "paying": 3, "favourable": 4,
         "cannot tell": 5}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_GAUGES: tuple[tuple[str, str, Any], ...] = (
    ("specdec_watch_up", "1 when every source of the host answered in the last window",
     lambda r: 1.0 if r.get("status") == "ok" else 0.0),
    ("specdec_watch_speculation_on", "1 when the running release speculates",
     lambda r: None if r.get("speculative") is None else float(bool(r["speculative"]))),
    ("specdec_watch_verdict_code", "the verdict as a number: " + ", ".join(
        f"{v}={c}" for v, c in CODES.items()), lambda r: CODES.get(str(r.get("verdict")))),
    ("specdec_watch_live_acceptance_length", "acceptance length over the sliding window",
     lambda r: r.get("live_al")),
    ("specdec_watch_gate_acceptance_length", "acceptance length the gate measured",
     lambda r: r.get("gate_al")),
    ("specdec_watch_estimated_speedup", "estimated live speed-up (1 = none) at the batch "
     "sizes served", lambda r: None if r.get("est_gain") is None else 1 + r["est_gain"]),
    ("specdec_watch_estimated_speedup_lower", "lower bound of the estimate (the gate's z)",
     lambda r: _plus1((r.get("est_gain_ci") or [None, None])[0])),
    ("specdec_watch_estimated_speedup_upper", "upper bound of the estimate (the gate's z)",
     lambda r: _plus1((r.get("est_gain_ci") or [None, None])[1])),
    ("specdec_watch_gate_speedup_c1", "c=1 throughput ratio the gate measured",
     lambda r: _plus1(r.get("gate_gain_c1"))),
    ("specdec_watch_tokens_per_second", "tokens generated per device second (window)",
     lambda r: r.get("tokens_per_s")),
    ("specdec_watch_requests_per_second", "requests finished per device second (window)",
     lambda r: r.get("requests_per_s")),
    ("specdec_watch_mean_batch", "mean requests running while busy (window)",
     lambda r: (r.get("window") or {}).get("mean_batch")),
    ("specdec_watch_window_drafted_tokens", "draft tokens in the sliding window",
     lambda r: (r.get("window") or {}).get("draft_tokens")),
    ("specdec_watch_decision_age_seconds", "seconds since the gate's decision",
     lambda r: r.get("decision_age_s")),
    ("specdec_watch_reverify_marked", "1 when the host is marked for re-verification",
     lambda r: float(bool(r.get("marked")))),
    ("specdec_watch_keep_level", "the gate's keep level as a speed-up (1 + keep gain)",
     lambda r: r.get("keep_level")),
    ("specdec_watch_floor_level", "the gate's disable level as a speed-up (1 + min gain)",
     lambda r: r.get("floor_level")),
    ("specdec_watch_time_scale", "the lab emulator's wall seconds per device second",
     lambda r: (r.get("device_time") or {}).get("time_scale")),
)


def _plus1(x: Any) -> float | None:
    return None if x is None else 1.0 + float(x)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(d: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(str(v))}"' for k, v in d.items()) + "}"


def _fmt(v: float) -> str:
    return repr(float(v))


def render(rows: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    """The exposition of every row (host or group)."""
    out: list[str] = []
    base = [({"host": str(r["host"])}, r) for r in rows]
    for name, doc, get in _GAUGES:
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        for lab, r in base:
            v = get(r)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                extra = {"decision": str(r.get("decision"))} if name.endswith("age_seconds") \
                    else {}
                out.append(f"{name}{_labels({**lab, **extra})} {_fmt(v)}")
    out += ["# HELP specdec_watch_verdict the verdict (1 for the current one)",
            "# TYPE specdec_watch_verdict gauge"]
    for lab, r in base:
        for v in VERDICTS:
            out.append(f"specdec_watch_verdict{_labels({**lab, 'verdict': v})} "
                       f"{1.0 if r.get('verdict') == v else 0.0}")
    out += ["# HELP specdec_watch_verdict_changes_total verdict changes since watching began",
            "# TYPE specdec_watch_verdict_changes_total counter"]
    for lab, r in base:
        out.append(f"specdec_watch_verdict_changes_total{_labels(lab)} "
                   f"{float(r.get('verdict_changes') or 0)}")
    out += ["# HELP specdec_watch_last_update_timestamp_seconds when the watch last looked",
            "# TYPE specdec_watch_last_update_timestamp_seconds gauge",
            f"specdec_watch_last_update_timestamp_seconds {_fmt(now or time.time())}"]
    return "\n".join(out) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Atomically (node_exporter's textfile collector reads ``*.prom`` at any moment)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


class Exposition:
    """``GET /metrics`` on the control node (the latest `render`); with ``token``, only for
    ``Authorization: Bearer <token>`` (else 401)."""

    def __init__(self, address: tuple[str, int], token: str | None = None) -> None:
        self.text = render([])
        exposition = self
        want = f"Bearer {token}".encode() if token else None

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                got = (self.headers.get("Authorization") or "").encode()
                if want is not None and not hmac.compare_digest(got, want):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Bearer")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = exposition.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(address, Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def update(self, text: str) -> None:
        self.text = text

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
