"""A Dynamo serving group in the lab: two DGX Sparks (``lab-dyn1``: etcd, the real Dynamo
frontend and a worker; ``lab-dyn2``: a worker; the workers are the engine emulator registered as
Dynamo vLLM workers) deploy, are gated through the frontend's OpenAI endpoint as one, and a
fault in one worker rolls the whole group back while every member keeps serving its last-good
release (`specdec.verify.group`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.engines.dynamo.facts import DEFAULT_SYSTEM_PORT as SYSTEM_PORT
from specdec.host.layout import CURRENT, LAST_GOOD
from tests.e2e.conftest import LabFleet, PyinfraRun
from tests.e2e.test_rollout_faults import BENCH, _no_token, _pointer, _report, _rollout

pytestmark = pytest.mark.e2e

GROUP, FRONT, WORKER = "spark-pair", "lab-dyn1", "lab-dyn2"
MODEL = "Qwen/Qwen3-8B"


def _members(lab: LabFleet) -> None:
    names = {h.name for h in lab.hosts}
    if not {FRONT, WORKER} <= names:
        pytest.skip("the lab has no Dynamo group (SPECDEC_LAB_DYNAMO=0)")


def _host_get(lab: LabFleet, name: str, url: str) -> int:
    """A member-only server, asked by the member itself (HTTP status; 0: no answer)."""
    out = lab.ssh(name, f"curl -s -o /dev/null -m 10 -w '%{{http_code}}' {url}", check=False)
    return int(out.stdout.strip() or 0)


def _frontend(lab: LabFleet) -> str:
    return lab.api(lab.host(FRONT))


def _group_serves(lab: LabFleet) -> None:
    """Both workers healthy, the frontend counts both, and a chat request through it works."""
    for name in (FRONT, WORKER):
        assert lab.ssh(name, "systemctl is-active specdec-engine", check=False).stdout.strip() \
            == "active", name
        status = _host_get(lab, name, f"http://{lab.host(name).address}:{SYSTEM_PORT}/health")
        assert status == 200, f"{name}: worker /health answered {status}"
    status, doc = lab.http(f"{_frontend(lab)}/v1/models/{MODEL.replace('/', '%2F')}/ready")
    assert status == 200, status
    workers = sum(t["workers"] for ns in doc["namespaces"].values()
                  for t in ns["worker_types"].values())
    assert workers == 2, doc
    body = {"model": MODEL, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Say hello."}]}
    status, out = lab.http(f"{_frontend(lab)}/v1/chat/completions", body, timeout=60)
    assert status == 200 and out["usage"]["completion_tokens"] > 0, (status, out)


def test_group_deploys_and_is_gated_through_the_frontend(lab: LabFleet,
                                                         deployed: PyinfraRun) -> None:
    _members(lab)
    assert deployed.rc == 0, deployed.summary()
    assert deployed.reports is not None
    reps = {n: _report(deployed.reports, n) for n in (FRONT, WORKER)}
    outcomes = {r["outcome"] for r in reps.values()}
    assert len(outcomes) == 1 and outcomes <= {"kept", "disabled"}, \
        {n: r["message"] for n, r in reps.items()}
    for name, rep in reps.items():
        g = rep["group"]
        assert (g["name"], g["frontend"], g["members"]) == (GROUP, FRONT, [FRONT, WORKER])
        assert g["url"] == _frontend(lab), g
        assert g["role"] == ("etcd, frontend, worker" if name == FRONT else "worker")
        names = {m["name"] for m in rep["measurements"]}
        assert "group_ready[running release]" in names, names
        assert any(n.startswith("candidate.c1.") for n in names), names  # through the frontend
        assert rep["gate"]["decision"] in ("keep", "disable"), rep["gate"]
        assert _pointer(lab, name, CURRENT) == _pointer(lab, name, LAST_GOOD)
    assert reps[FRONT]["acceptance"]["length"] > 1  # from the workers' spec-decode counters
    for unit in ("specdec-etcd", "specdec-frontend"):
        assert lab.ssh(FRONT, f"systemctl is-active {unit}").stdout.strip() == "active"
    assert lab.ssh(WORKER, "systemctl cat specdec-frontend", check=False).returncode != 0
    units = lab.ssh(FRONT, "systemctl cat specdec-engine specdec-frontend specdec-etcd").stdout
    _no_token(lab, units, deployed.output, run_dir=deployed.reports)
    _group_serves(lab)


def test_fault_in_one_worker_rolls_back_the_whole_group(lab: LabFleet, deployed: PyinfraRun,
                                                        tmp_path: Path) -> None:
    _members(lab)
    assert deployed.rc == 0, deployed.summary()
    before = {}
    for name in (FRONT, WORKER):
        cur, good = _pointer(lab, name, CURRENT), _pointer(lab, name, LAST_GOOD)
        assert cur and cur == good, name
        before[name] = cur
    # A new release on both members (k pinned), and lab-dyn2's worker crashes at start.
    proc, run_dir = _rollout(lab, tmp_path, "dyn-fault", "--limit", f"{FRONT},{WORKER}",
                             "--batches", "100%", "--data", "specdec_num_speculative_tokens=2",
                             faults=f"{WORKER}=crash_at_start", env=BENCH)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    reps = {n: _report(run_dir, n) for n in (FRONT, WORKER)}
    for name, rep in reps.items():
        assert rep["outcome"] == "rolled_back", (name, rep["message"])
        assert rep["group"]["failed_member"] == WORKER, rep["group"]
        assert f"member {WORKER}" in rep["message"], rep["message"]
        assert rep["candidate_release"] != before[name]  # it had a new release to try
        assert _pointer(lab, name, CURRENT) == before[name], f"{name}: not on last-good"
        assert _pointer(lab, name, LAST_GOOD) == before[name]
    _group_serves(lab)
    _no_token(lab, proc.stdout, proc.stderr, run_dir=run_dir)
