"""Serving groups from the inventory.

A host with ``specdec_engine: dynamo`` belongs to the group named by ``specdec_group`` (set it
per host or in ``group_data``); without it the host is a group of its own. One member runs the
group's etcd and frontend: ``specdec_group_frontend`` (every member that sets it must name the
same member), else the first member in inventory order. A member's address for the group's
traffic is ``specdec_dynamo_address``, else its ``ssh_hostname``, else its inventory name.

A group deploys, verifies and rolls back as one: a ``--limit`` or a rollout batch takes all of
its members or none, and its members must plan the same model and speculation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.errors import ConfigError
from specdec.hostdata import parse_host_settings
from specdec.plan_types import Plan

__all__ = ["Group", "check_limit", "check_plans", "groups_of", "plans_by_group", "units"]


@dataclass(frozen=True)
class Group:
    name: str
    members: tuple[str, ...]  # inventory order
    frontend: str
    addresses: tuple[tuple[str, str], ...]  # (member, address)

    def address(self, member: str) -> str:
        return dict(self.addresses)[member]

    @property
    def frontend_address(self) -> str:
        return self.address(self.frontend)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "members": list(self.members), "frontend": self.frontend,
                "addresses": dict(self.addresses)}


def _address(name: str, data: Mapping[str, Any], explicit: str | None) -> str:
    if explicit:
        return explicit
    ssh = data.get("ssh_hostname")
    if isinstance(ssh, str) and ssh.strip():
        return ssh.strip()
    return name.rsplit("/", 1)[-1]


def groups_of(hosts: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Group]:
    """Every Dynamo host's group, by host name (bad input: `ConfigError`)."""
    members: dict[str, list[tuple[str, str, str | None]]] = {}
    for name, data in hosts:
        s = parse_host_settings(name, data)
        if (s.engine or "vllm") != "dynamo":
            continue
        group = s.group or name
        members.setdefault(group, []).append(
            (name, _address(name, data, s.dynamo_address), s.group_frontend))
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
    """The Dynamo plans among ``plans``, by group name, in order."""
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
