"""Fixtures for pyinfra-level tests of the roles and deploys/specdec.py."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `roles` is a top-level package of the checkout

from specdec.host.identify import parse_identity  # noqa: E402
from tests.deploy.harness import World  # noqa: E402
from tests.unit.test_identify import AGX64, SPARK  # noqa: E402

TOKEN = "hf_MARKERtoken123456789abcd"  # a valid token shape (specdec.config.hftoken)
CASE_SECONDS = 30  # a bad-input case that takes longer hangs (issue 29: one did)


@pytest.fixture
def no_hang() -> Iterator[None]:
    """The test ends within `CASE_SECONDS` (SIGALRM interrupts a blocking read too)."""
    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError(f"the case did not finish in {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(CASE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def agx_world() -> World:
    # vLLM on PATH too, as on a host set up for the native runtime (the docker runtime ignores it)
    return World(identity=parse_identity(AGX64), groups=["root"], engines={"vllm": "0.19.0"})


@pytest.fixture
def spark_world() -> World:
    return World(identity=parse_identity(SPARK), groups=["root"])


@pytest.fixture(autouse=True)
def _no_ambient_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def on(monkeypatch, tmp_path):
    """The lock and verify roles switched on for @fake hosts; the run's report directory."""
    monkeypatch.setattr("specdec.roles.lock.SKIP_ON_FAKE_CONNECTOR", False)
    monkeypatch.setenv("SPECDEC_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("SPECDEC_INVENTORY_STATE", str(tmp_path / "reports"))  # caches, marks
    monkeypatch.setenv("SPECDEC_RUN_ID", "t1")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return tmp_path / "reports" / "t1"
