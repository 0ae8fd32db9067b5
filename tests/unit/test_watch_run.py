"""The watch end to end on this machine: the engine emulator on loopback serving real traffic,
the reader run locally as the host would run it (no SSH), the gate's figures from a report,
the verdict, the watch file, the reverify mark, the fleet report's live columns, ``--once``."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec.engines.registry import engine_of
from specdec.plan.hostdata import parse_host_settings
from specdec.plan.planner import plan_host_settings
from specdec.report.fleet import write_fleet, write_host_report
from specdec.watch import marks, store
from specdec.watch.gatefacts import gate_facts, load_gate_report
from specdec.watch.run import Options, Target, Watch
from specdec.watch.ssh import Connection, Session, reader_code
from specdec_lab.emulator.local import emulator, lab_truth, reset_truth
from specdec_lab.traffic import Traffic, run_traffic

SCALE = "0.05"
DATA = {"specdec_device": "orin-nano-8gb", "specdec_model": "Qwen/Qwen3-0.6B",
        "specdec_runtime": "native", "specdec_method": "ngram",
        "specdec_num_speculative_tokens": 6, "specdec_env": {"SPECDEC_EMU_TIME_SCALE": SCALE}}


@dataclasses.dataclass
class Host:
    url: str
    state: Path
    plan: Any


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """lab-nano's release (n-gram k=6) running in the emulator, with its plan.json as the host
    keeps it."""
    plan = plan_host_settings(parse_host_settings("lab-nano", DATA), None)
    argv = engine_of(plan).argv(plan, None)[3:]
    drop = {i for i, a in enumerate(argv) if a in ("--host", "--port")}
    argv = [a for i, a in enumerate(argv) if i not in drop and i - 1 not in drop]
    env = {"SPECDEC_EMU_DEVICE": "orin-nano-8gb", "SPECDEC_EMU_TIME_SCALE": SCALE,
           "SPECDEC_EMU_SEED": "3"}
    with emulator("vllm", plan.model, argv, env) as url:
        # the engine's own port (loopback, behind the API proxy) is where the reader reads
        plan = dataclasses.replace(plan, engine_port=int(url.rsplit(":", 1)[1]))
        state = tmp_path_factory.mktemp("host") / "specdec"
        rel = state / "releases" / "r1"
        rel.mkdir(parents=True)
        (rel / "plan.json").write_text(plan.to_json())
        os.symlink("releases/r1", state / "current")
        yield Host(url, state, plan)


def _report(root: Path, cost_c1: float, cost_c8: float, **extra: Any) -> None:
    """A deciding report as the deploy leaves it, with the tune's step cost at k=6."""
    rep = {**extra, "schema": 1, "host": "lab-nano", "outcome": "kept", "phase": "done",
           "message": "",
           "run_id": "r-1", "finished_at": "2026-11-26T10:00:00+00:00", "method": "ngram",
           "draft": None, "num_speculative_tokens": 6, "active_release": "r1",
           "candidate_release": "r1", "acceptance": {"length": 2.3}, "measurements": [],
           "baseline": {"c1": {"throughput_tok_s": 100.0}},
           "candidate": {"c1": {"throughput_tok_s": 168.0}},
           "tune": {"release": "r1", "curves": [{"method": "ngram", "draft": None, "points": [
               {"k": 6, "cost_c1": cost_c1, "cost_c8": cost_c8}]}]}}
    write_host_report(root / "r-1", rep)
    (root / "cache" / "lab-nano").mkdir(parents=True, exist_ok=True)
    (root / "cache" / "lab-nano" / "last-verified.json").write_text(json.dumps(rep))


def _watch(h: Host, root: Path, action: str = "report", once: bool = False,
           interval: float = 1.0) -> Watch:
    code = reader_code()
    policy = parse_host_settings("lab-nano", DATA).gate

    def session(conn: Connection) -> Session:
        return Session(conn, [sys.executable, "-I", "-c", code, str(h.state)])

    opts = Options(interval_s=interval, window_s=120, min_draft_tokens=300, once=once,
                   reports=root, state=root)
    t = Target("lab-nano", Connection("lab-nano", "unused"), policy, action)
    return Watch([t], opts, lambda rows: None, session=session)


def _traffic(h: Host, mix: dict[str, float], seconds: float) -> threading.Thread:
    t = Traffic(h.url, mix, rate=0.6, duration_s=seconds, max_tokens=96, seed=1)
    th = threading.Thread(target=run_traffic, args=(t,), daemon=True)
    th.start()
    return th


def test_live_figures_match_the_engine_and_code_heavy_pays(host: Host, tmp_path: Path) -> None:
    _report(tmp_path, 1.03, 1.2)
    reset_truth(host.url)
    th = _traffic(host, {"code": 0.8, "chat": 0.2}, 150)
    rows = _watch(host, tmp_path).run(duration_s=9.0)
    th.join(timeout=60)
    [row] = rows
    truth = lab_truth(host.url)["acceptance"]
    assert row["status"] == "ok" and row["decision"] == "kept" and row["gate_al"] == 2.3
    assert row["device_time"] == {"emulated": True, "time_scale": float(SCALE)}
    w = row["window"]
    assert 0 < w["drafts"] <= truth["drafts"]
    assert w["acceptance_length"] == pytest.approx(truth["acceptance_length"], abs=0.25)
    assert w["device_s"] == pytest.approx(8.0 / float(SCALE), rel=0.3)
    assert row["cost_source"] == "tune curve, ngram k=6"
    assert row["verdict"] == "paying" and row["est_gain"] > 0.3, row
    doc = store.load(tmp_path)
    assert doc["hosts"]["lab-nano"]["row"]["verdict"] == "paying"
    assert doc["hosts"]["lab-nano"]["samples"]["lab-nano"]
    # the latest run's fleet page gained the live columns
    html = (tmp_path / "r-1" / "index.html").read_text()
    assert "live verdict" in html and ">paying<" in html


def test_not_paying_marks_the_host_when_its_data_says_reverify(host: Host,
                                                                tmp_path: Path) -> None:
    _report(tmp_path, 2.2, 2.5)  # drafting costs more than it brings at this step cost
    th = _traffic(host, {"chat": 1.0}, 150)
    rows = _watch(host, tmp_path, action="reverify").run(duration_s=9.0)
    th.join(timeout=60)
    [row] = rows
    assert row["verdict"] == "not paying" and row["marked"] is True, row
    mark = marks.get(tmp_path, "lab-nano")
    assert mark is not None and mark["verdict"] == "not paying" and mark["release"] == "r1"
    assert marks.marked(tmp_path, ["lab-nano", "other"]) == ["lab-nano"]
    assert marks.clear(tmp_path, "lab-nano") and marks.get(tmp_path, "lab-nano") is None


def test_a_release_re_verified_for_a_mark_is_not_marked_again(host: Host,
                                                              tmp_path: Path) -> None:
    """The deploy re-verified r1 because of this watch's mark and the gate (on its prompt set)
    kept it: marking again would re-gate it at every rollout."""
    _report(tmp_path, 2.2, 2.5, watch_mark={"verdict": "not paying", "release": "r1"})
    th = _traffic(host, {"chat": 1.0}, 100)
    rows = _watch(host, tmp_path, action="reverify").run(duration_s=7.0)
    th.join(timeout=60)
    assert rows[0]["verdict"] == "not paying" and not rows[0]["marked"], rows[0]
    assert any("not marked again" in n for n in rows[0]["notes"])
    assert marks.get(tmp_path, "lab-nano") is None


def test_report_only_never_marks(host: Host, tmp_path: Path) -> None:
    _report(tmp_path, 2.2, 2.5)
    th = _traffic(host, {"chat": 1.0}, 100)
    rows = _watch(host, tmp_path).run(duration_s=7.0)
    th.join(timeout=60)
    assert rows[0]["verdict"] == "not paying" and not rows[0]["marked"]
    assert marks.get(tmp_path, "lab-nano") is None


def test_once_builds_its_window_across_runs(host: Host, tmp_path: Path) -> None:
    _report(tmp_path, 1.03, 1.2)
    th = _traffic(host, {"code": 1.0}, 150)
    first = _watch(host, tmp_path, once=True, interval=2.0).run()
    second = _watch(host, tmp_path, once=True, interval=2.0).run()
    th.join(timeout=60)
    a, b = first[0]["window"], second[0]["window"]
    assert b["samples"] == a["samples"] + 1 and b["drafts"] > a["drafts"]


def test_gate_figures_from_the_gates_own_benchmark_files(tmp_path: Path) -> None:
    def bench(step_c1: float, step_c8: float, tokens_per_chunk: float) -> dict[str, Any]:
        lv = {}
        for c, step in ((1, step_c1), (8, step_c8)):
            reqs = [{"output_tokens": 65, "chunks": int(64 / tokens_per_chunk) + 1,
                     "ttft_ms": 50.0, "e2el_ms": 50.0 + step * 1000 * int(64 / tokens_per_chunk),
                     "category": "chat", "error": None} for _ in range(4)]
            lv[str(c)] = {"requests": reqs}
        return {"concurrency": lv}

    files = {}
    for arm, args in (("candidate", (0.021, 0.03, 2.0)), ("baseline", (0.02, 0.024, 1.0))):
        p = tmp_path / f"{arm}.bench.json"
        p.write_text(json.dumps(bench(*args)))
        files[arm] = {"files": [str(p)]}
    rep = {"host": "h", "outcome": "disabled", "method": "eagle3", "num_speculative_tokens": 3,
           "finished_at": "2026-11-26T10:00:00+00:00", **files}
    (tmp_path / "cache" / "h").mkdir(parents=True)
    (tmp_path / "cache" / "h" / "last-verified.json").write_text(json.dumps(rep))
    found = load_gate_report(tmp_path, "h")
    assert found is not None
    g = gate_facts(found[0], found[1], (1, 8))
    assert g.outcome == "disabled" and g.cost is not None
    assert dict(g.cost.points) == {1: pytest.approx(1.05), 8: pytest.approx(1.25)}
    assert g.tokens_per_step == pytest.approx(65 / 33, rel=0.01)
    # a speculative step measured cheaper than a plain one is timing noise: read as 1
    (tmp_path / "candidate.bench.json").write_text(json.dumps(bench(0.019, 0.03, 2.0)))
    g = gate_facts(found[0], found[1], (1, 8))
    assert g.cost is not None and dict(g.cost.points)[1] == 1.0


def test_fleet_page_without_a_watch_file_has_no_live_columns(tmp_path: Path) -> None:
    write_host_report(tmp_path / "r", {"host": "h", "outcome": "kept", "run_id": "r"})
    write_fleet(tmp_path / "r")
    assert "live verdict" not in (tmp_path / "r" / "index.html").read_text()


def test_a_host_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    """SSH failing (here: the command exits 255 with ssh's message) and a host with no release:
    each row says why, the verdict stays no traffic, and --once still ends."""
    empty = tmp_path / "nothing"
    empty.mkdir()
    code = reader_code()
    policy = parse_host_settings("h", DATA).gate

    def session(conn: Connection) -> Session:
        if conn.host == "down":
            return Session(conn, ["sh", "-c", "echo 'ssh: connect to host 192.0.2.1 port 22: "
                                  "No route to host' >&2; exit 255"])
        return Session(conn, [sys.executable, "-I", "-c", code, str(empty)])

    targets = [Target(n, Connection(n, "unused"), policy) for n in ("down", "fresh")]
    rows = Watch(targets, Options(interval_s=0.5, once=True, reports=tmp_path),
                 lambda rows: None, session=session).run()
    by = {r["host"]: r for r in rows}
    assert by["down"]["status"] == ("not read: ssh exited 255: ssh: connect to host 192.0.2.1 "
                                    "port 22: No route to host")
    assert "no release is current on the host" in by["fresh"]["status"]
    assert {r["verdict"] for r in rows} == {"no traffic"}
