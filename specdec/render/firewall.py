"""The host's firewall for what specdec opens: an nftables table, ``table inet specdec``, that
the release carries and loads whole (pure rendering).

The table holds one input chain (nft(8): ``type filter hook input priority filter``, policy
accept): for every planned socket (`specdec.plan.sockets`) that is not on loopback, connections from
the networks allowed to reach it are accepted and every other new connection to that port is
refused (``reject with tcp reset``: a closed port to everyone else). It touches no other port,
so the host's own services and rules are unchanged; another table cannot undo a reject (a
packet passes only if every base chain on the hook accepts it: nft(8), "chains").

The file starts by adding and deleting the table, then declares it in full, so ``nft -f``
replaces the table in one transaction (nftables wiki "Atomic rule replacement"): never a
moment without it. ``specdec-firewall.service`` loads it (``ExecStart``/``ExecReload``) and
deletes the table when stopped, so a release that has no such unit removes it.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence

from specdec.host import layout
from specdec.plan.types import Plan, Socket
from specdec.render import sandbox
from specdec.render.unitfile import template

__all__ = ["NFT", "TABLE", "ruleset", "ruleset_name", "unit"]

TABLE = "specdec"
NFT = "/usr/sbin/nft"  # Debian / Ubuntu package nftables


def _sets(reach: Sequence[str]) -> tuple[list[str], list[str]]:
    v4 = [r for r in reach if ipaddress.ip_network(r).version == 4]
    v6 = [r for r in reach if ipaddress.ip_network(r).version == 6]
    return v4, v6


def _rules(s: Socket) -> list[str]:
    if not s.reach or ipaddress.ip_address(s.address).is_loopback:
        return []  # loopback only: nothing from outside reaches it
    dst = ""
    v4, v6 = _sets(s.reach)
    if s.address not in ("0.0.0.0", "::"):
        version = ipaddress.ip_address(s.address).version
        dst = f"{'ip' if version == 4 else 'ip6'} daddr {s.address} "
        v4, v6 = (v4, []) if version == 4 else ([], v6)  # one family reaches one address
    out = [f"# {s.unit}: {s.what} <- {s.who}"]
    if v4:
        out.append(f"{dst}tcp dport {s.port} ip saddr {{ {', '.join(v4)} }} accept")
    if v6:
        out.append(f"{dst}tcp dport {s.port} ip6 saddr {{ {', '.join(v6)} }} accept")
    out.append(f"{dst}tcp dport {s.port} ct state new reject with tcp reset")
    return out


def ruleset(plan: Plan) -> str:
    """The whole table for the plan's sockets (an empty chain when every socket is local)."""
    rules = [r for s in plan.sockets for r in _rules(s)]
    body = "\n".join(f"\t\t{r}" for r in rules)
    return (
        f"# Managed by specdec: the sockets of {plan.host}'s release (specdec plan lists them).\n"
        f"# Loaded whole by {layout.FIREWALL_SERVICE}.service; do not edit.\n"
        f"table inet {TABLE}\n"
        f"delete table inet {TABLE}\n"
        f"table inet {TABLE} {{\n"
        "\tchain input {\n"
        "\t\ttype filter hook input priority filter; policy accept;\n"
        "\t\tiif \"lo\" accept\n"
        "\t\tct state established,related accept\n"
        + (body + "\n" if body else "")
        + "\t}\n}\n"
    )


def ruleset_name(text: str) -> str:
    """The ruleset's file name in the release: named by its content, so the unit (which names
    it) changes exactly when the rules do."""
    return f"firewall-{hashlib.sha256(text.encode()).hexdigest()[:12]}.nft"


def unit(plan: Plan, name: str) -> str:
    path = f"{layout.CURRENT}/{name}"
    return template(
        "specdec-firewall.service.j2", plan=plan, nft=NFT, table=TABLE,
        state_dir=layout.STATE_DIR,
        load=f"{NFT} -f {path}",
        sandbox=sandbox.admin(["CAP_NET_ADMIN"], "AF_NETLINK"))
