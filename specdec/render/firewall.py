"""The host's firewall: an nftables table, ``table inet specdec``, that the release carries and
loads whole (pure rendering).

The table's input chain (nft(8): ``type filter hook input priority filter``) drops every new
inbound connection (``policy drop``) but: loopback, established and related traffic, ICMP and
ICMPv6 (path MTU, IPv6 neighbour discovery), DHCP replies, SSH on the host's ``ssh_port`` (the
deploy's own way in), and the planned sockets (`specdec.plan.sockets`) from the networks allowed
to reach each (every other new connection to a planned port is refused with a TCP reset: a
closed port to everyone else). So a socket a ``--network host`` container or a stray process
opens outside the plan is reachable from loopback only. Another table cannot undo a drop: a
packet passes only if every base chain on the hook accepts it (nft(8), "chains").

The file starts by adding and deleting the table, then declares it in full, so ``nft -f``
replaces the table in one transaction (nftables wiki "Atomic rule replacement"): never a
moment without it. ``specdec-firewall.service`` loads it (``ExecStart``/``ExecReload``), records
the sha256 of ``nft list table`` as loaded (`LIVE_DIR`; `live_check` compares the live table
with it), and deletes the table when stopped. It is ordered after the distribution's
``nftables.service``, whose start, restart and reload flush the whole ruleset
(``/etc/nftables.conf`` begins with ``flush ruleset``; its ``ExecStop`` is ``nft flush
ruleset``): a drop-in (`NFTABLES_DROPIN`) reloads the table right after each. What flushes it
otherwise (``nft flush ruleset`` by hand) is restored by the next deploy (`live_check`).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence

from specdec.host import layout
from specdec.plan.types import Plan, Socket
from specdec.render import sandbox
from specdec.render.unitfile import exec_line, template

__all__ = ["LIVE_DIR", "NFT", "NFTABLES_DROPIN", "TABLE", "dropin", "live_check", "ruleset",
           "ruleset_name", "unit"]

TABLE = "specdec"
NFT = "/usr/sbin/nft"  # Debian / Ubuntu package nftables
LIVE_DIR = f"/run/{layout.FIREWALL_SERVICE}"  # the unit's RuntimeDirectory: <ruleset>.sha256
NFTABLES_DROPIN = "/etc/systemd/system/nftables.service.d/50-specdec.conf"
# What the chain accepts besides the planned sockets: ICMP and ICMPv6 (RFC 4890: neighbour
# discovery and path MTU need it), DHCP replies (a DHCPv4 offer is broadcast, a DHCPv6 reply
# comes from a link-local server: neither matches the client's conntrack entry).
_ALWAYS = ("meta l4proto { icmp, ipv6-icmp } accept",
           "udp sport 67 udp dport 68 accept",
           "ip6 saddr fe80::/10 udp sport 547 udp dport 546 accept")


def _sets(reach: Sequence[str]) -> tuple[list[str], list[str]]:
    v4 = [r for r in reach if ipaddress.ip_network(r).version == 4]
    v6 = [r for r in reach if ipaddress.ip_network(r).version == 6]
    return v4, v6


def _rules(s: Socket) -> list[str]:
    if not s.reach or ipaddress.ip_address(s.address).is_loopback:
        return []  # loopback only: nothing from outside reaches it (the policy drops it)
    dst = ""
    v4, v6 = _sets(s.reach)
    if s.address not in ("0.0.0.0", "::"):
        version = ipaddress.ip_address(s.address).version
        dst = f"{'ip' if version == 4 else 'ip6'} daddr {s.address} "
        v4, v6 = (v4, []) if version == 4 else ([], v6)  # one family reaches one address
    port = f"{s.port}-{s.port_end}" if s.port_end else str(s.port)
    out = [f"# {s.unit}: {s.what} <- {s.who}"]
    if v4:
        out.append(f"{dst}tcp dport {port} ip saddr {{ {', '.join(v4)} }} accept")
    if v6:
        out.append(f"{dst}tcp dport {port} ip6 saddr {{ {', '.join(v6)} }} accept")
    out.append(f"{dst}tcp dport {port} ct state new reject with tcp reset")
    return out


def ruleset(plan: Plan) -> str:
    """The whole table for the plan's sockets (an empty chain when every socket is local)."""
    rules = [*_ALWAYS, f"tcp dport {plan.ssh_port} accept",
             *(r for s in plan.sockets for r in _rules(s))]
    body = "\n".join(f"\t\t{r}" for r in rules)
    return (
        f"# Managed by specdec: the sockets of {plan.host}'s release (specdec plan lists them).\n"
        f"# Loaded whole by {layout.FIREWALL_SERVICE}.service; do not edit. Every other new\n"
        "# inbound connection is dropped.\n"
        f"table inet {TABLE}\n"
        f"delete table inet {TABLE}\n"
        f"table inet {TABLE} {{\n"
        "\tchain input {\n"
        "\t\ttype filter hook input priority filter; policy drop;\n"
        "\t\tiif \"lo\" accept\n"
        "\t\tct state established,related accept\n"
        "\t\tct state invalid drop\n"
        + body + "\n"
        + "\t}\n}\n"
    )


def ruleset_name(text: str) -> str:
    """The ruleset's file name in the release: named by its content, so the unit (which names
    it) changes exactly when the rules do."""
    return f"firewall-{hashlib.sha256(text.encode()).hexdigest()[:12]}.nft"


def _record(name: str) -> str:
    """The sha256 of the table as loaded, in the unit's runtime directory."""
    return (f"{NFT} list table inet {TABLE} | sha256sum > "
            f"\"$RUNTIME_DIRECTORY/{name.removesuffix('.nft')}.sha256\"")


def unit(plan: Plan, name: str) -> str:
    path = f"{layout.CURRENT}/{name}"
    return template(
        "specdec-firewall.service.j2", plan=plan, nft=NFT, table=TABLE,
        state_dir=layout.STATE_DIR, runtime_dir=layout.FIREWALL_SERVICE,
        load=[f"{NFT} -f {path}", exec_line(["/bin/sh", "-c", _record(name)])],
        sandbox=sandbox.admin(["CAP_NET_ADMIN"], "AF_NETLINK"))


def dropin() -> str:
    """``nftables.service``'s drop-in: its start, restart and reload flush every table, so each
    reloads ours right after (``try-``: only while ours runs; ``--no-block``: ours is ordered
    after it)."""
    again = (f"-/bin/systemctl --no-block try-reload-or-restart "
             f"{layout.FIREWALL_SERVICE}.service")
    return ("# Managed by specdec: nftables.service flushes the whole ruleset (its\n"
            f"# /etc/nftables.conf and ExecStop): reload table inet {TABLE} after it.\n"
            f"[Service]\nExecStartPost={again}\nExecReload={again}\n")


def live_check() -> str:
    """Prints ``ok`` when the live table is the one the running release loaded (its listing's
    sha256 is the one recorded at load), ``none`` when the host has no release firewall, else
    ``gone`` (flushed, deleted or changed since)."""
    cur = layout.CURRENT
    return (f"set -- {cur}/firewall-*.nft; if [ ! -e \"$1\" ] || [ $# -ne 1 ]; then echo none; "
            f"else n=$(basename \"$1\" .nft); if [ -f {LIVE_DIR}/\"$n\".sha256 ] && "
            f"[ \"$({NFT} list table inet {TABLE} 2>/dev/null | sha256sum)\" = "
            f"\"$(cat {LIVE_DIR}/\"$n\".sha256)\" ]; then echo ok; else echo gone; fi; fi")
