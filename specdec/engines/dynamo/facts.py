"""NVIDIA Dynamo releases as data: the vLLM release each pins, and what its worker and frontend
take. Dynamo's vLLM worker (``python -m dynamo.vllm``) hands every flag it does not know to
vLLM's own parser, so what a speculative config may hold is the pinned vLLM release's
(`specdec.engines.vllm.facts`).

Sources: the ``ai-dynamo`` wheel on PyPI (``METADATA`` Requires-Dist), the ``ai-dynamo-runtime``
wheel (the ``DYN_*`` names compiled into ``dynamo/_core.abi3.so``), ``python -m dynamo.frontend
--help`` / ``python -m dynamo.mocker --help`` of that release, and docs.nvidia.com/dynamo/v1.6.1
(reference/compatibility: "vLLM 0.31.0, NIXL 1.4.1, CUDA 13.0; ARM64 (Ubuntu 24.04 only)").
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.engines.support import Support, Target
from specdec.engines.version import Version
from specdec.engines.vllm.facts import check as vllm_check
from specdec.engines.vllm.facts import check_head as vllm_check_head

__all__ = [
    "EAGLE3_ONLY",
    "LISTENER_ENV",
    "boundaries",
    "check",
    "DEFAULT_MIGRATION_LIMIT",
    "DEFAULT_ROUTER_MODE",
    "DEFAULT_SYSTEM_PORT",
    "SYSTEM_PORT_MAX",
    "READY_PATH",
    "RELEASES",
    "ROUTER_MODES",
    "DynamoFacts",
    "dynamo_facts",
    "known_releases",
]


@dataclass(frozen=True)
class DynamoFacts:
    version: Version
    vllm: Version  # the vLLM release the ai-dynamo[vllm] extra pins
    nixl: str
    source: str


# ai-dynamo X METADATA: Requires-Dist: vllm[flashinfer,otel,runai]==V; extra == "vllm".
RELEASES: dict[str, tuple[str, str, str]] = {
    "1.6.1": ("0.31.0", "1.4.1",
              "ai-dynamo 1.6.1 METADATA: vllm[flashinfer,otel,runai]==0.31.0, nixl[cu13]==1.4.1 "
              "(extra vllm); docs.nvidia.com/dynamo/v1.6.1/reference/compatibility"),
}

# python -m dynamo.frontend --help (1.6.1): --router-mode.
ROUTER_MODES = ("round-robin", "random", "power-of-two", "kv", "direct", "least-loaded",
                "device-aware-weighted")
# A group's defaults (specdec/dynamo/plan.py says why): the worker's system server port as in
# Dynamo's launch scripts (DYN_SYSTEM_PORT=8081, examples/backends/vllm/launch/
# agg_spec_decoding.sh), the frontend's default router, request migration on.
DEFAULT_SYSTEM_PORT = 8081
# ai-dynamo-runtime 1.6.1 reads DYN_SYSTEM_PORT into an i16 (its Rust config, env prefix
# `DYN_SYSTEM_`): 53525 fails at worker start with 'invalid value unsigned int `53525`, expected
# i16 for key "SYSTEM_PORT"' (measured here with the PyPI wheel), so a system port is <= 32767.
SYSTEM_PORT_MAX = 32767
DEFAULT_ROUTER_MODE = "round-robin"
DEFAULT_MIGRATION_LIMIT = 3
# The frontend's readiness route: 200 once every worker type of the model is present, 404 when
# no worker serves it ("/health" stays "healthy" with no worker left; "/ready" is a 404).
READY_PATH = "/v1/models/{model}/ready"
# Environment the runtime reads (names found in ai-dynamo-runtime 1.6.1's _core.abi3.so; the
# frontend and mocker --help name DYN_DISCOVERY_BACKEND, DYN_REQUEST_PLANE, DYN_HTTP_PORT).
# Reserved (a name ending in "_" reserves the prefix): what specdec sets, and what would move
# a plane, its address or its TLS, etcd's endpoints or credentials (ETCD_AUTH_* take the
# PEM contents: lib/runtime/src/transports/etcd.rs ClientOptions::default), the frontend's
# HTTP and TLS (frontend_args.py: DYN_HTTP_HOST, DYN_TLS_CERT_PATH, ...) or its admin API.
ENV_NAMES = ("DYN_DISCOVERY_BACKEND", "DYN_REQUEST_PLANE", "DYN_RESPONSE_PLANE",
             "DYN_EVENT_PLANE", "DYN_EVENT_PLANE_HOST", "DYN_NAMESPACE", "DYN_TCP_",
             "DYN_SYSTEM_", "DYN_HTTP_", "DYN_TLS_", "DYN_ZMQ_", "DYN_DISABLE_FRONTEND_",
             "ETCD_")
# Listeners the worker opens on every interface when asked (ai-dynamo 1.6.1): the forward-pass
# metrics publisher, ZMQ PUB on tcp://*:DYN_FORWARDPASS_METRIC_PORT (dynamo/vllm/envs.py:20-23,
# dynamo/vllm/args.py:319-323, instrumented_scheduler.py), also turned on by DYN_FPM_TRACE
# (dynamo/common/configuration/groups/runtime_args.py:116-135).
LISTENER_ENV = ("DYN_FORWARDPASS_METRIC_PORT", "DYN_FPM_TRACE")
# DYN_SYSTEM_ENABLED is deprecated in 1.6.1 (the runtime logs "DYN_SYSTEM_ENABLED is
# deprecated. System metrics server is now controlled solely by DYN_SYSTEM_PORT",
# lib/runtime/src/config.rs): the system server is on when DYN_SYSTEM_PORT is positive.


def known_releases() -> list[str]:
    return sorted(RELEASES, key=Version.parse)


def dynamo_facts(version: Version | str) -> DynamoFacts | None:
    """The facts of a Dynamo release, or None when the table does not know it (its vLLM pin is
    then unknown, so nothing it renders could be checked)."""
    v = version if isinstance(version, Version) else Version.parse(version)
    row = RELEASES.get(str(v))
    if row is None:
        return None
    vllm, nixl, source = row
    return DynamoFacts(v, Version.parse(vllm), nixl, source)


# Dynamo's speculative-decoding guide (docs/features/speculative_decoding/
# speculative_decoding_vllm.md, "Limitations"): only EAGLE-3 is supported as the draft model;
# dynamo.vllm still hands --speculative-config to vLLM unchanged (dynamo/vllm/args.py).
EAGLE3_ONLY = ("Dynamo's vLLM speculative-decoding guide lists only EAGLE-3 as "
               "supported; dynamo.vllm passes the config to vLLM {vllm} unchanged")


def check(v: Version, method: str, target: Target) -> Support:
    """What Dynamo ``v``'s vLLM worker runs: what its pinned vLLM release runs."""
    facts = dynamo_facts(v)
    if facts is None:
        return Support(False, f"Dynamo {v} is not in the release table (its vLLM pin is not "
                       f"known; known: {', '.join(known_releases())})",
                       "specdec/engines/dynamo/facts.py RELEASES")
    inner = vllm_check(facts.vllm, method, target)
    src = f"{facts.source}; {inner.source}"
    if not inner.ok:
        return Support(False, f"{inner.reason} (Dynamo {v} runs vLLM {facts.vllm})", src)
    return Support(True, "", src, caveat=inner.caveat)


def check_head(v: Version, fmt: str) -> Support:
    """Which EAGLE head formats Dynamo ``v``'s vLLM worker loads: its pinned vLLM's."""
    facts = dynamo_facts(v)
    if facts is None:
        return Support(False, f"Dynamo {v} is not in the release table",
                       "specdec/engines/dynamo/facts.py RELEASES")
    inner = vllm_check_head(facts.vllm, fmt)
    return Support(inner.ok, f"{inner.reason} (Dynamo {v} runs vLLM {facts.vllm})"
                   if not inner.ok else "", f"{facts.source}; {inner.source}")


def boundaries() -> list[Version]:
    return [Version.parse(r) for r in known_releases()]
