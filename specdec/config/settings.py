"""`HostSettings`: one host's validated ``specdec_*`` keys (parsed once, by
`specdec.plan.hostdata`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specdec.host.layout import SERVICE_USER
from specdec.plan.types import GatePolicy

__all__ = ["BENCH_MODES", "DEFAULT_BENCH_MODE", "DEFAULT_HEALTH_TIMEOUT", "DEFAULT_MEMLOCK",
           "PREFIX", "HostSettings"]

PREFIX = "specdec_"
DEFAULT_MEMLOCK = "unlimited"
DEFAULT_HEALTH_TIMEOUT = 900
# where the benchmark client runs: beside the engine (the host's python3), in the engine's
# image, or on the control node (`specdec.bench.remote`)
BENCH_MODES = ("host", "image", "control")
DEFAULT_BENCH_MODE = "host"


@dataclass(frozen=True)
class HostSettings:
    """The validated ``specdec_*`` keys of one host; ``None`` means "not set, use the default"."""

    host: str
    device: str | None = None
    engine: str | None = None
    runtime: str | None = None
    model: str | None = None
    method: str | None = None
    draft: str | None = None
    num_speculative_tokens: int | None = None  # None: auto (tuned on the host)
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    port: int | None = None
    image: str | None = None
    engine_version: str | None = None  # what the image (or native install) carries
    memlock: str = DEFAULT_MEMLOCK
    env: tuple[tuple[str, str], ...] = ()
    extra_args: tuple[str, ...] = ()
    jetson_tuning: bool = True
    health_timeout: int = DEFAULT_HEALTH_TIMEOUT
    gate: GatePolicy = dataclasses.field(default_factory=GatePolicy)
    model_params_b: float | None = None
    model_weight_gib: float | None = None
    model_kv_bytes_per_token: int | None = None
    model_tokenizer: str | None = None
    hf_token_file: str | None = None
    reverify: bool = False
    verify: bool = True  # False: provision and release only (no benchmark/gate)
    bench_mode: str = DEFAULT_BENCH_MODE  # where the benchmark client runs (BENCH_MODES)
    watch_action: str = "report"  # specdec_watch.action: report | reverify (specdec watch)
    service_user: str = SERVICE_USER
    # A serving group (engines that serve one model from several hosts): its name and the
    # member that runs the group's frontend.
    group: str | None = None
    group_frontend: str | None = None
    # The engine's own keys (`specdec.engines.base.Engine.read_options`), e.g. Dynamo's.
    engine_options: Any = None
    ssh_hostname: str | None = None  # where the control node reaches the host (inventory)
    ssh_user: str | None = None  # who the control node logs in as (inventory)
    # -- what the host opens to the network, and to whom (`specdec.plan.sockets`)
    listen: str | None = None  # the API proxy's address (default: every IPv4 address)
    allow_from: tuple[str, ...] | None = None  # networks that may reach the API (CIDRs)
    engine_port: int | None = None  # the engine's own HTTP port, on loopback behind the proxy
    api_key_file: str | None = None  # control node: the fleet's API key (else generated)
    tls: bool = True  # the API over HTTPS (specdec_tls: false turns it off)
    tls_cert_file: str | None = None  # control node: the operator's certificate for the API
    tls_key_file: str | None = None  # (else one from the fleet's CA, `specdec.config.pki`)
    api_key_scope: str = "inventory"  # one key per inventory, or per "host"
    ssh_port: int = 22  # the inventory's ssh_port: the firewall keeps it open
    # the host's own services the firewall admits (specdec_firewall_allow): (port, CIDRs)
    firewall_allow: tuple[tuple[int, tuple[str, ...]], ...] = ()
    pki_dir: str | None = None  # control node: serving groups' CAs and member certificates
    trust_remote_code: bool = False  # the engine may run the model repo's own Python code
    keys: frozenset[str] = frozenset()  # the specdec_* keys the data actually set ("pinned")
    # Sites (`specdec.plan.sites`): the host's site; whether it runs its site's mirror (and at which
    # address the site reaches it); where its Hub CLI downloads from (HF_ENDPOINT); what the
    # mirror fronts (Hub, CDN hosts, registries) and the resolver it looks them up with.
    site: str | None = None
    site_mirror: bool = False
    site_mirror_address: str | None = None
    hub_endpoint: str | None = None
    hub_upstream: str | None = None
    hub_cdn_hosts: tuple[str, ...] = ()
    registry_upstreams: tuple[tuple[str, str], ...] = ()  # registry -> upstream URL
    mirror_resolver: str | None = None
    hub_ca_file: str | None = None  # control node: the CA of a private Hub endpoint/upstream
    tune_cache: str | None = None  # the tune cache location (`specdec.tune.store`)
    # Resolved over the inventory by `specdec.plan.sites.resolve` (not keys): the Hub endpoint is
    # the
    # site's mirror; registry -> "address:port" of its pull-through cache at the site's mirror.
    hub_mirrored: bool = False
    registry_mirror: tuple[tuple[str, str], ...] = ()
    site_clients: tuple[str, ...] = ()  # a mirror host: its site's hosts, as networks

    def pinned(self, field_name: str) -> bool:
        """Whether ``specdec_<field_name>`` was set in the host's data."""
        return PREFIX + field_name in self.keys
