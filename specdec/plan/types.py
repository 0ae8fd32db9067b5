"""The plan: one immutable, typed value per host. Everything downstream reads it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANY_NETWORK", "K_MAX", "DynamoPlan", "FitReport", "GatePolicy", "Group", "Plan",
           "Socket", "http_url"]

ANY_NETWORK = ("0.0.0.0/0", "::/0")  # specdec_allow_from's default: the API needs its key


K_MAX = 8  # the tune's search domain is k = 1..K_MAX (num_speculative_tokens: auto)
POINTS_PER_METHOD = 4  # the tune measures at most three points and one repeat per method


@dataclass(frozen=True)
class GatePolicy:
    """Seed 000's rule, as data (read statistically: see `specdec.gate.decide`). Ratios are
    candidate
    vs baseline."""

    keep_min_throughput_gain: float = 0.30  # c=1: throughput_tok_s >= +30%
    keep_min_tpot_reduction: float = 0.20  # c=1: tpot_ms_p50 >= 20% lower
    disable_below_gain: float = 0.10  # c=1: gain < 10% -> disable (named in the reason)
    max_regression_c8: float = 0.10  # c=8 tolerance: a regression counts beyond -10%
    keep_concurrency: int = 1
    guard_concurrency: int = 8
    confidence: float = 0.95  # per rule, for a true value outside the indifference zone
    disable_confidence: float = 0.999  # any rule, for a true value above the zone: it is
    # not failed (a gain wrongly disabled) with this probability over all looks (0.1%: a
    # fleet decides hundreds of setups, and a wrong disable loses the whole gain)
    indifference: float = 0.10  # log-ratio zone: ± a keep threshold, below the c=8 one
    max_rounds: int = 6  # rounds at most (looks of the sequential test: the error budget is
    # split over all of them); at the last one an open keep rule disables
    max_scale: float = 2.0  # a round measures at most this multiple of its default requests
    run_noise: float = 0.03  # least sd of a whole run's speed (log scale), per arm (a floor:
    # the gate estimates it from what it measures)
    request_noise: float = 0.05  # least sd of one request's speed (log scale), per arm

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FitReport:
    """Memory budget of one configuration, in GiB."""

    device_gib: float
    usable_gib: float  # device_gib * gpu_memory_utilization
    target_gib: float
    draft_gib: float
    overhead_gib: float  # activations, CUDA graphs, runtime
    kv_gib: float  # what is left for the KV cache
    kv_needed_gib: float  # one sequence of max_model_len (target + draft KV)
    max_concurrency: float  # kv_gib / kv_needed_gib

    @property
    def fits(self) -> bool:
        return self.kv_gib >= self.kv_needed_gib


@dataclass(frozen=True)
class Group:
    """A serving group of the inventory: hosts that serve one model behind one frontend and
    deploy, verify and roll back as one (`specdec.plan.groups`)."""

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


@dataclass(frozen=True)
class Socket:
    """A socket a host listens on (`specdec.plan.sockets`): what opens it, where, and who may
    connect (``reach``: networks in CIDR notation; empty: this host only, on loopback)."""

    unit: str  # the systemd unit whose process listens, e.g. "specdec-proxy"
    what: str  # e.g. "OpenAI API (key required)"
    address: str  # the bind address
    port: int
    reach: tuple[str, ...]  # CIDRs the host's firewall lets connect
    who: str  # who must reach it, in words
    port_end: int | None = None  # a range port..port_end (a listener on an ephemeral port)


@dataclass(frozen=True)
class DynamoPlan:
    """A host's part in a Dynamo serving group (``specdec_engine: dynamo``): every member runs a
    worker; the frontend member also runs etcd (discovery) and the OpenAI frontend. Requests go
    over Dynamo's TCP request plane, events over its default ZMQ plane: no NATS."""

    vllm_version: str  # the vLLM release the Dynamo release pins (its worker's engine)
    group: str
    frontend: str  # inventory name of the member running etcd + the frontend
    frontend_address: str  # where members reach etcd and clients the frontend
    address: str  # this host's address for the group's traffic (bind and advertise)
    is_frontend: bool
    system_port: int  # the worker's system server (health, metrics, the model card files)
    router_mode: str
    migration_limit: int
    etcd_port: int = 2379
    etcd_peer_port: int = 2380
    namespace: str = "dynamo"
    members: tuple[tuple[str, str], ...] = ()  # (member, address) of every member

    @property
    def etcd_endpoint(self) -> str:
        """The group's etcd, over TLS with a client certificate (`specdec.config.pki`)."""
        return f"https://{_url_host(self.frontend_address)}:{self.etcd_port}"

    @property
    def rpc_port(self) -> int:
        """The worker's TCP request plane (DYN_TCP_RPC_PORT): beside its system port."""
        return self.system_port + 1

    @property
    def stream_port(self) -> int:
        """The frontend's TCP response stream (DYN_TCP_RESPONSE_STREAM_PORT)."""
        return self.system_port + 2


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def http_url(address: str, port: int, tls: bool = False) -> str:
    """``http://address:port`` (``https://`` with ``tls``; an IPv6 address in brackets)."""
    return f"{'https' if tls else 'http'}://{_url_host(address)}:{port}"


@dataclass(frozen=True)
class Plan:
    host: str
    device: str  # catalog device id
    engine: str  # vllm | trtllm
    runtime: str  # docker | native
    image: str | None  # repo:tag[@sha256:...] for docker; None for native
    engine_version: str  # the engine release the image (or the host, natively) carries
    model: str  # HF repo id of the target
    served_model_name: str
    method: str  # vLLM spelling; "none" = speculation off
    draft: str | None  # EAGLE head or draft model repo id (None for ngram/none)
    num_speculative_tokens: int  # 0 when method == "none"
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    port: int
    memlock: str  # "unlimited" or a byte count, e.g. "8388608" (lab ceiling)
    jetson_tuning: bool
    health_timeout_s: int
    gate: GatePolicy
    fit: FitReport
    extra_args: tuple[str, ...] = ()  # appended verbatim to the engine command line
    env: tuple[tuple[str, str], ...] = ()  # non-secret environment for the engine
    notes: tuple[str, ...] = field(default=())  # why choices were made (for reports)
    service_user: str = "specdec"  # runs the engine (in the docker group for docker runtime)
    pinned: tuple[str, ...] = ()  # specdec_* keys the host data set (baseline keeps pinned values)
    decoding_type: str | None = None  # TensorRT-LLM's spelling of the method for engine_version
    draft_dir: str | None = None  # local directory of the draft/head, when the engine needs one
    tiktoken_dir: str | None = None  # TIKTOKEN_ENCODINGS_BASE (gpt-oss on trtllm-serve)
    k_auto: bool = False  # k is tuned on the host (specdec_num_speculative_tokens: auto)
    tune_methods: tuple[tuple[str, str | None], ...] = ()  # compared by the tune (first: this)
    k_by_batch: tuple[tuple[int, int, int], ...] = ()  # num_speculative_tokens_per_batch_size
    tuned: str | None = None  # the tune cache entry whose values this plan carries
    dynamo: DynamoPlan | None = None  # engine dynamo: the host's part in its serving group
    # -- the network (`specdec.plan.sockets`): the API proxy on listen:port for allow_from, the
    # engine on 127.0.0.1:engine_port behind it; every socket the host opens
    listen: str = "0.0.0.0"
    allow_from: tuple[str, ...] = ANY_NETWORK
    engine_port: int = 8001
    tls: bool = True  # the API proxy serves HTTPS (the fleet CA's certificate, or the operator's)
    trust_remote_code: bool = False
    sockets: tuple[Socket, ...] = ()
    ssh_port: int = 22  # the firewall keeps SSH open (the deploy's own way in)

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["speculative"] = self.speculative
        if d.get("dynamo") is None:
            d.pop("dynamo", None)  # keeps the release ids of the other engines as they were
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def release_id(self) -> str:
        """Content id of what this plan runs (host name excluded)."""
        d = self.to_dict()
        for k in ("host", "notes", "pinned"):
            d.pop(k)
        # ids as they were when plans carried this env value as a field of its own
        d["fault"] = dict(self.env).get("SPECDEC_EMU_FAULT")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
