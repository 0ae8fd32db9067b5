"""The on-host reader (`specdec.watch.reader`) as the host runs it: ``python3 -I -c`` (and the
oldest Python it supports, 3.8, when one is installed), against servers on loopback that answer
like vLLM (Prometheus text) and trtllm-serve (draining JSON iteration stats), hostile ones too."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec.engines.trtllm.metrics import COUNTERS as TRT_COUNTERS
from specdec.engines.trtllm.metrics import GAUGES as TRT_GAUGES
from specdec.engines.vllm.metrics import COUNTERS, GAUGES
from specdec.watch.ssh import reader_code


class Fake:
    """A loopback server whose ``/metrics`` body is whatever the test puts in ``bodies``
    (one per GET, the last repeated)."""

    def __init__(self) -> None:
        self.bodies: list[str] = ["# nothing\n"]
        self.gets = 0
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/lab/truth":
                    body = json.dumps({"time_scale": 0.5}).encode()
                else:
                    i = min(fake.gets, len(fake.bodies) - 1)
                    fake.gets += 1
                    body = fake.bodies[i].encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.close()


def _pythons() -> list[str]:
    found = [sys.executable]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # a pyenv-installed 3.8 first (pyenv's shim on PATH needs PYENV_VERSION to run it)
    old = [*sorted(str(p) for p in (root / "versions").glob("3.8*/bin/python3.8")),
           shutil.which("python3.8")]
    return found + [p for p in old if p][:1]


def _state(tmp: Path, plan: dict[str, Any] | None = None) -> Path:
    state = tmp / "state"
    rel = state / "releases" / "r1"
    rel.mkdir(parents=True)
    (rel / "plan.json").write_text(json.dumps(plan or {"engine": "vllm"}))
    os.symlink("releases/r1", state / "current")
    return state


def _run(py: str, state: Path, cfg: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    proc = subprocess.run([py, "-I", "-c", reader_code(), str(state)],
                          input=json.dumps(cfg) + "\n", capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    return lines[0]["hello"], [x["w"] for x in lines[1:]]


def _vllm(drafts: float, accepted: float, gen: float, running: int, extra: str = "") -> str:
    return (
        "# HELP vllm:spec_decode_num_drafts_total x\n# TYPE vllm:spec_decode_num_drafts_total "
        "counter\n"
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}\n'
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {drafts * 4}\n'
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}\n'
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}\n'
        f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 3\n'
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 4\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} 1\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9\n' + extra)


def _cfg(fake: Fake, fmt: str = "prometheus", windows: int = 1, window: float = 0.6) -> dict:
    counters, gauges = (COUNTERS, GAUGES) if fmt == "prometheus" else (TRT_COUNTERS, TRT_GAUGES)
    return {"sources": [{"role": "engine", "url": fake.url + "/metrics", "format": fmt,
                         "counters": counters, "gauges": gauges,
                         "weight": None if fmt == "prometheus" else "iterLatencyMS",
                         "truth_url": fake.url + "/lab/truth"}],
            "window": window, "poll": 0.05, "windows": windows, "follow": False}


@pytest.mark.parametrize("py", _pythons())
def test_prometheus_deltas_gauges_and_truth(py: str, fake: Fake, tmp_path: Path) -> None:
    fake.bodies = [_vllm(100, 150, 1000, 2), _vllm(110, 160, 1040, 2),
                   _vllm(130, 190, 1100, 3, "garbage line {{{\nvllm:generation_tokens_total "
                                             "NaN\n")]
    hello, wins = _run(py, _state(tmp_path), _cfg(fake))
    assert hello["current"] == "r1" and hello["plan"] == {"engine": "vllm"}
    assert hello["busy"] is False
    [w] = wins
    src = w["src"][0]
    assert src["ok"] and src["fails"] == 0 and src["restart"] is False
    # deltas from the first poll on; the NaN sample and the malformed line are skipped
    assert src["d"]["drafts"] == 30 and src["d"]["accepted"] == 40
    assert src["d"]["generated"] == 100 and src["d"]["requests"] == 0
    assert set(src["busy"]) <= {"2", "3"} and sum(src["busy"].values()) > 0
    assert src["waiting"] == pytest.approx(1.0)
    assert w["time_scale"] == 0.5 and w["current"] == "r1"


def test_a_counter_that_falls_is_a_restart(fake: Fake, tmp_path: Path) -> None:
    fake.bodies = [_vllm(100, 150, 1000, 1), _vllm(5, 7, 40, 1)]
    _, [w] = _run(sys.executable, _state(tmp_path), _cfg(fake))
    src = w["src"][0]
    assert src["restart"] is True
    assert src["d"]["drafts"] == 5 and src["d"]["generated"] == 40  # counted from zero


def _iters(first: int, n: int, gen: int = 2, skip: int = 0) -> str:
    out = []
    for i in range(first, first + n):
        out.append({"iter": i + (skip if i > first else 0), "iterLatencyMS": 20.0,
                    "numQueuedRequests": 1, "numCompletedRequests": 1,
                    "inflightBatchingStats": {"numGenRequests": gen,
                                              "avgNumDecodedTokensPerIter": 2.5},
                    "specDecodingStats": {"numDraftTokens": 6, "numAcceptedTokens": 3,
                                          "numRequestsWithDraftTokens": gen}})
    # some TRT-LLM versions send each entry as a JSON string
    return json.dumps([json.dumps(x) if i % 2 else x for i, x in enumerate(out)])


def test_trtllm_iterations_drain_prime_and_gaps(fake: Fake, tmp_path: Path) -> None:
    # first read: iterations from before the reader (remembered, not counted); then 4 new;
    # then 3 more after a gap of 5 lost iterations; then nothing (drained)
    fake.bodies = [_iters(0, 10), _iters(10, 4), _iters(14, 3, skip=5), "[]"]
    _, [w] = _run(sys.executable, _state(tmp_path), _cfg(fake, "json-iterations"))
    src = w["src"][0]
    assert src["d"]["drafts"] == 14 and src["d"]["accepted"] == 21
    assert src["d"]["steps"] == 14 and src["d"]["generated"] == pytest.approx(35.0)
    assert src["missed"] == 5 and src["restart"] is False
    assert src["busy"] == {"2": pytest.approx(7 * 0.02)}


def test_nothing_is_read_while_a_deploy_holds_the_host(fake: Fake, tmp_path: Path) -> None:
    state = _state(tmp_path)
    (state / "deploy.lock").mkdir()
    fake.bodies = [_iters(0, 3)]
    hello, [w] = _run(sys.executable, state, _cfg(fake, "json-iterations"))
    assert hello["busy"] is True and w["busy"] is True
    assert fake.gets == 0  # TRT-LLM's stats drain: a benchmark running now keeps them


def test_unreachable_source_is_counted_not_fatal(tmp_path: Path) -> None:
    cfg = {"sources": [{"role": "engine", "url": "http://127.0.0.1:9/metrics",
                        "format": "prometheus", "counters": COUNTERS, "gauges": GAUGES}],
           "window": 0.3, "poll": 0.1, "windows": 2, "follow": False}
    _, wins = _run(sys.executable, _state(tmp_path), cfg)
    assert len(wins) == 2
    assert all(not w["src"][0]["ok"] and w["src"][0]["fails"] >= 1 and w["src"][0]["err"]
               for w in wins)


def test_a_switched_release_ends_the_reader(fake: Fake, tmp_path: Path) -> None:
    state = _state(tmp_path)
    (state / "releases" / "r2").mkdir()
    fake.bodies = [_vllm(1, 1, 1, 1)]
    proc = subprocess.Popen([sys.executable, "-I", "-c", reader_code(), str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    assert json.loads(proc.stdout.readline())["hello"]["current"] == "r1"
    cfg = {**_cfg(fake, windows=0, window=5.0), "follow": True}
    proc.stdin.write(json.dumps(cfg) + "\n")
    proc.stdin.flush()
    os.unlink(state / "current")
    os.symlink("releases/r2", state / "current")
    w = json.loads(proc.stdout.readline())["w"]
    assert w["current"] == "r2"
    assert proc.wait(timeout=10) == 0  # it exits: the control node reads the new plan


def test_the_reader_exits_when_the_control_node_goes(fake: Fake, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-I", "-c", reader_code(), str(_state(tmp_path))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.readline()
    proc.stdin.write(json.dumps({**_cfg(fake, windows=0, window=30.0), "follow": True}) + "\n")
    proc.stdin.flush()
    proc.stdin.close()  # the SSH session ends
    assert proc.wait(timeout=10) == 0
