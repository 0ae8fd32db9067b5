"""NVIDIA Dynamo: a serving group of hosts, each running Dynamo's vLLM worker, behind one
frontend with etcd discovery on one member. The worker takes vLLM's engine arguments: it builds
on `specdec.engines.vllm.engine.VllmEngine` (the vLLM release its Dynamo release pins).

A group's defaults, what a team running Dynamo on a couple of Sparks would expect: discovery
through one etcd on the frontend member (Dynamo's multi-node guide: ``ETCD_ENDPOINTS=<head
node>:2379`` on every node), requests over the TCP request plane and events over the default ZMQ
plane (no NATS: Dynamo 1.6.1 needs NATS only when a plane is set to it), the worker's system
server on 8081 as in Dynamo's launch scripts (``DYN_SYSTEM_PORT=8081``, examples/backends/vllm/
launch/agg_spec_decoding.sh), Dynamo's default round-robin router, and ``--migration-limit 3``
so a worker lost mid-stream does not fail the request (the stream moves to another worker).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.config import hygiene
from specdec.config.keys import KeyReader
from specdec.config.settings import HostSettings
from specdec.engines.base import (
    LOOPBACK,
    Engine,
    GroupSeat,
    HostPackage,
    MetricsSource,
    ReleaseFile,
)
from specdec.engines.dynamo import facts, metrics, units
from specdec.engines.support import Support, Target
from specdec.engines.version import Version
from specdec.engines.vllm.engine import MANAGED_FLAGS as VLLM_FLAGS
from specdec.engines.vllm.engine import UNSAFE_FLAGS as VLLM_UNSAFE
from specdec.engines.vllm.engine import VllmEngine
from specdec.errors import ConfigError, PlanError
from specdec.host import layout
from specdec.plan.types import DynamoPlan, Group, Plan, Socket
from specdec.plan.types import http_url as url

__all__ = ["EPHEMERAL", "DynamoEngine", "DynamoOptions"]

EPHEMERAL = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range

# python -m dynamo.vllm (Dynamo 1.6.1 dynamo/vllm/args.py): vLLM's engine flags plus Dynamo's
# own; specdec sets the discovery and transport through the environment and the identity by
# its defaults, so none of them may come again as an argument.
MANAGED_FLAGS = {
    **{k: v for k, v in VLLM_FLAGS.items() if k not in ("--host", "--port")},
    "--discovery-backend": "specdec runs etcd discovery on the group's frontend host",
    "--request-plane": "specdec uses the TCP request plane",
    "--event-plane": "specdec uses the default ZMQ event plane",
    "--response-plane": "specdec uses the default TCP response plane",
    "--namespace": "a group serves in Dynamo's default namespace",
    "--endpoint": "a group serves on dyn://dynamo.backend.generate",
    "--store-kv": "specdec runs etcd discovery on the group's frontend host",
}


# The worker hands vLLM its flags (dynamo/vllm/args.py), so vLLM's unsafe ones are unsafe here;
# --fpm-trace turns on the forward-pass metrics publisher, a ZMQ PUB on every interface
# (facts.LISTENER_ENV).
UNSAFE_FLAGS = {**VLLM_UNSAFE, "--fpm-trace": "publishes forward-pass metrics (ZMQ, no "
                "authentication) on every interface"}


@dataclass(frozen=True)
class DynamoOptions:
    """A member's ``specdec_dynamo_*`` keys: its address for the group's traffic (else its
    ``ssh_hostname``), its worker's system port, the frontend's router and request migration."""

    address: str | None = None
    system_port: int = facts.DEFAULT_SYSTEM_PORT
    router_mode: str = facts.DEFAULT_ROUTER_MODE
    migration_limit: int = facts.DEFAULT_MIGRATION_LIMIT


def _vllm_release(s: HostSettings, version: Version, origin: str) -> Version:
    found = facts.dynamo_facts(version)
    if found is None:
        known = ", ".join(facts.known_releases())
        text = (f"Dynamo {version} ({origin}) is not in specdec's release table, so the vLLM "
                f"release its worker runs is not known (known: {known})")
        if origin == "specdec_engine_version":
            raise ConfigError(f"specdec_engine_version={s.engine_version!r}: {text}",
                              host=s.host)
        raise PlanError(text, host=s.host)
    return found.vllm


class DynamoEngine(Engine):
    """``python3 -m dynamo.vllm`` on every member; etcd and ``dynamo.frontend`` on one."""

    name = "dynamo"
    label = "Dynamo"
    managed_flags: ClassVar = MANAGED_FLAGS
    unsafe_flags: ClassVar = UNSAFE_FLAGS
    abbreviated_flags = True  # vLLM's parser reads what dynamo.vllm does not know
    reserved_env = (*facts.ENV_NAMES, *facts.LISTENER_ENV, *units.ACCOUNT_ENV)
    option_keys = ("dynamo_address", "dynamo_system_port", "dynamo_router_mode",
                   "dynamo_migration_limit")
    serves_groups = True
    group_kind = "NVIDIA Dynamo"
    tunes_on_host = False  # a group is measured through its frontend
    installed_hint = f"no ai-dynamo in {layout.DYNAMO_VENV}"

    def __init__(self) -> None:
        self.vllm = VllmEngine()

    def check_args(self, host: str | None, key: str, args: tuple[str, ...]) -> None:
        self.vllm.check_args(host, key, args)

    def check(self, version: Version, method: str, target: Target) -> Support:
        return facts.check(version, method, target)

    def check_head(self, version: Version, fmt: str) -> Support:
        return facts.check_head(version, fmt)

    def releases(self) -> list[Version]:
        return facts.boundaries()

    def spec_config_release(self, plan: Plan) -> str | None:
        return units.dynamo_part(plan).vllm_version

    # -- host data and plan ------------------------------------------------------------------
    def read_options(self, r: KeyReader) -> Mapping[str, Any]:
        out: dict[str, Any] = {}
        addr = r.get("specdec_dynamo_address")
        out["dynamo_address"] = None if addr is None else hygiene.check_address(
            r.host, "specdec_dynamo_address", addr)
        out["dynamo_system_port"] = r.int_("specdec_dynamo_system_port", 1024,
                                           facts.SYSTEM_PORT_MAX)
        out["dynamo_router_mode"] = r.str_("specdec_dynamo_router_mode", facts.ROUTER_MODES)
        out["dynamo_migration_limit"] = r.int_("specdec_dynamo_migration_limit", 0, 16)
        return {k: v for k, v in out.items() if v is not None}

    def options(self, s: HostSettings) -> DynamoOptions:
        found = dict(s.engine_options or {})
        return DynamoOptions(**{k.removeprefix("dynamo_"): v for k, v in found.items()})

    def member_address(self, s: HostSettings) -> str | None:
        return self.options(s).address

    def release_notes(self, s: HostSettings, version: Version, origin: str) -> list[str]:
        pin = _vllm_release(s, version, origin)
        return [f"Dynamo {version} runs vLLM {pin}: its speculative config is vLLM {pin}'s"]

    def group_part(self, s: HostSettings, group: Group, version: Version, port: int,
                   method: str, k: int, notes: list[str]) -> DynamoPlan:
        opts = self.options(s)
        pinned = facts.dynamo_facts(version)
        assert pinned is not None  # release_notes refused a release the table does not know
        vllm = str(pinned.vllm)
        is_frontend = s.host == group.frontend
        ours = {opts.system_port, opts.system_port + 1} | (
            {opts.system_port + 2, 2379, 2380} if is_frontend else set())
        if port in ours or (is_frontend and opts.system_port in (2377, 2378, 2379, 2380)):
            raise ConfigError(f"specdec_dynamo_system_port={opts.system_port}: its ports "
                              f"{opts.system_port}-{opts.system_port + 2} collide with the API "
                              "or etcd on this host", host=s.host)
        if method not in ("none", "eagle3"):
            notes.append(facts.EAGLE3_ONLY.format(vllm=vllm))
        if s.num_speculative_tokens is None and method != "none":
            notes.append(f"num_speculative_tokens auto: not tuned for a Dynamo group, k={k} "
                         "from the device table")
        notes.append(f"group {group.name}: " + ("etcd, frontend and worker" if is_frontend
                     else f"worker (frontend and etcd on {group.frontend})"))
        return DynamoPlan(vllm_version=vllm, group=group.name, frontend=group.frontend,
                          frontend_address=group.frontend_address,
                          address=group.address(s.host), is_frontend=is_frontend,
                          system_port=opts.system_port, router_mode=opts.router_mode,
                          migration_limit=opts.migration_limit, members=group.addresses)

    def group_seat(self, plan: Plan) -> GroupSeat:
        d = units.dynamo_part(plan)
        return GroupSeat(
            group=d.group, kind=self.group_kind, is_frontend=d.is_frontend,
            role="etcd, frontend, worker" if d.is_frontend else "worker",
            frontend_url=url(d.frontend_address, plan.port, plan.tls),
            member_url=url(d.address, d.system_port), ready_path=facts.READY_PATH)

    def describe_group(self, plan: Plan) -> str:
        d = units.dynamo_part(plan)
        return (f"{url(d.frontend_address, plan.port, plan.tls)}/v1 (Dynamo "
                f"{plan.engine_version}, vLLM {d.vllm_version}, etcd {d.etcd_endpoint}, "
                f"router {d.router_mode})")

    def ready_workers(self, body: str) -> int:
        """Workers the frontend's readiness answer counts (over namespaces and worker types)."""
        try:
            doc = json.loads(body)
            spaces = doc.get("namespaces") or {}
            return sum(int(t.get("workers") or 0) for ns in spaces.values()
                       for t in (ns.get("worker_types") or {}).values())
        except (ValueError, AttributeError, TypeError):
            return 0

    # -- render ------------------------------------------------------------------------------
    def argv(self, plan: Plan, config_path: str | None) -> list[str]:
        """``python3 -m dynamo.vllm`` with vLLM's engine flags (it has no --host/--port: the
        frontend serves HTTP). ai-dynamo 1.6.1 dynamo/vllm/args.py parses Dynamo's own groups
        and hands the rest to vLLM 0.31.0's parser (--model, --served-model-name,
        --gpu-memory-utilization, --max-model-len, --max-num-seqs, --speculative-config)."""
        version = units.dynamo_part(plan).vllm_version
        return [units.python(plan), "-m", "dynamo.vllm", "--model", plan.model,
                *self.vllm.model_flags(plan, version)]

    def native_command(self, plan: Plan, argv: list[str]) -> list[str]:
        return argv  # the venv's interpreter already

    def environment(self, plan: Plan) -> list[tuple[str, str]]:
        return units.worker_env(plan)

    def release_files(self, plan: Plan, release_id: str) -> list[ReleaseFile]:
        return [ReleaseFile(name, text) for name, text in units.aux_units(plan)]

    def unit_after(self, plan: Plan) -> list[str]:
        # the frontend member's worker registers with the etcd beside it
        return [f"{layout.ETCD_SERVICE}.service"] if units.dynamo_part(plan).is_frontend else []

    def host_packages(self, plan: Plan) -> list[HostPackage]:
        # the distribution's etcd.service would hold the ports: the group's etcd is
        # specdec-etcd.service in the release
        if not units.dynamo_part(plan).is_frontend:
            return []
        return [HostPackage("etcd-server", "etcd", "etcd.service")]

    # -- the network -------------------------------------------------------------------------
    def serves_api(self, plan: Plan) -> bool:
        return units.dynamo_part(plan).is_frontend  # the frontend member only

    def secret_env(self, plan: Plan) -> list[tuple[str, str]]:
        return list(units.ETCD_SECRETS)

    def peers(self, plan: Plan) -> tuple[str, ...] | None:
        return None if plan.runtime == "docker" else units.peers(units.dynamo_part(plan))

    def sockets(self, plan: Plan) -> list[Socket]:
        """The worker's system server and request plane on every member; on the frontend
        member also etcd (group address and loopback; its peer URL on loopback), the
        frontend's response stream and its HTTP (loopback, behind the API proxy)."""
        d = units.dynamo_part(plan)
        members = units.peers(d)
        names = ", ".join(m for m, _ in d.members)
        who = f"group {d.group}'s members ({names})"
        out = [Socket(layout.SERVICE_NAME, "Dynamo worker system server (health, metrics, "
                      "model card)", d.address, d.system_port, members, who),
               Socket(layout.SERVICE_NAME, "Dynamo worker TCP request plane", d.address,
                      d.rpc_port, members, who),
               # the ZMQ event plane's direct publishers bind DYN_EVENT_PLANE_HOST port 0 (1.6.1
               # _core.abi3.so: "tcp://0.0.0.0:0", "direct ZMQ publisher advertised endpoint"):
               # an ephemeral port, Linux's ip_local_port_range (default 32768-60999,
               # Documentation/networking/ip-sysctl.rst), on the group address
               Socket(layout.SERVICE_NAME, "Dynamo event plane publishers (ZMQ, ephemeral "
                      "ports)", d.address, EPHEMERAL[0], members, who, port_end=EPHEMERAL[1])]
        if d.is_frontend:
            out += [
                Socket(layout.ETCD_SERVICE, "etcd clients (TLS, member certificate)", d.address,
                       d.etcd_port, members, who),
                Socket(layout.ETCD_SERVICE, "etcd clients (TLS, member certificate)", LOOPBACK,
                       d.etcd_port, (), "this host"),
                Socket(layout.ETCD_SERVICE, "etcd peers (single member)", LOOPBACK,
                       d.etcd_peer_port, (), "this host"),
                Socket(layout.FRONTEND_SERVICE, "Dynamo frontend TCP response stream",
                       d.address, d.stream_port, members, who),
                Socket(layout.FRONTEND_SERVICE, "Dynamo frontend HTTP, behind the API proxy",
                       LOOPBACK, plan.engine_port, (), "the API proxy on this host"),
            ]
        return out

    def metrics_sources(self, plan: Plan) -> list[MetricsSource]:
        return metrics.sources(plan, units.dynamo_part(plan))

    def version_probe(self) -> str:
        dyn = shlex.quote("import importlib.metadata as m; print(m.version('ai-dynamo'))")
        venv_py = f"{layout.DYNAMO_VENV}/bin/python3"
        return (f"if [ -x {venv_py} ]; then "
                f"echo \"dynamo=$({venv_py} -c {dyn} 2>/dev/null | tail -n 1)\"; fi")
