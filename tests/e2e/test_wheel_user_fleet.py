"""A user's own fleet, as a user has it: specdec installed from its wheel into a fresh venv
(without the lab's package), a directory outside the checkout with the user's inventory and
group data named like the repository's example groups (``orin_nano``, ``all``), and a rollout
against a lab host from there. The deployed release is `specdec plan`'s, carrying the user's
values and none of the examples'."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specdec.config.inventory import load_inventory
from specdec_lab.instance import ENV
from tests.e2e.conftest import INSTANCE, INVENTORY, ROOT, LabFleet, PyinfraRun
from tests.wheelenv import build_wheel, product_venv

HOST = "lab-nano"
MIRROR = "lab-agx"  # the lab site's mirror (hub and registry): the user's fleet uses it too
# The user's group data, named like the examples' (group_data/orin_nano.py and all.py set
# meta-llama/Llama-3.2-1B-Instruct, docker, port 8000, ...): values of the user's own.
USER_GROUP = {"specdec_device": "orin-nano-8gb", "specdec_model": "Qwen/Qwen3-0.6B",
              "specdec_num_speculative_tokens": 2, "specdec_max_model_len": 2048}
USER_ALL = {"specdec_max_num_seqs": 3}
EXAMPLE_MODEL = "meta-llama/Llama-3.2-1B-Instruct"


def _host_data(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """The lab hosts' connection and lab data (of the tests' instance): the site mirror's as
    it is, the user's host's without what the user's groups set."""
    monkeypatch.setenv(ENV, INSTANCE.name)
    monkeypatch.chdir(ROOT)
    loaded = dict(load_inventory(INVENTORY, f"{HOST},{MIRROR}"))
    drop = {*USER_GROUP, *USER_ALL, "lab_device"}
    return loaded[MIRROR], {k: v for k, v in loaded[HOST].items() if k not in drop}


def _user_dir(tmp_path: Path, mirror: dict[str, Any], data: dict[str, Any]) -> Path:
    user = tmp_path / "my-fleet"
    (user / "group_data").mkdir(parents=True)
    (user / "inventory.py").write_text(f"site = [({MIRROR!r}, {mirror!r})]\n"
                                       f"orin_nano = [({HOST!r}, {data!r})]\n")
    for name, values in (("orin_nano", USER_GROUP), ("all", USER_ALL)):
        (user / "group_data" / f"{name}.py").write_text(
            "".join(f"{k} = {v!r}\n" for k, v in values.items()))
    return user


def test_a_wheel_install_rolls_out_the_users_own_plan_from_their_directory(
        lab: LabFleet, deployed: PyinfraRun, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert deployed.rc == 0, deployed.summary()  # the site's mirror serves
    venv = product_venv(build_wheel(tmp_path / "dist"), tmp_path / "venv")
    user = _user_dir(tmp_path, *_host_data(monkeypatch))
    env = {**lab.env, "PATH": f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": str(tmp_path)}
    for var in ("PYTHONPATH", "SPECDEC_REPORTS_DIR", ENV):  # nothing of the checkout or lab
        env.pop(var, None)

    def specdec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin/specdec"), *args], cwd=user, env=env,
                              capture_output=True, text=True, timeout=1800, check=False)

    planned = specdec("plan", "inventory.py", "--json", "--limit", HOST)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)[0]
    assert (plan["model"], plan["num_speculative_tokens"], plan["max_model_len"],
            plan["max_num_seqs"]) == ("Qwen/Qwen3-0.6B", 2, 2048, 3)
    out = specdec("rollout", "inventory.py", "--limit", HOST, "--reports",
                  str(tmp_path / "reports"), "--run-id", "user-1", "--batches", "100%")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    report_text = (tmp_path / "reports" / "user-1" / f"{HOST}.json").read_text()
    rep = json.loads(report_text)
    assert rep["outcome"] in ("kept", "disabled"), rep["message"]
    assert rep["candidate_release"] == plan["release_id"]  # the deployed plan is the plan's
    assert (rep["model"], rep["num_speculative_tokens"]) == ("Qwen/Qwen3-0.6B", 2)
    assert EXAMPLE_MODEL not in report_text
    unit = lab.ssh(HOST, f"cat /var/lib/specdec/releases/{plan['release_id']}/"
                         "specdec-engine.service").stdout
    assert "--max-model-len 2048" in unit and "--max-num-seqs 3" in unit
    assert lab.hf_token not in out.stdout + out.stderr + report_text
    # the user's directory holds only what the user put there (no reports, caches, keys)
    assert sorted(p.name for p in user.iterdir()) == ["group_data", "inventory.py"]

