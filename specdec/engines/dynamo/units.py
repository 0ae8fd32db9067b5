"""The units of a Dynamo serving group besides the worker, rendered from a member's plan (pure).

Every member's ``specdec-engine.service`` runs Dynamo's vLLM worker (``python3 -m dynamo.vllm``,
`specdec.engines.dynamo.engine`); the frontend member's release also holds
``specdec-etcd.service`` (etcd from the distribution, single node) and
``specdec-frontend.service`` (``python3 -m dynamo.frontend``). All three are release files, so
``current`` switches them together and a rollback restores them together; the etcd and frontend
units carry no release id, so a baseline and its candidate share them byte for byte and a switch
between the two restarts only the worker.

Environment (names as ai-dynamo-runtime 1.6.1 reads them, `specdec.engines.dynamo.facts.ENV_NAMES`):
etcd discovery at the frontend member (``ETCD_ENDPOINTS``), the TCP request plane, and every
address a process binds or advertises set to the member's group address (``DYN_TCP_RPC_HOST``,
``DYN_TCP_RESPONSE_STREAM_HOST``, ``DYN_EVENT_PLANE_HOST``, ``DYN_SYSTEM_HOST``); otherwise
Dynamo advertises the primary NIC's address. The worker's system server
(``DYN_SYSTEM_PORT``) is required: the frontend downloads the model card's tokenizer and config
from it, so no member needs another's files.
"""

from __future__ import annotations

from specdec import layout
from specdec.plan_types import DynamoPlan, Plan
from specdec.unitfile import env_assignment, exec_line, template

__all__ = ["aux_units", "dynamo_part", "etcd_argv", "frontend_argv", "python", "transport",
           "worker_env"]

ETCD_BINARY = "/usr/bin/etcd"  # Debian / Ubuntu package etcd-server


def dynamo_part(plan: Plan) -> DynamoPlan:
    assert plan.dynamo is not None, "not a Dynamo plan"
    return plan.dynamo


def transport(d: DynamoPlan) -> list[tuple[str, str]]:
    # Names in ai-dynamo-runtime 1.6.1 dynamo/_core.abi3.so (strings); DYN_DISCOVERY_BACKEND and
    # DYN_REQUEST_PLANE are also the env names `python -m dynamo.frontend --help` gives for
    # --discovery-backend and --request-plane; ETCD_ENDPOINTS: Dynamo's docs/backends/vllm/
    # multi-node.md.
    return [
        ("DYN_DISCOVERY_BACKEND", "etcd"),
        ("ETCD_ENDPOINTS", d.etcd_endpoint),
        ("DYN_REQUEST_PLANE", "tcp"),
        ("DYN_TCP_RPC_HOST", d.address),
        ("DYN_TCP_RESPONSE_STREAM_HOST", d.address),
        ("DYN_EVENT_PLANE_HOST", d.address),
    ]


def worker_env(plan: Plan) -> list[tuple[str, str]]:
    # the system server: DYN_SYSTEM_ENABLED/DYN_SYSTEM_PORT as in the ai-dynamo/dynamo repo's
    # examples/backends/vllm/launch/agg_spec_decoding.sh; DYN_SYSTEM_HOST in _core.abi3.so
    d = dynamo_part(plan)
    return [*transport(d), ("DYN_SYSTEM_ENABLED", "true"), ("DYN_SYSTEM_HOST", d.address),
            ("DYN_SYSTEM_PORT", str(d.system_port))]


def python(plan: Plan) -> str:
    """The interpreter: the image's ``python3`` (docker), the venv's (native)."""
    return "python3" if plan.runtime == "docker" else f"{layout.DYNAMO_VENV}/bin/python3"


def frontend_argv(plan: Plan) -> list[str]:
    # ai-dynamo 1.6.1 `python -m dynamo.frontend --help`: --http-host, --http-port,
    # --router-mode {round-robin,...}, --migration-limit
    d = dynamo_part(plan)
    return [python(plan), "-m", "dynamo.frontend", "--http-host", "0.0.0.0",
            "--http-port", str(plan.port), "--router-mode", d.router_mode,
            "--migration-limit", str(d.migration_limit)]


def etcd_argv(plan: Plan) -> list[str]:
    # etcd 3.4 (Debian 12 etcd-server) flags as `etcd --help` lists them; a single-member
    # cluster on the frontend member, its peer URL on loopback only
    d = dynamo_part(plan)
    peer = f"http://127.0.0.1:{d.etcd_peer_port}"
    clients = [f"http://127.0.0.1:{d.etcd_port}"]
    if d.address not in ("127.0.0.1", "localhost"):
        clients.insert(0, d.etcd_endpoint)
    return [ETCD_BINARY, "--name", d.group, "--data-dir", f"/var/lib/{layout.ETCD_SERVICE}/data",
            "--listen-client-urls", ",".join(clients), "--advertise-client-urls", clients[0],
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{d.group}={peer}"]


def aux_units(plan: Plan) -> list[tuple[str, str]]:
    """``(unit file name, content)`` of the frontend member's etcd and frontend units; none on
    the other members."""
    d = dynamo_part(plan)
    if not d.is_frontend:
        return []
    docker = plan.runtime == "docker"
    home = f"/var/lib/{layout.FRONTEND_SERVICE}"
    env = [*transport(d), ("HOME", home), ("HF_HUB_OFFLINE", "1")]
    argv = frontend_argv(plan)
    if docker:
        assert plan.image is not None
        argv = ["/usr/bin/docker", "run", "--rm", "--name", layout.FRONTEND_SERVICE,
                "--network", "host", "-v", f"{home}:{home}",
                *[a for k, v in env for a in ("-e", f"{k}={v}")], plan.image, *argv]
    ctx = dict(plan=plan, dyn=d, docker=docker, user=plan.service_user)
    frontend = template(
        "dynamo-frontend.service.j2", **ctx, state_dir=layout.FRONTEND_SERVICE,
        environment=[] if docker else [env_assignment(k, v) for k, v in env],
        container=layout.FRONTEND_SERVICE, exec_start=exec_line(argv),
        etcd=layout.ETCD_SERVICE)
    etcd = template("dynamo-etcd.service.j2", **ctx, state_dir=layout.ETCD_SERVICE,
                    exec_start=exec_line(etcd_argv(plan)))
    return [(f"{layout.ETCD_SERVICE}.service", etcd),
            (f"{layout.FRONTEND_SERVICE}.service", frontend)]
