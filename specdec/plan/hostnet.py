"""The network part of a host's data: where the API listens, who may reach it, the engine's
port behind it, the key and the certificates (`specdec.plan.sockets`, `specdec.config.apikey`,
`specdec.config.pki`). Read by `specdec.plan.hostdata`."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from specdec.config import endpoints, hygiene
from specdec.config.keys import KeyReader
from specdec.errors import REDACTED, ConfigError, redact

__all__ = ["DEFAULT_API_PORT", "MAX_ALLOW", "network_keys", "path_key"]

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
    """``specdec_tls: {cert: PATH, key: PATH}``: the operator's certificate and key (PEM files
    on the control node) for the API's HTTPS."""
    key = "specdec_tls"
    value = r.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or set(value) != {"cert", "key"}:
        raise r.fail(key, value, "must be a mapping {cert: PATH, key: PATH} (PEM files on the "
                     "control node)")
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
        **_tls(r, known),
    }
    port = r.get("specdec_port") if isinstance(r.get("specdec_port"), int) else DEFAULT_API_PORT
    if out["engine_port"] is not None and out["engine_port"] == port:
        raise r.fail("specdec_engine_port", out["engine_port"], "is specdec_port too: the API "
                     "proxy listens there, the engine behind it on another port")
    return {k: v for k, v in out.items() if v is not None}
