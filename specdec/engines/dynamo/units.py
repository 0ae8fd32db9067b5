"""The units of a Dynamo serving group besides the worker, rendered from a member's plan (pure).

Every member's ``specdec-engine.service`` runs Dynamo's vLLM worker (``python3 -m dynamo.vllm``,
`specdec.engines.dynamo.engine`); the frontend member's release also holds
``specdec-etcd.service`` (etcd from the distribution, single node) and
``specdec-frontend.service`` (``python3 -m dynamo.frontend``). All three are release files, so
``current`` switches them together and a rollback restores them together; the etcd and frontend
units carry no release id, so a baseline and its candidate share them byte for byte and a switch
between the two restarts only the worker.

Closed to everyone but the group (Dynamo's secure-deployment guidelines: "Do not expose the
Dynamo frontend, ... NATS, etcd, or ZMQ endpoints directly to an untrusted network"):

* etcd serves TLS only and requires a client certificate of the group's CA (etcd 3.4
  ``--cert-file``, ``--key-file``, ``--trusted-ca-file``, ``--client-cert-auth``; etcd
  op-guide/security.md: "requests that don't supply a valid client certificate will fail"), on
  the group address and loopback; its peer URL is loopback (a single member), TLS with this
  member's own certificate required (``--peer-client-cert-auth``, ``--peer-cert-allowed-cn``).
  Every member's
  worker and the frontend present their member certificate through ``ETCD_AUTH_CA``,
  ``ETCD_AUTH_CLIENT_CERT``, ``ETCD_AUTH_CLIENT_KEY``, which ai-dynamo-runtime 1.6.1 reads as PEM
  *contents*, not paths (lib/runtime/src/transports/etcd.rs ``ClientOptions::default``:
  ``Certificate::from_pem``; with paths the runtime times out, security.md Q3, tested), so the
  unit's shell reads them from systemd credentials at start
  (`specdec.render.unitfile.secret_env_argv`).
  ``ETCD_AUTH_USERNAME``/``PASSWORD`` are never set: when set they win over the certificate.
* Every address a process binds or advertises is the member's group address
  (``DYN_TCP_RPC_HOST``, ``DYN_TCP_RESPONSE_STREAM_HOST``, ``DYN_EVENT_PLANE_HOST``,
  ``DYN_SYSTEM_HOST``; otherwise Dynamo binds the primary NIC's, or 0.0.0.0 for the system
  server), on planned ports (``DYN_TCP_RPC_PORT``, ``DYN_TCP_RESPONSE_STREAM_PORT``,
  ``DYN_SYSTEM_PORT``; otherwise ephemeral), which the firewall opens to the members only; each
  unit's IP filter admits loopback and the members only (a listener Dynamo opens on its own, on
  an ephemeral port, is confined too).
* The frontend's HTTP is on loopback, behind the API proxy (it implements no client
  authentication); its admin API is off (``DYN_DISABLE_FRONTEND_ADMIN_API=1``).

The worker's system server (``DYN_SYSTEM_PORT``) is required: the frontend downloads the model
card's tokenizer and config from it, so no member needs another's files.
"""

from __future__ import annotations

from specdec.engines.base import LOOPBACK, member_reach
from specdec.host import layout
from specdec.plan.types import DynamoPlan, Plan
from specdec.render import sandbox
from specdec.render.unitfile import Specified, env_assignment, exec_line, secret_env_argv, template

__all__ = ["ACCOUNT_ENV", "ETCD_SECRETS", "aux_units", "dynamo_part", "etcd_argv", "frontend_argv",
           "member_cn", "python", "transport", "worker_env"]

ETCD_BINARY = "/usr/bin/etcd"  # Debian / Ubuntu package etcd-server
# Dynamo's etcd client, from the member's certificate (credential names of layout.CREDENTIALS)
ETCD_SECRETS = [("ETCD_AUTH_CA", "group-ca.crt"), ("ETCD_AUTH_CLIENT_CERT", "group-member.crt"),
                ("ETCD_AUTH_CLIENT_KEY", "group-member.key")]
_CONTAINER_GROUP_TLS = "/run/secrets"


def dynamo_part(plan: Plan) -> DynamoPlan:
    assert plan.dynamo is not None, "not a Dynamo plan"
    return plan.dynamo


def peers(d: DynamoPlan) -> tuple[str, ...]:
    """The members' addresses as networks (the units' IP filters, the firewall's reach)."""
    return member_reach(d.members)


def transport(d: DynamoPlan) -> list[tuple[str, str]]:
    # Names in ai-dynamo-runtime 1.6.1 dynamo/_core.abi3.so (strings); DYN_DISCOVERY_BACKEND and
    # DYN_REQUEST_PLANE are also the env names `python -m dynamo.frontend --help` gives for
    # --discovery-backend and --request-plane; ETCD_ENDPOINTS: Dynamo's docs/backends/vllm/
    # multi-node.md (https: tested with 1.6.1 against etcd 3.4 with --client-cert-auth).
    return [
        ("DYN_DISCOVERY_BACKEND", "etcd"),
        ("ETCD_ENDPOINTS", d.etcd_endpoint),
        ("DYN_REQUEST_PLANE", "tcp"),
        ("DYN_TCP_RPC_HOST", d.address),
        ("DYN_TCP_RESPONSE_STREAM_HOST", d.address),
        ("DYN_EVENT_PLANE_HOST", d.address),
    ]


def worker_env(plan: Plan) -> list[tuple[str, str]]:
    # the system server on DYN_SYSTEM_PORT (examples/backends/vllm/launch/agg_spec_decoding.sh;
    # DYN_SYSTEM_ENABLED is deprecated in 1.6.1: the port alone turns it on), on the group
    # address (DYN_SYSTEM_HOST, default 0.0.0.0); the request plane on its planned port
    d = dynamo_part(plan)
    return [*transport(d), ("DYN_TCP_RPC_PORT", str(d.rpc_port)),
            ("DYN_SYSTEM_HOST", d.address), ("DYN_SYSTEM_PORT", str(d.system_port))]


def python(plan: Plan) -> str:
    """The interpreter: the image's ``python3`` (docker), the venv's (native)."""
    return "python3" if plan.runtime == "docker" else f"{layout.DYNAMO_VENV}/bin/python3"


def frontend_argv(plan: Plan) -> list[str]:
    # ai-dynamo 1.6.1 `python -m dynamo.frontend --help`: --http-host (default 0.0.0.0,
    # frontend_args.py:270), --http-port, --router-mode {round-robin,...}, --migration-limit
    d = dynamo_part(plan)
    return [python(plan), "-m", "dynamo.frontend", "--http-host", LOOPBACK,
            "--http-port", str(plan.engine_port), "--router-mode", d.router_mode,
            "--migration-limit", str(d.migration_limit)]


def etcd_argv(plan: Plan) -> list[str]:
    # etcd 3.4 (Debian 12 etcd-server) flags as `etcd --help` lists them; a single-member
    # cluster on the frontend member, its peer URL on loopback only; client and peer TLS with
    # client certificates of the group's CA (security.md Q4: the same flags, tested), the peer
    # port only for this member's own certificate (--peer-cert-allowed-cn): without it any
    # local process reads and writes the store through the peer port, bypassing
    # --client-cert-auth (tests/unit/test_etcd_tls.py runs etcd 3.4 with these flags)
    d = dynamo_part(plan)
    peer = f"https://{LOOPBACK}:{d.etcd_peer_port}"
    clients = [f"https://{LOOPBACK}:{d.etcd_port}"]
    if d.address not in (LOOPBACK, "localhost"):
        clients.insert(0, d.etcd_endpoint)
    def creds(name: str) -> str:  # in systemd's credentials directory (systemd.exec(5))
        return Specified("%d", f"/{name}")

    return [ETCD_BINARY, "--name", d.group, "--data-dir", f"/var/lib/{layout.ETCD_SERVICE}/data",
            "--listen-client-urls", ",".join(clients), "--advertise-client-urls", clients[0],
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{d.group}={peer}",
            "--cert-file", creds("group-member.crt"), "--key-file", creds("group-member.key"),
            "--trusted-ca-file", creds("group-ca.crt"), "--client-cert-auth",
            "--peer-cert-file", creds("group-member.crt"),
            "--peer-key-file", creds("group-member.key"),
            "--peer-trusted-ca-file", creds("group-ca.crt"), "--peer-client-cert-auth",
            "--peer-cert-allowed-cn", member_cn(d.frontend)]


def member_cn(member: str) -> str:
    """The CN of a member's certificate: its inventory name without a connector prefix
    (`specdec.roles.common.with_group_secrets`)."""
    return member.rsplit("/", 1)[-1]


def _credentials(names: list[str]) -> list[str]:
    return [f"{n}:{layout.CREDENTIALS[n]}" for n in names]


def docker_frontend_sandbox() -> list[str]:
    """The docker CLI of a containerised frontend: an account of its own (the container's
    process ends up as it), in the docker group for the CLI alone, which has no network
    (`sandbox.docker_cli`)."""
    return [sandbox.OWN_ACCOUNT[0], "SupplementaryGroups=docker", *sandbox.docker_cli()]


# In the container: root reads the group's secrets (root's 0600 files, mounted read-only), then
# becomes the unit's own account for good (setgroups, setgid, setuid: the kernel clears every
# capability, capabilities(7) "Effect of user ID changes on capabilities") and runs the frontend,
# so the process on the LAN is no root and can enter its HOME, the unit's 0700 state directory
# (root without CAP_DAC_OVERRIDE could not). The ids are the unit's, read at start (systemd
# allocates them), in ACCOUNT_ENV.
ACCOUNT_ENV = ("SPECDEC_UID", "SPECDEC_GID")
_DROP = ('import os, sys; u, g = (int(os.environ[n]) for n in ("SPECDEC_UID", "SPECDEC_GID")); '
         "assert u > 0 and g > 0; os.setgroups([]); os.setgid(g); os.setuid(u); "
         "os.execvp(sys.argv[1], sys.argv[1:])")


def _docker_frontend_argv(plan: Plan, home: str, env: list[tuple[str, str]]) -> list[str]:
    assert plan.image is not None
    mounts = [a for _, n in ETCD_SECRETS for a in
              ("-v", f"{layout.CREDENTIALS[n]}:{_CONTAINER_GROUP_TLS}/{n}:ro")]
    inner = ["python3", "-c", _DROP, *frontend_argv(plan)]
    run = ["run", "--rm", "--name", layout.FRONTEND_SERVICE, "--security-opt",
           "no-new-privileges", "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID",
           "--network", "host", "-v", f"{home}:{home}", *mounts,
           *[a for n in ACCOUNT_ENV for a in ("-e", n)],
           *[a for k, v in env for a in ("-e", f"{k}={v}")], plan.image,
           *secret_env_argv(ETCD_SECRETS, _CONTAINER_GROUP_TLS, inner)]
    return ["/bin/sh", "-c", 'export SPECDEC_UID="$(id -u)" SPECDEC_GID="$(id -g)"; '
            'exec /usr/bin/docker "$@"', "sh", *run]


def aux_units(plan: Plan) -> list[tuple[str, str]]:
    """``(unit file name, content)`` of the frontend member's etcd and frontend units; none on
    the other members."""
    d = dynamo_part(plan)
    if not d.is_frontend:
        return []
    docker = plan.runtime == "docker"
    home = f"/var/lib/{layout.FRONTEND_SERVICE}"
    env = [*transport(d), ("DYN_TCP_RESPONSE_STREAM_PORT", str(d.stream_port)),
           ("DYN_DISABLE_FRONTEND_ADMIN_API", "1"), ("HOME", home), ("HF_HUB_OFFLINE", "1")]
    secrets = [n for _, n in ETCD_SECRETS]
    if docker:
        argv = _docker_frontend_argv(plan, home, env)
        box = docker_frontend_sandbox()
    else:
        argv = secret_env_argv(ETCD_SECRETS, "$CREDENTIALS_DIRECTORY", frontend_argv(plan))
        box = sandbox.service([home], peers(d), jit=True)
    ctx = dict(plan=plan, dyn=d, docker=docker, firewall=layout.FIREWALL_SERVICE)
    frontend = template(
        "dynamo-frontend.service.j2", **ctx, state_dir=layout.FRONTEND_SERVICE,
        environment=[] if docker else [env_assignment(k, v) for k, v in env],
        credentials=[] if docker else _credentials(secrets),
        container=layout.FRONTEND_SERVICE, exec_start=exec_line(argv),
        etcd=layout.ETCD_SERVICE, sandbox=box)
    etcd = template("dynamo-etcd.service.j2", **ctx, state_dir=layout.ETCD_SERVICE,
                    credentials=_credentials(secrets), exec_start=exec_line(etcd_argv(plan)),
                    sandbox=sandbox.service([f"/var/lib/{layout.ETCD_SERVICE}"], peers(d),
                                            families=sandbox.IP_AND_NOTIFY))
    return [(f"{layout.ETCD_SERVICE}.service", etcd),
            (f"{layout.FRONTEND_SERVICE}.service", frontend)]
