"""`lab up --limit` without the lab site's mirror host is refused before anything boots (its
hosts' downloads would go to a mirror that is not there), unless the site is moved or off."""

from __future__ import annotations

import pytest

from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.sites import ENV, check_mirrors
from specdec_lab.spec import lab_hosts

INV = "inventories/lab.py"


def _check(limit: str) -> None:
    check_mirrors(lab_hosts(INV, limit, Instance.from_env()), INV, limit)


def test_a_limit_without_the_mirror_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(LabError, match=r"lab-nano: its site's mirror lab-agx is not in --limit"):
        _check("lab-nano,lab-spark")
    _check("lab-agx,lab-nano")  # the mirror boots too
    monkeypatch.setenv(ENV, "none")
    _check("lab-nano")  # no site: straight from the lab's Hub
    monkeypatch.setenv(ENV, "lab-nano")
    _check("lab-nano,lab-spark")  # the site's mirror is one of them
