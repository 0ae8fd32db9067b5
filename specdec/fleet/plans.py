"""An inventory's plans, offline, as the deploy will make them, with every problem of the run
reported at once (`specdec.errors.Problems`: one line each, per host) before any host is
contacted: bad host data (every bad key), a token that is missing for a gated model or
unreadable, a key or certificate file that is not there, a plan that does not fit (with what
would), members of a serving group that disagree. `specdec plan`, `specdec render` and the
rollout's check before its first batch all come through here, so they read the same data."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specdec.config.apikey import read_key
from specdec.config.hftoken import read_token
from specdec.config.inventory import load_inventory
from specdec.config.pki import read_tls_pair
from specdec.config.settings import HostSettings
from specdec.errors import Problems, SpecdecError
from specdec.plan import sites
from specdec.plan.groups import check_plans, groups_of
from specdec.plan.hostdata import parse_hosts_all
from specdec.plan.planner import missing_token, plan_host_settings
from specdec.plan.types import Group, Plan
from specdec.tune.cache import apply_cached
from specdec.tune.store import KEY as TUNE_KEY
from specdec.tune.store import check_location, location, open_store

__all__ = ["Fleet", "check_inputs", "data_overrides", "plan_fleet"]


@dataclass(frozen=True)
class Fleet:
    """What the run targets: its plans, every host's settings and the serving groups."""

    plans: list[Plan]
    settings: list[HostSettings]  # every host of the inventory (groups and sites span it)
    groups: dict[str, Group]


def data_overrides(data: Sequence[str]) -> dict[str, Any]:
    """``--data KEY=VALUE`` values as pyinfra reads them (pyinfra 3.10, pyinfra_cli/util.py
    parse_cli_arg: true/false, an integer, JSON, else the string)."""
    return {k.strip(): _cli_value(v) for k, v in (d.split("=", 1) for d in data)}


def _cli_value(arg: str) -> Any:
    if arg.lower() in ("true", "false"):
        return arg.lower() == "true"
    try:
        return int(arg)
    except ValueError:
        pass
    try:
        return json.loads(arg)
    except ValueError:
        return arg


def check_inputs(s: HostSettings, files: bool = True) -> tuple[bool, list[SpecdecError]]:
    """What a host's deploy reads on this machine: whether it has an HF token, and what is
    wrong with the token (and, with ``files``, the API key file or the TLS files)."""
    errors: list[SpecdecError] = []
    token = None
    try:
        token = read_token(s.host, s.hf_token_file)
    except SpecdecError as exc:
        errors.append(exc)
    try:
        if files and s.api_key_file:  # a named key file must be there (the default is made)
            read_key(s.api_key_file, s.host)
        if files and s.tls_cert_file and s.tls_key_file:
            read_tls_pair(s.tls_cert_file, s.tls_key_file, host=s.host)
        if s.tune_cache:  # the deploy opens it before any change; a URL needs its store
            check_location(TUNE_KEY, s.tune_cache, s.host)
    except SpecdecError as exc:
        errors.append(exc)
    return token is not None, errors


def plan_fleet(inventory: str, limit: str | None = None, data: Sequence[str] = (),
               tune_cache: str | None = None, files: bool = False) -> Fleet:
    """Every targeted host's plan (tune cache applied) or `Problems` with every error;
    ``files``: also the key and certificate files a deploy reads here (a rollout's check)."""
    chosen = load_inventory(inventory, limit)
    every_raw = load_inventory(inventory) if limit else chosen
    overrides = data_overrides(data)
    parsed, errors = parse_hosts_all(every_raw, overrides)
    problems: list[SpecdecError | str] = list(errors)
    names = [name for name, _ in chosen]
    settings, groups, grouped = parsed, {}, True
    try:  # groups and sites span the whole inventory
        settings = sites.resolve(parsed)
        groups = groups_of(settings)
    except SpecdecError as exc:
        problems.append(exc)
        grouped = False
    plans = []
    for s in settings:
        if s.host not in names or (s.group and not grouped):  # a bad group: said once
            continue
        has_token, bad = check_inputs(s, files)
        problems += bad
        try:
            plan = apply_cached(plan_host_settings(s, None, group=groups.get(s.host)),
                                open_store(location(tune_cache, inventory, s.tune_cache,
                                                    host=s.host)),
                                s.reverify)
        except SpecdecError as exc:
            problems.append(exc)
            continue
        if not bad and (why := missing_token(plan, has_token)):
            problems.append(why)
        plans.append(plan)
    try:
        check_plans(plans)
    except SpecdecError as exc:
        problems.append(exc)
    order = {name: i for i, (name, _) in enumerate(every_raw)}

    def where(p: SpecdecError | str) -> int:  # host by host, in inventory order
        host = p.host if isinstance(p, SpecdecError) else p.partition(": ")[0]
        return order.get(host or "", len(order))

    Problems.raise_if_any(sorted(problems, key=where))
    return Fleet(plans, settings, groups)
