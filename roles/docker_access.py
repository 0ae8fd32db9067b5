"""Service user, docker group, and the nvidia runtime + ulimits in /etc/docker/daemon.json. A
site's registry caches serve HTTPS with the site's certificate (Docker trusts its CA through
``/etc/docker/certs.d``, `specdec.roles.site_mirror`): never an insecure registry; one an older
specdec listed there is taken out."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, server, systemd

from specdec.host import layout
from specdec.render.files import STACK_BYTES
from specdec.roles.common import NOLOGIN, HostPlan
from specdec.roles.facts import DAEMON_JSON, DockerDaemonConfig, UserAccount

__all__ = ["daemon_config", "docker_access", "merged_daemon_json", "service_user"]

NVIDIA_RUNTIME = {"path": "nvidia-container-runtime", "runtimeArgs": []}


def merged_daemon_json(
    current: dict[str, Any] | None, memlock: str, jetson: bool, secure: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``current`` with specdec's keys merged in; every other key (and runtime/ulimit) kept.
    ``secure``: the site's registry caches (``host:port``, HTTPS), taken out of
    ``insecure-registries`` (an older specdec put them there)."""
    doc: dict[str, Any] = json.loads(json.dumps(current or {}))  # deep copy
    have = doc.get("insecure-registries")
    if secure and isinstance(have, list) and any(r in secure for r in have):
        kept = [r for r in have if r not in secure]
        if kept:
            doc["insecure-registries"] = kept
        else:
            doc.pop("insecure-registries")
    if jetson:
        runtimes = doc.get("runtimes")
        runtimes = dict(runtimes) if isinstance(runtimes, dict) else {}
        nvidia = runtimes.get("nvidia")
        entry = dict(nvidia) if isinstance(nvidia, dict) else {}
        entry["path"] = NVIDIA_RUNTIME["path"]
        entry.setdefault("runtimeArgs", [])
        runtimes["nvidia"] = entry
        doc["runtimes"] = runtimes
    limit = -1 if memlock == "unlimited" else int(memlock)
    ulimits = doc.get("default-ulimits")
    ulimits = dict(ulimits) if isinstance(ulimits, dict) else {}
    ulimits["memlock"] = {"Name": "memlock", "Hard": limit, "Soft": limit}
    ulimits["stack"] = {"Name": "stack", "Hard": STACK_BYTES, "Soft": STACK_BYTES}
    doc["default-ulimits"] = ulimits
    return doc


@operation()
def daemon_config(memlock: str, jetson: bool, secure: tuple[str, ...] = ()):
    """Merge specdec's keys into /etc/docker/daemon.json; upload only when the result differs.

    + memlock: "unlimited" or bytes (the plan's ``memlock``)
    + jetson: also register the nvidia container runtime
    + secure: the site's registry caches (HTTPS): never insecure registries
    """
    current = host.get_fact(DockerDaemonConfig)
    desired = merged_daemon_json(current, memlock, jetson, secure)
    if current is not None and desired == current:
        host.noop(f"{DAEMON_JSON} already has specdec's runtime and ulimits")
        return
    yield "install -d -m 0755 /etc/docker"
    text = json.dumps(desired, indent=2, sort_keys=True) + "\n"
    yield FileUploadCommand(StringIO(text), DAEMON_JSON)


@operation()
def service_user(user: str, group: str, home: str, shell: str, groups: tuple[str, ...] = ()):
    """A system account with this primary group, home and shell, in ``groups`` besides its own
    (added, none removed), marked as specdec's (its comment: `layout.ACCOUNT_MARK`): pyinfra's
    ``server.user`` (3.10 operations/server.py: the same ``useradd``/``usermod`` arguments for
    ``system=True, append=True, ensure_home=False``) reading only this account (`UserAccount`),
    not every account of the host (``Users``). An account that is not specdec's never gets
    here (`specdec.roles.common` refuses it in prepare).

    + user, group, home, shell: the account; groups: its supplementary groups
    """
    found = host.get_fact(UserAccount, user=user).get(user)
    extra = [QuoteString(g) for g in groups]
    joined = StringCommand(*[p for g in extra for p in (",", g)][1:], _separator="")
    mark = ["-c", QuoteString(layout.ACCOUNT_MARK)]
    if found is None:
        args: list[Any] = [*mark, "-d", QuoteString(home), "-s", QuoteString(shell),
                           "-g", QuoteString(group)]
        if groups:
            args += ["-G", joined]
        yield StringCommand("useradd", *args, "-r", "-M", QuoteString(user))
        return
    mod: list[Any] = mark if found.get("comment") != layout.ACCOUNT_MARK else []
    if found.get("home") != home:
        mod += ["-d", QuoteString(home)]
    if found.get("shell") != shell:
        mod += ["-s", QuoteString(shell)]
    if found.get("group") != group:
        mod += ["-g", QuoteString(group)]
    if groups and not set(groups).issubset(found.get("groups") or ()):
        mod += ["-a", "-G", joined]
    if mod:
        yield StringCommand("usermod", *mod, QuoteString(user))
    else:
        host.noop(f"user {user} exists")


@deploy("Docker access")
def docker_access(hp: HostPlan) -> OperationMeta | None:
    """The service user (system user, home /var/lib/specdec) and, for the docker runtime, the
    docker group membership and daemon.json; docker restarts only when daemon.json changed.

    Returns the daemon.json op (a docker restart stops the engine's container, so the engine is
    restarted too when it changed), or None for the native runtime.
    """
    plan = hp.plan
    docker = plan.runtime == "docker"
    if docker:
        server.group(name="Ensure group docker", group="docker", system=True)
    server.group(
        name=f"Ensure group {plan.service_user}", group=plan.service_user, system=True,
    )
    service_user(
        name=f"Ensure service user {plan.service_user}",
        user=plan.service_user,
        group=plan.service_user,
        home=layout.STATE_DIR,
        shell=NOLOGIN,
        groups=("docker",) if docker else (),
    )
    files.directory(
        name=f"Ensure {layout.STATE_DIR}",
        path=layout.STATE_DIR, user="root", group="root", mode="0755",
    )
    files.directory(
        name=f"Ensure {layout.CONFIG_DIR}",
        path=layout.CONFIG_DIR, user="root", group="root", mode="0755",
    )
    files.directory(
        name=f"Ensure {layout.HF_HOME}",
        path=layout.HF_HOME, user=plan.service_user, group=plan.service_user, mode="0755",
    )
    if not docker:
        return None
    cfg = daemon_config(
        name=f"Merge runtime and ulimits into {DAEMON_JSON}",
        memlock=plan.memlock,
        jetson=hp.is_jetson,
        secure=tuple(addr for _, addr in hp.settings.registry_mirror),
    )
    systemd.service(
        name="Restart docker (daemon.json changed)",
        service="docker.service",
        running=True,
        restarted=True,
        _if=cfg.did_change,
    )
    return cfg
