"""The network part of host data (`specdec.plan.hostdata`): where the API listens and who may
reach it, its key and TLS, the firewall's own openings; and control-node paths."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from specdec.config import endpoints, hygiene
from specdec.config.keys import KeyReader, key_text
from specdec.errors import REDACTED, ConfigError, redact

__all__ = ["API_KEY_SCOPES", "DEFAULT_API_PORT", "MAX_ALLOW", "network_keys", "path_key"]

MAX_ALLOW = 64  # networks in specdec_allow_from
DEFAULT_API_PORT = 8000  # specdec_port's default (specdec.plan.planner.DEFAULT_PORT)


def path_key(r: KeyReader, key: str) -> str | None:
    """A control-node path (never the secret itself)."""
    value = r.get(key)
    if isinstance(value, str) and redact(value) != value:
        raise ConfigError(f"{key}={REDACTED}: must be a path to a file on the control node, "
                          "not the secret itself", host=r.host)
    return r.str_(key, max_len=hygiene.MAX_PATH)


def _allow_from(r: KeyReader) -> tuple[str, ...] | None:
    key = "specdec_allow_from"
    value = r.get(key)
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise r.fail(key, value, "must be a non-empty list of networks (CIDR, e.g. "
                     "['10.0.0.0/8', '192.168.1.0/24'])")
    hygiene.check_size(r.host, key, value, MAX_ALLOW)
    nets = [endpoints.check_source_network(r.host, f"{key}[{i}]", v) for i, v in enumerate(value)]
    return tuple(dict.fromkeys(nets))


def _tls(r: KeyReader, known: Collection[str]) -> dict[str, Any]:
    """``specdec_tls``: unset, the API serves HTTPS with a certificate of the fleet's CA;
    ``{cert: PATH, key: PATH}``, with the operator's (PEM files on the control node);
    ``false``, plain HTTP (the key then crosses the network in clear)."""
    key = "specdec_tls"
    value = r.get(key)
    if value is None:
        return {}
    if value is False:
        return {"tls": False}
    if not isinstance(value, Mapping) or set(value) != {"cert", "key"}:
        raise r.fail(key, value, "must be false or a mapping {cert: PATH, key: PATH} (PEM "
                     "files on the control node)")
    sub = KeyReader(r.host, {f"{key}.{k}": v for k, v in value.items()}, known)
    return {"tls_cert_file": path_key(sub, f"{key}.cert"),
            "tls_key_file": path_key(sub, f"{key}.key")}


def network_keys(r: KeyReader, known: Collection[str]) -> dict[str, Any]:
    """Where the API listens, who may reach it, the engine's port behind it, the key and the
    certificates (`specdec.plan.sockets`, `specdec.config.apikey`, `specdec.config.pki`)."""
    listen = r.get("specdec_listen")
    out: dict[str, Any] = {
        "listen": None if listen is None else endpoints.check_endpoint(r.host, "specdec_listen",
                                                                      listen, wildcard=True),
        "allow_from": _allow_from(r),
        "engine_port": r.int_("specdec_engine_port", 1024, 65535),
        "api_key_file": path_key(r, "specdec_api_key_file"),
        "pki_dir": path_key(r, "specdec_pki_dir"),
        "trust_remote_code": r.bool_("specdec_trust_remote_code", False),
        "api_key_scope": r.str_("specdec_api_key_scope", API_KEY_SCOPES),
        "firewall_allow": _firewall_allow(r),
        **_tls(r, known),
    }
    port = r.get("specdec_port") if isinstance(r.get("specdec_port"), int) else DEFAULT_API_PORT
    if out["engine_port"] is not None and out["engine_port"] == port:
        raise r.fail("specdec_engine_port", out["engine_port"], "is specdec_port too: the API "
                     "proxy listens there, the engine behind it on another port")
    return {k: v for k, v in out.items() if v is not None}


API_KEY_SCOPES = ("inventory", "host")
MAX_FIREWALL_ALLOW = 32


def _firewall_allow(r: KeyReader) -> tuple[tuple[int, tuple[str, ...]], ...] | None:
    """``specdec_firewall_allow: {PORT: [CIDR, ...]}``: the host's own TCP services the
    firewall admits, from those networks (every other new inbound connection is dropped)."""
    key = "specdec_firewall_allow"
    value = r.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise r.fail(key, value, "must be a mapping of TCP port to a list of networks, e.g. "
                     "{9100: ['10.0.0.0/8']}")
    hygiene.check_size(r.host, key, value, MAX_FIREWALL_ALLOW)
    out = []
    for port, nets in value.items():
        field = f"{key}.{key_text(port)}"
        hygiene.check_int(r.host, field, port, 1, 65535)
        if isinstance(nets, str) or not isinstance(nets, list | tuple) or not nets:
            raise hygiene.fail(r.host, field, nets, "must be a non-empty list of networks "
                               "(CIDR)")
        hygiene.check_size(r.host, field, nets, MAX_ALLOW)
        cidrs = tuple(dict.fromkeys(hygiene.check_cidr(r.host, f"{field}[{i}]", n)
                                    for i, n in enumerate(nets)))
        out.append((port, cidrs))
    return tuple(sorted(out))
