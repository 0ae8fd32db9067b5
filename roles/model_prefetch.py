"""Prefetch the target and draft/head weights into HF_HOME=/var/lib/specdec/hf.

The token reaches ``hf download`` only as a file (HF_TOKEN_PATH), never on a command line.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy, operation

from roles.common import HostPlan
from roles.facts import HfCached
from specdec import layout
from specdec.render import CONTAINER_HF_TOKEN

__all__ = ["download_command", "model_prefetch", "prefetch"]


def download_command(repo: str, image: str | None) -> str:
    """``hf download REPO`` into the specdec cache: in ``image`` (docker) or on the host."""
    hf, q = layout.HF_HOME, shlex.quote
    if image:
        return " ".join([
            "docker", "run", "--rm", "--network", "host",
            "-v", f"{hf}:{hf}", "-e", f"HF_HOME={hf}",
            "-v", f"{layout.HF_TOKEN_FILE}:{CONTAINER_HF_TOKEN}:ro",
            "-e", f"HF_TOKEN_PATH={CONTAINER_HF_TOKEN}",
            # The engine images' entrypoint is the server (`vllm serve`); run `hf` instead.
            "--entrypoint", "hf", q(image), "download", q(repo),
        ])
    return f"env HF_HOME={hf} HF_TOKEN_PATH={layout.HF_TOKEN_FILE} hf download {q(repo)}"


@operation()
def prefetch(repo: str, image: str | None, owner: str):
    """Download ``repo`` unless its snapshot is cached, then hand the cache to ``owner``.

    + repo: Hugging Face repo id
    + image: run the download in this image (docker runtime), or None (native)
    + owner: the service user
    """
    if host.get_fact(HfCached, repo=repo):
        host.noop(f"{repo} is cached in {layout.HF_HOME}")
        return
    yield download_command(repo, image)
    yield f"chown -R {shlex.quote(owner)}:{shlex.quote(owner)} {layout.HF_HOME}"


@deploy("Model prefetch")
def model_prefetch(hp: HostPlan) -> None:
    """Target, then draft model / EAGLE head (if the plan has one)."""
    plan = hp.plan
    image = plan.image if plan.runtime == "docker" else None
    for repo in host.loop([r for r in (plan.model, plan.draft) if r]):
        prefetch(name=f"Download {repo} to {layout.HF_HOME}", repo=repo, image=image,
                 owner=plan.service_user)
