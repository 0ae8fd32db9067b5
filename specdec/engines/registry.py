"""The engines by name: the one place the generic flow looks an engine up."""

from __future__ import annotations

from specdec.engines.base import Engine
from specdec.engines.dynamo.engine import DynamoEngine
from specdec.engines.support import Support, Target
from specdec.engines.trtllm.engine import TrtllmEngine
from specdec.engines.version import Version
from specdec.engines.vllm.engine import VllmEngine
from specdec.plan.types import Plan

__all__ = ["DEFAULT_ENGINE", "ENGINES", "engine", "engine_of", "support"]

DEFAULT_ENGINE = "vllm"  # specdec_engine when unset
ENGINES: dict[str, Engine] = {e.name: e for e in (VllmEngine(), TrtllmEngine(), DynamoEngine())}


def engine(name: str | None) -> Engine:
    """The engine called ``name`` (None: the default); `KeyError` for a name not registered
    (host data is checked against `specdec.catalog.ENGINES` long before)."""
    return ENGINES[name or DEFAULT_ENGINE]


def engine_of(plan: Plan) -> Engine:
    return ENGINES[plan.engine]


def support(name: str, version: Version, method: str, target: Target) -> Support:
    """Whether engine ``name`` at ``version`` runs ``method`` for ``target``."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}")
    return ENGINES[name].support(version, method, target)
