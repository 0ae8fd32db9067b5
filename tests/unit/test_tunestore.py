"""The tune cache's one stated location (specdec/tunestore.py): the same for `specdec plan`,
`specdec rollout` and plain `pyinfra`, from any working directory, shared between control nodes;
and the store interface another backend (etcd) plugs into."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.config import state
from specdec.errors import ConfigError
from specdec.plan.planner import make_plan
from specdec.tune import store as tune_store
from specdec.tune.cache import apply_cached, cache_key, store
from specdec.tune.search import Config, TuneResult
from specdec.tune.store import DEFAULT_NAME, ENV, DirStore, location, open_store, register_scheme

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "cd" * 32
AGX = {"specdec_device": "agx-orin-64gb", "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "fleet" / "inventories" / "site.py"
    inv.parent.mkdir(parents=True)
    inv.write_text("hosts = [\n" + "".join(
        f"    ('agx{i}', {{'ssh_hostname': '10.9.0.{i}', 'specdec_device': 'agx-orin-64gb', "
        "'specdec_model': 'meta-llama/Llama-3.1-8B-Instruct'}),\n" for i in (1, 2)) + "]\n")
    return inv


def test_location_rules(tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
                        ) -> None:
    monkeypatch.chdir(tmp_path)
    home = {"SPECDEC_STATE_DIR": str(tmp_path / "st")}
    assert location(inventory=inventory, env=home) == str(  # default: the inventory's state
        state.for_inventory(inventory, env=home) / DEFAULT_NAME)
    assert location(inventory=inventory, data_value="../state/tune", env={}) == \
        str(inventory.parent.parent / "state" / "tune")  # host data: from the inventory's dir
    assert location(inventory=inventory, data_value="x", env={ENV: "/srv/tune"}) == "/srv/tune"
    assert location("rel", inventory, "x", {ENV: "/srv/tune"}) == str(tmp_path / "rel")
    assert location(env={"XDG_STATE_HOME": "/st"}) == "/st/specdec/default/tune-cache"  # hosts
    # a URL of no registered store is refused where it is read, naming its source
    with pytest.raises(ConfigError, match=r"^h1: specdec_tune_cache='etcd://e1:2379/specdec': "
                       "no store for etcd://"):
        location(inventory=inventory, data_value="etcd://e1:2379/specdec", env={}, host="h1")
    with pytest.raises(ConfigError, match="no store for etcd://"):
        open_store("etcd://e1:2379/specdec")


def test_a_registered_store_backs_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # the registry is the process's: this test's scheme goes with it (other tests say which
    # schemes are known)
    monkeypatch.setattr(tune_store, "_OPENERS", {})

    class Mem:
        entries: dict[str, str] = {}

        def __init__(self, where: str) -> None:
            self.location = where

        def read(self, entry: str) -> str | None:
            return self.entries.get(entry)

        def write(self, entry: str, text: str) -> str:
            self.entries[entry] = text
            return f"{self.location}/{entry}"

    register_scheme("mem", Mem)
    assert location(data_value="mem://fleet", env={}) == "mem://fleet"  # a URL as it is
    plan = make_plan("agx", AGX, None)
    res = TuneResult(Config("ngram", None, 6), [], [], "o", 1.0)
    where = store(open_store("mem://fleet"), plan, res, {})
    assert where.startswith("mem://fleet/")
    tuned = apply_cached(make_plan("agx2", AGX, None), open_store("mem://fleet"), False)
    assert tuned.num_speculative_tokens == 6 and tuned.method == "ngram"


def test_an_image_is_its_digest_wherever_it_is_pulled_from() -> None:
    a = make_plan("a", {**AGX, "specdec_image":
                        f"ghcr.io/nvidia-ai-iot/vllm:0.19.0-r36.4.tegra-aarch64-cu126-22.04@{DIGEST}"},
                  None)
    b = make_plan("b", {**AGX, "specdec_image": "10.1.2.3:5002/nvidia-ai-iot/vllm:0.19.0-r36.4."
                        f"tegra-aarch64-cu126-22.04@{DIGEST}"}, None)
    assert a.image != b.image and cache_key(a) == cache_key(b)


def test_dir_store_writes_whole_entries(tmp_path: Path) -> None:
    s = DirStore(tmp_path / "t")
    s.write("abc123", "one")
    s.write("abc123", "two")
    assert s.read("abc123") == "two" and s.read("ffffff") is None
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["abc123.json"]
    with pytest.raises(ValueError):
        s.write("../x", "no")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.usefixtures("hf_token")  # the inventory's model is gated
def test_two_working_directories_share_the_cache(tmp_path: Path, inventory: Path) -> None:
    """A run from one working directory tunes; a plan from another, of the same inventory,
    carries the tuned values (the cache is in the inventory's state), and plain pyinfra finds
    the same location as `specdec plan`."""
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    node_a.mkdir()
    node_b.mkdir()
    plan = make_plan("agx1", AGX, None)
    where = location(inventory=inventory)
    res = TuneResult(Config("ngram", None, 7), [], [], "o", 1.0)
    os.chdir(node_a)
    try:
        written = store(open_store(where), plan, res, {"host": "agx1"})
    finally:
        os.chdir(ROOT)
    assert Path(written).parent == state.for_inventory(inventory) / DEFAULT_NAME
    out = subprocess.run([sys.executable, "-m", "specdec.cli", "plan", str(inventory), "--json"],
                         cwd=node_b, env=_env(), capture_output=True, text=True, check=True)
    plans = {p["host"]: p for p in json.loads(out.stdout)}
    assert plans["agx2"]["num_speculative_tokens"] == 7 and plans["agx2"]["tuned"]
    # plain pyinfra, from node B: the deploy's tune store is the same location
    deploy = tmp_path / "where.py"
    deploy.write_text("from specdec.roles.common import tune_store\n"
                      "from specdec.plan.hostdata import parse_host_settings\n"
                      "print('TUNE_CACHE=' + tune_store(parse_host_settings('h', {})).location)\n")
    local = tmp_path / "fleet" / "local.py"
    local.write_text("hosts = ['@local']\n")
    run = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(local), str(deploy)],
                         cwd=node_b, env=_env(), capture_output=True, text=True, check=False)
    assert f"TUNE_CACHE={state.for_inventory(local) / DEFAULT_NAME}" in run.stdout + run.stderr, \
        run.stdout[-800:] + run.stderr[-800:]
    # --tune-cache / $SPECDEC_TUNE_CACHE win over the default, for every entry point
    other = tmp_path / "elsewhere"
    out = subprocess.run([sys.executable, "-m", "specdec.cli", "plan", str(inventory), "--json",
                          "--tune-cache", str(other)], cwd=node_b, env=_env(),
                         capture_output=True, text=True, check=True)
    assert not json.loads(out.stdout)[1]["tuned"]
    run = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(local), str(deploy)],
                         cwd=node_b, env=_env(**{ENV: str(other)}), capture_output=True,
                         text=True, check=False)
    assert f"TUNE_CACHE={other}" in run.stdout + run.stderr


def test_rollout_passes_an_explicit_tune_cache_to_pyinfra(tmp_path: Path) -> None:
    from specdec.fleet.rollout import RolloutPlan, run_rollout

    seen: list[dict[str, str]] = []

    def runner(cmd: list[str], env: object, cwd: Path) -> int:
        seen.append(dict(env))  # type: ignore[call-overload]
        return 0

    for tune in ("/srv/tune", None):
        plan = RolloutPlan(inventory=tmp_path / "inv.py", hosts=["a"], batches=[["a"]],
                           max_fail_percent=0, run_id=f"r{len(seen)}",
                           reports_root=tmp_path / "reports", tune_cache=tune)
        run_rollout(plan, runner=runner, say=lambda _m: None)
    assert seen[0][ENV] == "/srv/tune"
    assert seen[1].get(ENV) == os.environ.get(ENV)  # default: the deploy finds it itself
