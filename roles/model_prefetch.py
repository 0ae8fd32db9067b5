"""Prefetch the target and draft/head weights (and assets) the engine will read offline.

Commands and checks come from `specdec.host.prefetch`; the token reaches the Hugging Face CLI only
as a file (HF_TOKEN_PATH), never on a command line, and only for a repo that needs it (gated,
or one the catalog does not know); every file is checked against the Hub's hash before use.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import Sha256File

from specdec.catalog import load_catalog
from specdec.engines.registry import engine_of
from specdec.engines.trtllm.facts import TIKTOKEN_FILES
from specdec.host import layout, prefetch
from specdec.plan.sites import download_env
from specdec.roles.common import HostPlan
from specdec.roles.facts import HfCached
from specdec.roles.lock import leased

__all__ = ["model_prefetch", "prefetch_repo", "tiktoken_encoding"]


@operation()
def prefetch_repo(repo: str, image: str | None, owner: str, local_dir: str | None = None,
                  endpoint: tuple[tuple[str, str], ...] = (), cli_dir: str | None = None,
                  token: bool = True):
    """Download ``repo`` unless a complete copy is cached, as ``owner`` (the cache is theirs:
    root writes nothing into it, `specdec.host.prefetch`).

    + repo: Hugging Face repo id
    + image: run the download in this image (docker runtime), or None (native)
    + owner: the service user
    + local_dir: also/instead a plain directory copy (engines that need a path)
    + endpoint: HF_ENDPOINT and what goes with it (the site mirror), or () for the Hub
    + cli_dir: natively, where the engine's install keeps its Hub CLI (searched before PATH)
    + token: the repo needs the HF token (gated, or not in the catalog); else none is sent
    """
    if host.get_fact(HfCached, repo=repo, local_dir=local_dir, user=owner):
        where = local_dir or layout.HF_HOME
        host.noop(f"{repo} is completely downloaded in {where}")
        return
    # a download may take hours: the deploy lock's lease is renewed while it runs
    yield leased(prefetch.download_command(repo, image, local_dir, owner, endpoint, cli_dir,
                                           token))


@operation()
def tiktoken_encoding(encoding: str, owner: str):
    """The tiktoken encoding file in TIKTOKEN_ENCODINGS_BASE, with openai/harmony's sha256.

    + encoding: file name, e.g. o200k_base.tiktoken
    + owner: the service user
    """
    path = f"{layout.TIKTOKEN_DIR}/{encoding}"
    if host.get_fact(Sha256File, path=path) == TIKTOKEN_FILES[encoding]:
        host.noop(f"{path} is present and verified")
        return
    yield leased(prefetch.tiktoken_command(encoding, owner))


@deploy("Model prefetch")
def model_prefetch(hp: HostPlan) -> None:
    """Target, then draft model / EAGLE head (a local copy too where the engine needs a path),
    then the tiktoken encodings gpt-oss reads on trtllm-serve."""
    plan = hp.plan
    image = plan.image if plan.runtime == "docker" else None
    cli_dir = None if image else engine_of(plan).hub_cli_dir(plan)
    endpoint = tuple(download_env(hp.settings))
    via = f" via {hp.settings.hub_endpoint}" if hp.settings.hub_endpoint else ""
    cat = load_catalog()
    # a target drafting for itself is one repo
    for repo in host.loop(list(dict.fromkeys(r for r in (plan.model, plan.draft) if r))):
        prefetch_repo(name=f"Download {repo} to {layout.HF_HOME}{via}", repo=repo, image=image,
                      owner=plan.service_user, endpoint=endpoint, cli_dir=cli_dir,
                      token=cat.needs_token(repo))
    if plan.draft and plan.draft_dir:
        prefetch_repo(name=f"Download {plan.draft} to {plan.draft_dir}{via}", repo=plan.draft,
                      image=image, owner=plan.service_user, local_dir=plan.draft_dir,
                      endpoint=endpoint, token=cat.needs_token(plan.draft))
    if plan.tiktoken_dir:
        for enc in host.loop(sorted(TIKTOKEN_FILES)):
            tiktoken_encoding(name=f"Fetch {enc} to {plan.tiktoken_dir}", encoding=enc,
                              owner=plan.service_user)
