"""A lab instance's group CAs claimed by another checkout's inventory are dropped at `lab up`
(a moved checkout, a CI clone elsewhere); its own are kept."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from specdec.config import pki
from specdec_lab.fleet import _drop_foreign_group_cas


def test_a_fresh_lab_drops_group_cas_of_another_inventory_path(tmp_path: Path) -> None:
    inv = tmp_path / "here" / "inventories" / "lab.py"
    inv.parent.mkdir(parents=True)
    inv.write_text("")
    root = tmp_path / "pki"
    for group, owner in (("spark-pair", "/elsewhere/inventories/lab.py"), ("mine", str(inv))):
        (root / group).mkdir(parents=True, mode=0o700)
        (root / group / pki.OWNER_FILE).write_text(f"inventory {owner}\n")
        (root / group / "ca.key").write_text("k")
    (root / "_api").mkdir()
    said: list[str] = []
    _drop_foreign_group_cas(SimpleNamespace(pki_dir=root), str(inv), said.append)  # type: ignore[arg-type]
    assert sorted(p.name for p in root.iterdir()) == ["_api", "mine"]
    assert said == ["pki: spark-pair: held for inventory /elsewhere/inventories/lab.py, removed"]
    # the kept one is what group_ca_dir accepts for this inventory
    assert pki.group_ca_dir(root, "mine", str(inv), ["a"], explicit=True) == root / "mine"
