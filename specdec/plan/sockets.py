"""Every socket a host opens, planned: the unit that listens, its address and port, and who may
connect. `specdec plan` shows them, the firewall (`specdec.render.firewall`) enforces them.

A host that serves the OpenAI API runs specdec's API proxy (`specdec.render.proxy`) on
``specdec_listen``
(default every IPv4 address) and ``specdec_port``, reachable from ``specdec_allow_from`` (default
any network: every request needs the fleet's API key); the engine itself listens on loopback
only, on ``specdec_engine_port``, because no engine's own key covers every route that reaches
the model (vLLM's guards only ``/v1`` and a few other prefixes: ``/invocations``, ``/metrics``,
``/tokenize`` stay open, vLLM docs/usage/security.md "Do not rely exclusively on --api-key";
trtllm-serve and the Dynamo frontend have no key option). A serving group's sockets (its
engine's `Engine.sockets`) are bound to the member's group address and reach the group's members
only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specdec.engines.base import LOOPBACK, Engine
from specdec.errors import ConfigError
from specdec.host import layout
from specdec.plan.types import ANY_NETWORK, Plan, Socket

__all__ = ["DEFAULT_LISTEN", "LOOPBACK", "describe", "operator_sockets", "plan_sockets",
           "table"]

DEFAULT_LISTEN = "0.0.0.0"
_WILDCARD = ("0.0.0.0", "::")


def _who(reach: tuple[str, ...]) -> str:
    if not reach:
        return "this host only"
    if set(reach) >= set(ANY_NETWORK):
        return "any network (API key required)"
    return "networks " + ", ".join(reach)


def _api(plan: Plan) -> list[Socket]:
    what = "OpenAI API, key required" + (" (HTTPS)" if plan.tls else "")
    out = [Socket(layout.PROXY_SERVICE, what, plan.listen, plan.port, plan.allow_from,
                  "API clients: " + _who(plan.allow_from))]
    if plan.listen not in (*_WILDCARD, LOOPBACK):
        # the on-host benchmark and health checks reach the API on loopback
        out.append(Socket(layout.PROXY_SERVICE, what, LOOPBACK, plan.port, (),
                          "the benchmark on this host"))
    return out


def _check(plan: Plan, sockets: Iterable[Socket]) -> None:
    """Two sockets on one port collide when their addresses overlap (a wildcard overlaps all);
    a range of ephemeral ports is no bind of its own."""
    seen: dict[int, list[Socket]] = {}
    for s in sockets:
        if s.port_end is not None:
            continue
        for other in seen.get(s.port, []):
            if s.address == other.address or s.address in _WILDCARD or \
                    other.address in _WILDCARD:
                raise ConfigError(f"port {s.port}: {s.what} ({s.unit}) and {other.what} "
                                  f"({other.unit}) would both listen on it (specdec_port, "
                                  "specdec_engine_port and the engine's ports must differ)",
                                  host=plan.host)
        seen.setdefault(s.port, []).append(s)


def plan_sockets(plan: Plan, engine: Engine, extra: Sequence[Socket] = ()
                 ) -> tuple[Socket, ...]:
    """The host's sockets: the API proxy's (where the engine serves the API), the engine's and
    ``extra`` (a site mirror's, the operator's own services')."""
    out = (_api(plan) if engine.serves_api(plan) else []) + engine.sockets(plan) + list(extra)
    _check(plan, out)
    return tuple(out)


def operator_sockets(opened: Sequence[tuple[int, tuple[str, ...]]]) -> list[Socket]:
    """The host's own services the operator opens (``specdec_firewall_allow``)."""
    return [Socket("(the host's own)", "a service of the host's (specdec_firewall_allow)",
                   "0.0.0.0", port, nets, _who(nets)) for port, nets in opened]


def _port(s: Socket) -> str:
    return f"{s.port}-{s.port_end}" if s.port_end else str(s.port)


def describe(s: Socket) -> str:
    """One line: ``specdec-proxy 0.0.0.0:8000 OpenAI API, key required <- API clients: …``."""
    addr = f"[{s.address}]" if ":" in s.address else s.address
    return f"{s.unit} {addr}:{_port(s)} {s.what} <- {s.who}"


def table(plans: Sequence[Plan]) -> list[tuple[str, str, str, str, str]]:
    """(host, unit, address:port, what, who) per socket of every plan."""
    return [(p.host, s.unit, f"{s.address}:{_port(s)}", s.what, s.who)
            for p in plans for s in p.sockets]
