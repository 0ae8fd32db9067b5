"""`specdec.config.state`: one state directory per inventory, whatever the working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specdec.config import state
from specdec.tune.store import location


def test_one_directory_per_inventory_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "fleet" / "inventory.py"
    inv.parent.mkdir()
    inv.write_text("hosts = []\n")
    other = tmp_path / "fleet2" / "inventory.py"
    other.parent.mkdir()
    other.write_text("hosts = []\n")
    env = {"SPECDEC_STATE_DIR": str(tmp_path / "st")}
    here = state.for_inventory(inv, env=env)
    monkeypatch.chdir(inv.parent)
    assert state.for_inventory("inventory.py", env=env) == here  # relative, from its directory
    assert here.parent == tmp_path / "st" / "inventories" and here.name.startswith("inventory-")
    assert state.for_inventory(other, env=env) != here  # same name, another inventory
    assert state.for_inventory(inv, "/x/y", env=env) == Path("/x/y")
    assert state.for_inventory(inv, env={**env, "SPECDEC_INVENTORY_STATE": "/z"}) == Path("/z")
    assert state.for_inventory(None, env=env) == tmp_path / "st" / "default"
    xdg = state.root({"XDG_STATE_HOME": str(tmp_path / "x")})
    assert xdg == tmp_path / "x" / "specdec"
    assert state.root({}) == Path.home() / ".local" / "state" / "specdec"


def test_the_tune_cache_lives_in_the_state_unless_it_lived_beside_the_inventory(
        tmp_path: Path) -> None:
    inv = tmp_path / "inventory.py"
    inv.write_text("hosts = []\n")
    env = {"SPECDEC_STATE_DIR": str(tmp_path / "st")}
    assert location(inventory=inv, env=env) == str(state.for_inventory(inv, env=env) /
                                                    "tune-cache")
    (tmp_path / "tune-cache").mkdir()  # a fleet's cache from before: kept where it is
    assert location(inventory=inv, env=env) == str(tmp_path / "tune-cache")


def test_use_passes_the_state_on_to_what_the_process_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECDEC_INVENTORY_STATE", raising=False)
    inv = tmp_path / "inventory.py"
    inv.write_text("hosts = []\n")
    path = state.use(inv)
    assert os.environ["SPECDEC_INVENTORY_STATE"] == str(path)
    monkeypatch.delenv("SPECDEC_INVENTORY_STATE")
