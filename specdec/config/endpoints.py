"""Addresses a socket, a firewall rule or a peer can use, beyond their syntax (issue 29; the
syntax is `specdec.config.hygiene`'s)."""

from __future__ import annotations

import ipaddress
from typing import Any

from specdec.config.hygiene import _HOST_PORT, check_cidr, check_host_port, check_ip, fail

__all__ = ["check_endpoint", "check_remote_host", "check_source_network"]

# An address that parses is not yet one a host can listen on, a packet can come from or a peer
# can have: multicast and the limited broadcast are never a TCP endpoint (RFC 1122 sections
# 3.2.1.3 and 4.2.3.10: a segment to or from one is discarded), an IPv4-mapped IPv6 address
# (::ffff:0:0/96, RFC 4291 section 2.5.5.2) never appears on the wire (nftables' `ip6 saddr`
# never matches the IPv4 client it stands for), an IPv6 link-local address means nothing without
# the zone id specdec refuses (RFC 4007 section 6), a zone id has no place in nft's or nginx's
# syntax. A remote server of host data is neither this host (loopback, unspecified) nor its
# link (169.254.0.0/16 and fe80::/10, where clouds answer with instance credentials:
# 169.254.169.254), and "localhost" names this host too (RFC 6761 section 6.3).
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


def _not_endpoint(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """Why no TCP peer or listener is in ``net``, or None."""
    if net.is_multicast:
        return "is multicast (no TCP connection comes from or goes to it)"
    if net.version == 4 and net.broadcast_address == _BROADCAST and net.prefixlen == 32:
        return "is the broadcast address (no TCP connection comes from or goes to it)"
    if net.version == 6 and net.subnet_of(_MAPPED):  # type: ignore[arg-type]
        return ("is IPv4-mapped (::ffff:a.b.c.d never appears on the wire; write the IPv4 "
                "address)")
    return None


def check_endpoint(host: str | None, key: str, value: Any, *, wildcard: bool = False) -> str:
    """An IP address a host can listen on or a peer can have (``wildcard``: 0.0.0.0 and ::
    too, every address of the host)."""
    check_ip(host, key, value)
    ip = ipaddress.ip_address(value)
    why = _not_endpoint(ipaddress.ip_network(ip))
    if why is None and ip.is_unspecified and not wildcard:
        why = "is the unspecified address (no peer has it)"
    if why is None and ip.version == 6 and ip.is_link_local:
        why = "is IPv6 link-local (it needs a zone id, which a unit or a firewall rule cannot take)"
    if why is not None:
        raise fail(host, key, value, why)
    return value


def check_source_network(host: str | None, key: str, value: Any) -> str:
    """A network connections may come from (CIDR): `check_cidr`, without a zone id and not a
    network no TCP peer is in."""
    if isinstance(value, str) and "%" in value:
        raise fail(host, key, value, "has an IPv6 zone id (nft takes none)")
    net = check_cidr(host, key, value)
    why = _not_endpoint(ipaddress.ip_network(net))
    if why is not None:
        raise fail(host, key, value, why)
    return net


def check_remote_host(host: str | None, key: str, value: Any) -> str:
    """``host[:port]`` of a server elsewhere (`check_host_port`): not this host, not its link."""
    check_host_port(host, key, value)
    m = _HOST_PORT.fullmatch(value)
    assert m is not None
    name = m.group("host").strip("[]")
    if name.lower().rstrip(".") == "localhost" or name.lower().endswith(".localhost"):
        raise fail(host, key, value, "names this host (localhost); a remote server is needed")
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return value
    if ip.is_loopback or ip.is_unspecified or ip.is_link_local:
        raise fail(host, key, value, "is this host or its link (loopback, unspecified or "
                   "link-local: 169.254.169.254 is a cloud's metadata service), not a server")
    why = _not_endpoint(ipaddress.ip_network(ip))
    if why is not None:
        raise fail(host, key, value, why)
    return value
