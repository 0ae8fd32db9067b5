"""Serving groups from the inventory.

A host whose engine serves groups (`specdec.engines.base.Engine.serves_groups`: Dynamo) belongs
to the group named by ``specdec_group`` (set it per host or in ``group_data``); without it the
host is a group of its own. One member runs the group's frontend: ``specdec_group_frontend``
(every member that sets it must name the same member), else the first member in inventory order.
A member's address for the group's traffic is what its engine says (``specdec_dynamo_address``),
else its ``ssh_hostname``, else its inventory name; it must be an IP address (the group's
firewall admits its members by address).

A group deploys, verifies and rolls back as one: a ``--limit`` or a rollout batch takes all of
its members or none, and its members must plan the same model and speculation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from specdec.config.settings import HostSettings
from specdec.engines.base import member_reach
from specdec.engines.registry import engine
from specdec.errors import ConfigError
from specdec.plan.types import Group, Plan

__all__ = ["Group", "check_limit", "check_plans", "groups_of", "plans_by_group", "units"]


def _address(s: HostSettings) -> str:
    explicit = engine(s.engine).member_address(s)
    if explicit:
        return explicit
    ssh = s.ssh_hostname
    if ssh and ssh.strip():
        return ssh.strip()
    return s.host.rsplit("/", 1)[-1]


def groups_of(hosts: Iterable[HostSettings]) -> dict[str, Group]:
    """Every group-serving host's group, by host name (bad input: `ConfigError`)."""
    members: dict[str, list[tuple[str, str, str | None]]] = {}
    for s in hosts:
        if not engine(s.engine).serves_groups:
            continue
        group = s.group or s.host
        members.setdefault(group, []).append((s.host, _address(s), s.group_frontend))
    out: dict[str, Group] = {}
    for group, rows in members.items():
        names = [n for n, _, _ in rows]
        chosen = {f for _, _, f in rows if f is not None}
        if len(chosen) > 1:
            raise ConfigError(f"specdec_group_frontend: group {group!r} names several frontends "
                              f"({', '.join(sorted(chosen))}); name one", host=rows[0][0])
        frontend = chosen.pop() if chosen else names[0]
        if frontend not in names:
            raise ConfigError(f"specdec_group_frontend={frontend!r}: not a member of group "
                              f"{group!r} (members: {', '.join(names)})", host=rows[0][0])
        # the group's firewall lets its members in by address (`specdec.plan.sockets.member_reach`)
        member_reach([(n, a) for n, a, _ in rows])
        seen: dict[str, str] = {}
        for n, addr, _ in rows:
            if addr in seen:
                raise ConfigError(f"specdec_dynamo_address={addr!r}: also the address of "
                                  f"{seen[addr]} in group {group!r}", host=n)
            seen[addr] = n
        g = Group(group, tuple(names), frontend, tuple((n, a) for n, a, _ in rows))
        for n in names:
            out[n] = g
    return out


def check_limit(groups: Mapping[str, Group], targeted: Iterable[str]) -> None:
    """A group is targeted whole or not at all (`ConfigError` naming what is missing)."""
    chosen = set(targeted)
    for name in sorted(chosen):
        g = groups.get(name)
        if g is None:
            continue
        missing = [m for m in g.members if m not in chosen]
        if missing:
            raise ConfigError(f"specdec_group={g.name!r}: the hosts chosen include "
                              f"{', '.join(m for m in g.members if m in chosen)} but not "
                              f"{', '.join(missing)}; a serving group deploys as one (limit "
                              "to all its members)", host=name)


# What the members of one group must agree on: they serve one model name behind one frontend,
# and the gate keeps or disables speculation for all of them at once.
_SHARED = ("engine_version", "model", "served_model_name", "method", "draft",
           "num_speculative_tokens", "port", "gate", "runtime")


def plans_by_group(plans: Sequence[Plan]) -> dict[str, list[Plan]]:
    """The plans of group members among ``plans``, by group name, in order."""
    out: dict[str, list[Plan]] = {}
    for p in plans:
        if p.dynamo is not None:
            out.setdefault(p.dynamo.group, []).append(p)
    return out


def check_plans(plans: Sequence[Plan]) -> None:
    """The members of each group plan the same model, speculation, release and gate."""
    for group, ps in plans_by_group(plans).items():
        first = ps[0]
        for p in ps[1:]:
            for key in _SHARED:
                a, b = getattr(first, key), getattr(p, key)
                if a != b:
                    raise ConfigError(
                        f"group {group!r}: {key} {b!r} differs from {first.host}'s {a!r}; the "
                        "members of a serving group plan the same model, speculation, release "
                        "and gate (set them in the group's data)", host=p.host)


def units(hosts: Sequence[str], groups: Mapping[str, Group]) -> list[list[str]]:
    """``hosts`` as deploy units, in order: a group's members together (at the position of its
    first member), every other host alone."""
    out: list[list[str]] = []
    placed: set[str] = set()
    chosen = set(hosts)
    for h in hosts:
        if h in placed:
            continue
        g = groups.get(h)
        unit = [m for m in g.members if m in chosen] if g is not None else [h]
        placed.update(unit)
        out.append(unit)
    return out
