"""Shared pieces of the roles: the per-host plan, the one-line deploy error, the HF token."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import gevent
import gevent.event
from pyinfra.api import HiddenValue
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host

from roles.facts import DeviceIdentity, EngineVersions
from specdec.catalog import load_catalog
from specdec.errors import SpecdecError, redact
from specdec.groups.inventory import check_limit, check_plans, groups_of
from specdec.hftoken import read_token
from specdec.hostdata import parse_host_settings
from specdec.plan import baseline, plan_host_settings
from specdec.plan_types import Group, Plan
from specdec.render import Rendered, render
from specdec.report import reports_root
from specdec.settings import HostSettings
from specdec.tunecache import apply_cached
from specdec.watch import marks as watch_marks

__all__ = [
    "GATED_PREFIXES",
    "DeployError",
    "HostPlan",
    "SecretIO",
    "escalation",
    "gated_repos",
    "missing_token_message",
    "one_line",
    "plan_host",
    "prepare_host",
    "read_hf_token",
]

# Hugging Face repos that need an accepted licence (and so a token) to download.
GATED_PREFIXES = ("meta-llama/", "nvidia/Llama-")


class DeployError(PyinfraError):
    """A one-line, user-facing failure raised while preparing the deploy (before any change).

    pyinfra's CLI prints a `PyinfraError` raised by a deploy file as a single
    ``--> pyinfra error in FILE line N: MESSAGE`` line and exits 1 (no traceback).
    """


def escalation(data: Any) -> dict[str, Any]:
    """The connector arguments for commands run directly on a host with ``data`` (outside its
    own operations): its ``_sudo``, else sudo when it logs in as another user than root (as
    deploys/specdec.py decides for the operations)."""
    sudo = data.get("_sudo")
    if sudo is not None:
        return {"_sudo": bool(sudo)}
    user = data.get("ssh_user")
    return {"_sudo": True} if user and user != "root" else {}


def one_line(exc: BaseException) -> str:
    return " ".join(redact(str(exc)).split()) or type(exc).__name__


@dataclass(frozen=True)
class HostPlan:
    """Everything the roles need for one host, computed in prepare before any change."""

    plan: Plan
    rendered: Rendered
    baseline: Rendered | None  # speculation off; None when the plan already has it off
    is_jetson: bool
    settings: HostSettings  # the host's data, parsed (once per run)
    group: Group | None = None  # a serving group's member: the group


def plan_host(settings: HostSettings, identity: Any,
              installed: dict[str, str] | None = None, group: Group | None = None) -> HostPlan:
    """Plan and render one host; any `SpecdecError` becomes a one-line `DeployError`."""
    name = settings.host
    try:
        planned = plan_host_settings(settings, identity, installed=installed, group=group)
        # k: auto with a tuned entry in the cache: the plan carries the tuned values (noted)
        plan = apply_cached(planned, reports_root(), settings.reverify)
        rendered = render(plan)
        base = render(baseline(planned)) if plan.speculative else None
        device = load_catalog().device(plan.device)
    except SpecdecError as exc:
        msg = one_line(exc)
        if exc.host is None:
            msg = f"{name}: {msg}"
        raise DeployError(msg) from None
    return HostPlan(plan, rendered, base, device.is_jetson, settings, group)


def gated_repos(plan: Plan) -> list[str]:
    return [r for r in (plan.model, plan.draft) if r and r.startswith(GATED_PREFIXES)]


class SecretIO(BytesIO):
    """An in-memory upload source whose repr never shows the content."""

    def __repr__(self) -> str:
        return "<secret>"


def read_hf_token(settings: HostSettings) -> HiddenValue | None:
    """The HF token on the control node: the file named by ``specdec_hf_token_file``, else
    ``$HF_TOKEN``; None when neither is set. The value only ever travels as a `HiddenValue`."""
    try:
        token = read_token(settings.host, settings.hf_token_file)
    except SpecdecError as exc:
        raise DeployError(one_line(exc)) from None
    return HiddenValue(token) if token is not None else None


def missing_token_message(hp: HostPlan) -> str | None:
    """Why this host cannot be deployed without an HF token, or None."""
    gated = gated_repos(hp.plan)
    if not gated:
        return None
    return (
        f"{hp.plan.host}: {', '.join(gated)} is gated on Hugging Face but no token is given: "
        "set specdec_hf_token_file (a file on the control node) or $HF_TOKEN"
    )


def _prepare_one(h: Any, settings: HostSettings, token: HiddenValue | None,
                 group: Group | None) -> tuple[HostPlan, HiddenValue | None]:
    try:
        identity = h.get_fact(DeviceIdentity)
    except SpecdecError as exc:
        raise DeployError(f"{h.name}: {one_line(exc)}") from None
    if identity is None:
        raise DeployError(f"{h.name}: could not read the device identity files")
    # Natively, the engine release is what the host has installed (docker: the image's).
    native = (settings.runtime or "docker") == "native"
    installed = h.get_fact(EngineVersions) if native else None
    hp = plan_host(settings, identity, installed, group)
    if token is None and (msg := missing_token_message(hp)):
        raise DeployError(msg)
    return hp, token


_Prepared = dict[str, "tuple[HostPlan, HiddenValue | None] | DeployError"]


def _settings(h: Any) -> HostSettings:
    """The host's data; a host `specdec watch` marked (``specdec_watch: {action: reverify}``)
    verifies again as with ``specdec_reverify: true``."""
    try:
        s = parse_host_settings(h.name, h.data)
    except SpecdecError as exc:
        raise DeployError(one_line(exc)) from None
    if not s.reverify and watch_marks.get(reports_root(), h.name) is not None:
        s = dataclasses.replace(s, reverify=True)
    return s


def _prepare_all(state: Any) -> _Prepared:
    """Check every targeted host, then prepare every active one concurrently (read-only facts);
    results by host name.

    Host names, host data and HF tokens are checked first, for every host of the run (also one
    pyinfra could not connect to), before any fact is gathered on any host: the first bad one,
    in inventory order, stops them all.
    """
    targeted = [h for h in state.inventory if state.is_host_in_limit(h)]
    settings: dict[str, HostSettings] = {}
    tokens: dict[str, HiddenValue | None] = {}
    for h in targeted:  # host by host: the first bad one (data, then token) stops them all
        try:
            settings[h.name] = _settings(h)
            tokens[h.name] = read_hf_token(settings[h.name])
        except DeployError as exc:
            return {x.name: exc for x in state.inventory}
    try:  # serving groups over the whole inventory; a group is targeted whole or not at all
        for h in state.inventory:
            if h.name not in settings:
                settings[h.name] = parse_host_settings(h.name, h.data)
        groups = groups_of(settings[h.name] for h in state.inventory)
        check_limit(groups, [h.name for h in targeted])
    except SpecdecError as exc:
        err = DeployError(one_line(exc))
        return {x.name: err for x in state.inventory}
    active = set(state.inventory.get_active_hosts())
    results: _Prepared = {}

    def one(h: Any) -> None:
        with ctx_host.use(h):
            try:
                results[h.name] = _prepare_one(h, settings[h.name], tokens.get(h.name),
                                               groups.get(h.name))
            except DeployError as exc:
                results[h.name] = exc

    gevent.joinall([gevent.spawn(one, h) for h in targeted if h in active], raise_error=True)
    try:
        check_plans([r[0].plan for r in results.values() if not isinstance(r, DeployError)])
    except SpecdecError as exc:
        err = DeployError(one_line(exc))
        return {x.name: err for x in state.inventory}
    return results


def prepare_host(h: Any) -> tuple[HostPlan, HiddenValue | None]:
    """Validate data, identify, plan, render and read the token for pyinfra host ``h``.

    The first host to get here prepares *every* host (the others wait): names, data and tokens
    of all targeted hosts first, then facts and plans of the active ones. If any host is bad,
    every host raises the same one-line `DeployError` (the first bad host in inventory order).
    This runs in pyinfra's prepare phase, which only gathers read-only facts, so no host has
    been changed when the run stops.
    """
    from pyinfra import state

    st: Any = state._get_module() if hasattr(state, "_get_module") else state
    box: dict[str, Any] | None = getattr(st, "_specdec_prepared", None)
    if box is None:
        box = {"done": gevent.event.Event(), "results": None}
        st._specdec_prepared = box
        try:
            box["results"] = _prepare_all(st)
        finally:
            box["done"].set()
    else:
        box["done"].wait()
    results: _Prepared = box["results"] or {}
    if not results:
        raise DeployError(f"{h.name}: planning did not complete")
    active = set(st.inventory.get_active_hosts())
    order = [x.name for x in st.inventory if x in active]  # inventory order, not set order
    for name in order:
        res = results.get(name)
        if isinstance(res, DeployError):
            raise DeployError(str(res))
    mine = results.get(h.name)
    if mine is None or isinstance(mine, DeployError):
        raise DeployError(f"{h.name}: host was not planned")
    return mine
