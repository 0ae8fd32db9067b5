"""The opt-in Jetson AGX Thor lab host (``SPECDEC_LAB_OPTIONAL=lab-thor``, see conftest.py):
NVIDIA's Thor identity, its nvpmodel conf read by name, upstream vLLM in Docker, idempotence.

Skipped unless the session's lab has ``lab-thor`` (the default fleet has none, so the default
suite is unchanged). Alone, 9 minutes on 2 cores at load 12:
``SPECDEC_E2E_INSTANCE=NAME SPECDEC_LAB_OPTIONAL=lab-thor SPECDEC_LAB_HOSTS=0
SPECDEC_LAB_DYNAMO=0 python3 -m pytest -q tests/e2e/test_thor.py``.
"""

from __future__ import annotations

import json
import os

import pytest

from specdec.host.layout import RELEASES_DIR
from specdec.host.power import parse_query
from tests.e2e.conftest import LabFleet, PyinfraRun

THOR = "lab-thor"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(THOR not in os.environ.get("SPECDEC_LAB_OPTIONAL", "").split(","),
                       reason="opt-in: SPECDEC_LAB_OPTIONAL=lab-thor adds the Thor lab host"),
]


def _plan(lab: LabFleet) -> dict[str, object]:
    return dict(json.loads(lab.ssh(THOR, f"cat {RELEASES_DIR}/$(basename $(readlink "
                                         "/var/lib/specdec/current))/plan.json").stdout))


def test_thor_identifies_from_nvidias_strings(lab: LabFleet) -> None:
    ident = json.loads(lab.ssh(THOR, "specdec identify --json").stdout)
    assert ident["device"] == "agx-thor-t5000", ident
    assert ident["jetpack"].startswith("7."), ident
    assert "R38" in lab.ssh(THOR, "cat /etc/nv_tegra_release").stdout


def test_thor_runs_upstream_vllm_in_docker_at_maxn(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0 and not deployed.errors, deployed.summary()
    plan = _plan(lab)
    assert plan["runtime"] == "docker" and plan["engine_version"] == "0.33.0", plan
    assert "vllm/vllm-openai" in str(plan["image"]), plan["image"]
    # the conf's mode 0 is MAXN; the boot default (120W, id 1) is left for it by name
    assert parse_query(lab.ssh(THOR, "nvpmodel -q").stdout) == ("MAXN", 0)
    h = lab.host(THOR)
    status, truth = lab.http(f"{lab.api(h)}/lab/truth")
    assert status == 200 and truth["power_mode"] == "MAXN", truth
    # no EMC cap in the stand-in conf: the catalog's peak, never another module's mode table
    assert truth["bandwidth_gbs"] == 273, truth


def test_a_second_thor_deploy_changes_nothing(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    again = lab.pyinfra("--limit", THOR, env={"SPECDEC_RUN_ID": "thor-again"})
    assert again.rc == 0 and not again.changed, again.summary()
