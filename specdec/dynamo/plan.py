"""A host's part in its Dynamo serving group (`DynamoPlan`), from its settings and its group.

Defaults a team running Dynamo on a couple of Sparks would expect: discovery through one etcd
on the frontend member (Dynamo's multi-node guide: ``ETCD_ENDPOINTS=<head node>:2379`` on every
node), requests over the TCP request plane and events over the default ZMQ plane (no NATS:
Dynamo 1.6.1 needs NATS only when a plane is set to it), the worker's system server on 8081 as
in Dynamo's launch scripts (``DYN_SYSTEM_PORT=8081``, examples/backends/vllm/launch/
agg_spec_decoding.sh), Dynamo's default round-robin router, and ``--migration-limit 3`` so a
worker lost mid-stream does not fail the request (the stream moves to another worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specdec.dynamo.group import Group, groups_of
from specdec.engines.dynamo import (
    DEFAULT_MIGRATION_LIMIT,
    DEFAULT_ROUTER_MODE,
    DEFAULT_SYSTEM_PORT,
    dynamo_facts,
    known_releases,
)
from specdec.engines.support import DYNAMO_EAGLE3_ONLY
from specdec.engines.version import Version
from specdec.errors import ConfigError, PlanError
from specdec.hostdata import HostSettings
from specdec.plan_types import DynamoPlan

__all__ = ["DEFAULT_MIGRATION_LIMIT", "DEFAULT_ROUTER_MODE", "DEFAULT_SYSTEM_PORT",
           "dynamo_part"]



def vllm_release(s: HostSettings, version: Version, origin: str) -> str:
    facts = dynamo_facts(version)
    if facts is None:
        known = ", ".join(known_releases())
        text = (f"Dynamo {version} ({origin}) is not in specdec's release table, so the vLLM "
                f"release its worker runs is not known (known: {known})")
        if origin == "specdec_engine_version":
            raise ConfigError(f"specdec_engine_version={s.engine_version!r}: {text}",
                              host=s.host)
        raise PlanError(text, host=s.host)
    return str(facts.vllm)


def dynamo_part(s: HostSettings, data: Mapping[str, Any], group: Group | None, vllm: str,
                port: int, method: str, k: int, notes: list[str]) -> DynamoPlan:
    """This host's role in ``group`` (None: a group of its own, unless it names one); what the
    planner should know goes to ``notes``."""
    if group is None:
        if s.group is not None:
            raise ConfigError(f"specdec_group={s.group!r}: planning a member of a serving group "
                              "needs the whole inventory (specdec plan INVENTORY, or the deploy)",
                              host=s.host)
        group = groups_of([(s.host, data)])[s.host]
    if s.host not in group.members:
        raise PlanError(f"not a member of group {group.name!r}", host=s.host)
    system_port = s.dynamo_system_port
    is_frontend = s.host == group.frontend
    if is_frontend and system_port in (port, 2379, 2380):
        raise ConfigError(f"specdec_dynamo_system_port={system_port}: collides with the "
                          "frontend or etcd on this host", host=s.host)
    if method not in ("none", "eagle3"):
        notes.append(DYNAMO_EAGLE3_ONLY.format(vllm=vllm))
    if s.num_speculative_tokens is None and method != "none":
        notes.append(f"num_speculative_tokens auto: not tuned for a Dynamo group, k={k} from "
                     "the device table")
    notes.append(f"group {group.name}: " + ("etcd, frontend and worker" if is_frontend
                 else f"worker (frontend and etcd on {group.frontend})"))
    return DynamoPlan(
        vllm_version=vllm,
        group=group.name,
        frontend=group.frontend,
        frontend_address=group.frontend_address,
        address=group.address(s.host),
        is_frontend=is_frontend,
        system_port=system_port,
        router_mode=s.dynamo_router_mode,
        migration_limit=s.dynamo_migration_limit,
    )
