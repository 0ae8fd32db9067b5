"""Render a `Plan` into exact file contents with on-host paths, modes and owners (pure).

Release files go to ``/var/lib/specdec/releases/<release_id>/``: the systemd unit, ``plan.json``
and, for trtllm, ``engine.yaml`` (``--extra_llm_api_options``). Host files: the limits.d entry
for the service user. The engine gets neither the HF token (it runs with ``HF_HUB_OFFLINE=1``:
the weights are downloaded before, `specdec.host.prefetch`) nor an API key (it listens on
loopback behind the API proxy, which checks the key).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.catalog import load_catalog
from specdec.engines.base import Engine, ReleaseFile, describe_speculation
from specdec.engines.registry import ENGINES, engine_of
from specdec.engines.vllm.engine import speculative_config as vllm_speculative_config
from specdec.errors import RenderError
from specdec.host import layout
from specdec.host.layout import hub_env
from specdec.plan.types import Plan
from specdec.render import firewall, proxy, sandbox
from specdec.render.unitfile import (
    env_assignment,
    exec_line,
    secret_env_argv,
    systemd_quote,
    template,
)

__all__ = [
    "CONTAINER_ENGINE_YAML",
    "LIMITS_PATH",
    "STACK_BYTES",
    "Rendered",
    "RenderedFile",
    "engine_argv",
    "hub_env",
    "render",
    "speculative_config",
    "systemd_quote",
]

STACK_BYTES = 67108864
LIMITS_PATH = "/etc/security/limits.d/90-specdec.conf"
CONTAINER_SECRETS = "/run/secrets"  # a container's read-only secret files, by credential name
CONTAINER_ENGINE_YAML = "/etc/specdec/engine.yaml"
UNIT_FILE = f"{layout.SERVICE_NAME}.service"
# Cold loads of big models on Jetson take minutes; systemd waits at least this long.
MIN_START_TIMEOUT = 300
# A native engine's writable cache (systemd CacheDirectory=, under /var/cache): its HOME and
# XDG_CACHE_HOME, where vLLM, Triton and torch keep compiled kernels (the service user's home,
# /var/lib/specdec, is root's and read-only under ProtectSystem=strict).
ENGINE_CACHE = layout.SERVICE_NAME
# Docker's container-side limits (the unit's sandbox reaches only the docker CLI): no setuid
# gains and no capabilities. CIS Docker Benchmark 5.3 and 5.25 (docker run --cap-drop,
# --security-opt=no-new-privileges); Dynamo's secure-deployment guidelines ("drop unneeded
# capabilities"); no capability is needed for CUDA inference: jetson-containers' run.sh adds
# none, NVIDIA's runtime hook injects the devices from the host, and pinned memory needs
# RLIMIT_MEMLOCK (--ulimit memlock), not CAP_IPC_LOCK.
DOCKER_HARDENING = ["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]


@dataclass(frozen=True)
class RenderedFile:
    path: str  # absolute on-host path
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"


@dataclass(frozen=True)
class Rendered:
    release_id: str
    files: tuple[RenderedFile, ...]

    @property
    def by_path(self) -> dict[str, RenderedFile]:
        return {f.path: f for f in self.files}

    @property
    def release_dir(self) -> str:
        return layout.release_dir(self.release_id)

    @property
    def unit(self) -> RenderedFile:
        """The release's systemd unit (``current/<SERVICE_NAME>.service`` once switched)."""
        return self.by_path[f"{self.release_dir}/{UNIT_FILE}"]

    @property
    def other_units(self) -> tuple[str, ...]:
        """Unit files of the release besides the engine's (a serving group's frontend member:
        etcd and the frontend), by name, in start order."""
        return tuple(f.path.rsplit("/", 1)[1] for f in self.release_files
                     if f.path.endswith(".service") and f.path.rsplit("/", 1)[1] != UNIT_FILE)

    @property
    def release_files(self) -> tuple[RenderedFile, ...]:
        prefix = self.release_dir + "/"
        return tuple(f for f in self.files if f.path.startswith(prefix))

    @property
    def host_files(self) -> tuple[RenderedFile, ...]:
        prefix = self.release_dir + "/"
        return tuple(f for f in self.files if not f.path.startswith(prefix))


def _engine(plan: Plan) -> Engine:
    try:
        return engine_of(plan)
    except KeyError:
        raise RenderError(f"engine={plan.engine!r}: unknown engine", host=plan.host) from None


def speculative_config(plan: Plan) -> dict[str, object] | None:
    """vLLM's ``--speculative-config`` for the plan (None when speculation is off), for the vLLM
    release the plan's engine runs."""
    if not plan.speculative:
        return None
    version = engine_of(plan).spec_config_release(plan) if plan.engine in ENGINES else None
    if version is None:
        raise RenderError(f"engine={plan.engine!r} takes no vLLM speculative config",
                          host=plan.host)
    return vllm_speculative_config(plan, version)


def engine_argv(plan: Plan, config_path: str | None = None) -> list[str]:
    """The engine's command line (without the binary path or docker wrapper)."""
    return _engine(plan).argv(plan, config_path) + list(plan.extra_args)


def _docker_argv(plan: Plan, release_id: str, device_is_jetson: bool) -> list[str]:
    memlock = "-1" if plan.memlock == "unlimited" else f"{plan.memlock}:{plan.memlock}"
    argv = ["/usr/bin/docker", "run", "--rm", "--name", layout.SERVICE_NAME, *DOCKER_HARDENING]
    if device_is_jetson:
        # As jetson-containers' run.sh on Tegra (dusty-nv/jetson-containers run.sh @ e750cb65:
        # `docker run --runtime nvidia ... --network host --shm-size=8g`): the engine's
        # processes share tensors through /dev/shm, which Docker caps at 64 MB. Not --ipc=host:
        # run.sh does not pass it on Tegra, and a sized /dev/shm keeps the host's IPC
        # namespace out of the container.
        argv += ["--runtime", "nvidia", "--network", "host", "--shm-size=8g"]
    else:
        argv += ["--gpus", "all", "--ipc=host", "--network", "host"]
    argv += [
        "--ulimit", f"memlock={memlock}",
        "--ulimit", f"stack={STACK_BYTES}",
        "-v", f"{layout.HF_HOME}:{layout.HF_HOME}",
        *[a for k, v in hub_env() for a in ("-e", f"{k}={v}")],
        "-e", "HF_HUB_OFFLINE=1",
    ]
    if device_is_jetson:
        argv += ["-v", "/etc/nv_tegra_release:/etc/nv_tegra_release:ro"]
    assert plan.image is not None
    if load_catalog().entrypoint_of(plan.image):
        # the image's ENTRYPOINT is the engine's command (vllm/vllm-openai): cleared, so the
        # command below is the whole of what runs, as with every other image
        argv.append("--entrypoint=")
    engine = _engine(plan)
    for name, value in [*engine.environment(plan), *plan.env]:
        argv += ["-e", f"{name}={value}"]
    secrets = engine.secret_env(plan)
    for _, cred in secrets:
        argv += ["-v", f"{layout.CREDENTIALS[cred]}:{CONTAINER_SECRETS}/{cred}:ro"]
    config = engine.config_file(plan)
    if config is not None:
        argv += ["-v", f"{layout.release_dir(release_id)}/{config}:{CONTAINER_ENGINE_YAML}:ro"]
    inner = engine_argv(plan, CONTAINER_ENGINE_YAML if config else None)
    # the image's sh reads the secrets inside the container: nothing in `docker inspect`
    inner = secret_env_argv(secrets, CONTAINER_SECRETS, inner)
    return argv + [plan.image] + inner


def _native_argv(plan: Plan, release_id: str) -> list[str]:
    engine = _engine(plan)
    config = engine.config_file(plan)
    path = f"{layout.release_dir(release_id)}/{config}" if config is not None else None
    return secret_env_argv(engine.secret_env(plan), "$CREDENTIALS_DIRECTORY",
                           engine.native_command(plan, engine_argv(plan, path)))


def network_files(plan: Plan) -> list[ReleaseFile]:
    """The firewall's ruleset and unit; the API proxy's config and unit when the host serves
    the API (`specdec.render.firewall`, `specdec.render.proxy`)."""
    rules = firewall.ruleset(plan)
    rules_name = firewall.ruleset_name(rules)
    out = [ReleaseFile(rules_name, rules),
           ReleaseFile(f"{layout.FIREWALL_SERVICE}.service", firewall.unit(plan, rules_name))]
    if _engine(plan).serves_api(plan):
        conf = proxy.config(plan)
        name = proxy.config_name(conf)
        out += [ReleaseFile(name, conf),
                ReleaseFile(f"{layout.PROXY_SERVICE}.service", proxy.unit(plan, name))]
    return out


def _limits_kib(memlock: str) -> str:
    if memlock == "unlimited":
        return "unlimited"
    return str(max(1, int(memlock) // 1024))


def render(plan: Plan) -> Rendered:
    """All files of the plan's release, plus host files, with exact contents."""
    if plan.runtime not in ("docker", "native"):
        raise RenderError(f"runtime={plan.runtime!r}: unknown runtime", host=plan.host)
    if plan.runtime == "docker" and not plan.image:
        raise RenderError("runtime docker needs an image", host=plan.host)
    is_jetson = _is_jetson(plan)
    release_id = plan.release_id()
    rdir = layout.release_dir(release_id)
    files = [RenderedFile(f"{rdir}/{UNIT_FILE}", _engine_unit(plan, release_id, is_jetson))]
    net = network_files(plan)
    # in start order: the firewall, the engine's own units, the API proxy
    files += [RenderedFile(f"{rdir}/{f.name}", f.content)
              for f in [*net[:2], *_engine(plan).release_files(plan, release_id), *net[2:]]]
    files.append(RenderedFile(f"{rdir}/plan.json", plan.to_json() + "\n"))
    files.append(RenderedFile(
        LIMITS_PATH,
        template("limits.conf.j2", user=plan.service_user,
                 memlock=_limits_kib(plan.memlock), stack=STACK_BYTES // 1024),
    ))
    return Rendered(release_id=release_id, files=tuple(files))


def _is_jetson(plan: Plan) -> bool:
    device = load_catalog().devices.get(plan.device)
    return device.is_jetson if device is not None else plan.device.startswith(("orin", "agx"))


def _engine_unit(plan: Plan, release_id: str, is_jetson: bool) -> str:
    """The engine's systemd unit: its environment, credentials, sandbox and command."""
    docker = plan.runtime == "docker"
    speculation = describe_speculation(plan)
    engine = _engine(plan)
    env_lines, credentials = _unit_environment(plan, engine, docker)
    box = _sandbox(plan, engine, docker, is_jetson)

    argv = _docker_argv(plan, release_id, is_jetson) if docker else _native_argv(plan, release_id)
    return template(
        "specdec-engine.service.j2",
        plan=plan,
        release_id=release_id,
        speculation=speculation,
        docker=docker,
        environment=env_lines,
        credentials=credentials,
        cache_dir=ENGINE_CACHE,
        sandbox=box,
        firewall=layout.FIREWALL_SERVICE,
        limit_memlock="infinity" if plan.memlock == "unlimited" else plan.memlock,
        stack_bytes=STACK_BYTES,
        timeout_start=max(plan.health_timeout_s + 60, MIN_START_TIMEOUT),
        container=layout.SERVICE_NAME,
        exec_start=exec_line(argv),
        state_dir=layout.STATE_DIR,
        after="".join(" " + u for u in engine.unit_after(plan)),
    )


def _sandbox(plan: Plan, engine: Engine, docker: bool, is_jetson: bool) -> list[str]:
    """The engine unit's hardening: the docker CLI's, a CPU engine's or a GPU engine's."""
    if docker:
        return sandbox.docker_cli()
    device = load_catalog().devices.get(plan.device)
    if device is not None and device.is_cpu:
        return sandbox.cpu_engine([layout.HF_HOME], engine.peers(plan))
    return sandbox.gpu(is_jetson, [layout.HF_HOME], engine.peers(plan))


def _unit_environment(plan: Plan, engine: Engine, docker: bool) -> tuple[list[str], list[str]]:
    """The unit's ``Environment=`` lines and, natively, its ``LoadCredential=`` entries (a
    container gets its own environment and secrets on the docker command line)."""
    env_lines = [env_assignment(k, v) for k, v in hub_env()]
    env_lines.append(env_assignment("HF_HUB_OFFLINE", "1"))
    credentials: list[str] = []
    if not docker:
        cache = f"/var/cache/{ENGINE_CACHE}"
        env_lines += [env_assignment("HOME", cache), env_assignment("XDG_CACHE_HOME", cache)]
        env_lines += [env_assignment(k, v) for k, v in engine.environment(plan)]
        credentials = [f"{c}:{layout.CREDENTIALS[c]}" for c in
                       dict.fromkeys(c for _, c in engine.secret_env(plan))]
    env_lines += [env_assignment(k, v) for k, v in plan.env]
    return env_lines, credentials
