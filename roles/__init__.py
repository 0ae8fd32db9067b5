"""Thin pyinfra ``@deploy`` roles, one concern each, converging a host to its rendered plan.

Every decision comes from the plan (`specdec.plan`) and its rendering (`specdec.render`); the
roles only compare facts with it and send what differs. `deploys/specdec.py` composes them.
Installed as `specdec.roles` (the repository's top-level ``roles/``): the pyinfra layer, which
may import every package of specdec but the CLI; nothing in specdec imports it.
"""

from __future__ import annotations

from specdec.roles.common import (
    DeployError,
    HostPlan,
    escalation,
    plan_host,
    prepare_host,
    read_hf_token,
)
from specdec.roles.docker_access import docker_access
from specdec.roles.hf_token import hf_token
from specdec.roles.host_packages import host_packages
from specdec.roles.images import images
from specdec.roles.jetson_tuning import jetson_tuning
from specdec.roles.lock import deploy_lock, deploy_unlock, renew_lease
from specdec.roles.model_prefetch import model_prefetch
from specdec.roles.secrets import host_secrets
from specdec.roles.serve import ServeResult, serve
from specdec.roles.site_mirror import site_mirror
from specdec.roles.ulimits import ulimits
from specdec.roles.verify import verify

__all__ = [
    "DeployError",
    "HostPlan",
    "ServeResult",
    "deploy_lock",
    "deploy_unlock",
    "docker_access",
    "escalation",
    "hf_token",
    "host_packages",
    "host_secrets",
    "images",
    "jetson_tuning",
    "model_prefetch",
    "plan_host",
    "prepare_host",
    "read_hf_token",
    "renew_lease",
    "serve",
    "site_mirror",
    "ulimits",
    "verify",
]
