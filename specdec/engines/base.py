"""`Engine`: what the generic flow (host data, plan, render, host facts, verify) asks of an
engine. One implementation per engine (``specdec/engines/<name>/engine.py``), found by name in
`specdec.engines.registry`; nothing outside the engines tests an engine's name.

Abstract where every engine differs (its releases, its command line); a safe default for the rest,
so a new engine overrides only what it has: a config file, environment of its own, more units, a
serving group, host-data keys of its own. Modelled on pyinfra's connectors (``BaseConnector``: one
interface, one module per kind, looked up by name).
"""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from specdec.catalog import Model
from specdec.config import endpoints
from specdec.config.keys import KeyReader
from specdec.config.settings import HostSettings
from specdec.engines.ranges import first_version
from specdec.engines.support import Support, Target, with_first_ok
from specdec.engines.version import Version
from specdec.errors import ConfigError
from specdec.host import layout
from specdec.plan.types import DynamoPlan, Group, Plan, Socket

__all__ = ["LOOPBACK", "Endpoints", "Engine", "GroupSeat", "HostPackage", "MetricsSource",
           "ReleaseFile", "describe_speculation", "member_reach"]

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Endpoints:
    """Where a running engine answers on its HTTP port (readiness, model list, metrics)."""

    health: str = "/health"
    models: str = "/v1/models"
    metrics: str = "/metrics"
    metrics_format: str = "prometheus"  # or "trtllm-json" (TRT-LLM's iteration stats)


@dataclass(frozen=True)
class GroupSeat:
    """A member's place in its serving group, as verification reaches it."""

    group: str
    kind: str  # what reports call this kind of group, e.g. "NVIDIA Dynamo"
    is_frontend: bool  # the member that serves the group's one endpoint
    role: str  # what the member runs, for reports
    frontend_url: str  # the group's one endpoint (the OpenAI API clients use)
    member_url: str  # the member's own server: /health and metrics
    ready_path: str  # the frontend's route that counts the workers of {model} (200 when known)


@dataclass(frozen=True)
class MetricsSource:
    """Where `specdec watch` reads a running engine's own counters, on the host itself (never
    across the network), and which ones. ``format``: ``prometheus`` (``counters`` and ``gauges``
    map specdec's keys to sample names, summed over label sets) or ``json-iterations`` (a JSON
    list of per-iteration stats that drains on read; ``counters`` map keys to dotted paths
    summed per iteration, ``a*b`` a product, and ``gauges`` to per-iteration values weighted
    by the ``weight`` path). Keys: ``drafts``, ``draft_tokens``, ``accepted``, ``generated``,
    ``steps`` (sequence-steps), ``requests``; gauges ``running``, ``waiting``."""

    role: str  # engine | worker | frontend
    address: str  # as the host reaches it: 127.0.0.1, or the address the server binds
    port: int
    path: str
    format: str  # prometheus | json-iterations
    counters: tuple[tuple[str, str], ...]
    gauges: tuple[tuple[str, str], ...] = ()
    weight: str | None = None  # json-iterations: the path of an iteration's duration (ms)
    truth: bool = False  # the engine's own HTTP port (the lab's emulator answers /lab/truth)
    caveat: str | None = None  # why its acceptance counters cannot be read (None: they can)


@dataclass(frozen=True)
class ReleaseFile:
    """A file of the release besides the engine's unit (``name`` inside the release dir)."""

    name: str
    content: str


@dataclass(frozen=True)
class HostPackage:
    """A distribution package the host needs for this plan, and the distribution's own unit of
    it that must stay off (the release carries specdec's unit instead)."""

    package: str
    binary: str
    unit_off: str | None = None
    # turn unit_off off only when specdec installed the package (the host's own use of an
    # already installed package, e.g. its nginx, is left alone)
    off_only_if_installed: bool = False


def describe_speculation(plan: Plan) -> str:
    """``eagle3 HEAD k=3`` or ``off``: how units and engine files name the speculation."""
    if not plan.speculative:
        return "off"
    return plan.method + (f" {plan.draft}" if plan.draft else "") + \
        f" k={plan.num_speculative_tokens}"


class Engine(ABC):
    """One serving engine, stateless (the registry holds one instance per engine)."""

    name: ClassVar[str]  # specdec_engine's value, e.g. "vllm"
    label: ClassVar[str]  # as its makers write it, e.g. "vLLM"
    # -- host data
    # flags specdec sets (or that could set them again) -> what to use instead
    managed_flags: ClassVar[Mapping[str, str]] = {}
    # flags that load code or open listeners, refused -> what they do
    unsafe_flags: ClassVar[Mapping[str, str]] = {}
    # the CLI takes an unambiguous prefix of a flag (argparse's allow_abbrev)
    abbreviated_flags: ClassVar[bool] = False
    reserved_env: ClassVar[tuple[str, ...]] = ()  # environment the engine's units set
    option_keys: ClassVar[tuple[str, ...]] = ()  # specdec_<key>s of this engine only
    # -- plan
    serves_groups: ClassVar[bool] = False  # several hosts serve one model as a group
    group_kind: ClassVar[str] = ""  # what reports call its groups, e.g. "NVIDIA Dynamo"
    tunes_on_host: ClassVar[bool] = True  # k auto is measured on the host's own API
    installed_hint: ClassVar[str] = "nothing on PATH answers --version"

    def check_args(self, host: str | None, key: str, args: tuple[str, ...]) -> None:
        """Refuse arguments whose value (not the flag alone) makes them unsafe (`ConfigError`);
        by default none."""
        return None

    # -- release facts -----------------------------------------------------------------------
    @abstractmethod
    def check(self, version: Version, method: str, target: Target) -> Support:
        """Whether ``version`` runs ``method`` for ``target`` (the facts module's answer)."""

    @abstractmethod
    def releases(self) -> list[Version]:
        """Releases at which something the engine accepts changes."""

    @abstractmethod
    def check_head(self, version: Version, fmt: str) -> Support:
        """Whether ``version`` loads an EAGLE head checkpoint in format ``fmt``
        (`specdec.catalog.HEAD_FORMATS`; the facts module's answer)."""

    def release_problem(self, version: Version) -> str | None:
        """Why ``version`` is not a release of this engine the facts know (None: fine)."""
        return None

    def support(self, version: Version, method: str, target: Target) -> Support:
        """`check`, with the first later release that can when it cannot."""
        return with_first_ok(self.check, self.releases(), version, method, target)

    def head_support(self, version: Version, fmt: str) -> Support:
        """`check_head`, with the first later release that loads the format when it cannot."""
        got = self.check_head(version, fmt)
        if got.ok:
            return got
        return replace(got, first_ok=first_version(self.releases(), version,
                                                   lambda v: self.check_head(v, fmt).ok))

    def spec_config_release(self, plan: Plan) -> str | None:
        """The vLLM release whose ``--speculative-config`` the engine takes (None: not vLLM's)."""
        return None

    def per_batch_k(self, plan: Plan) -> bool:
        """Whether the release takes a k per batch size (tuned as a schedule)."""
        return False

    def schedule_nonincreasing(self) -> bool:
        """Whether a k-per-batch-size schedule may not draft more above its first range."""
        return False

    # -- host data ---------------------------------------------------------------------------
    def read_options(self, r: KeyReader) -> Mapping[str, Any]:
        """This engine's own keys (`option_keys`) as found, each checked; unset ones omitted."""
        return {}

    def options(self, s: HostSettings) -> Any:
        """The typed options of a host of this engine (from ``s.engine_options``)."""
        return None

    # -- plan --------------------------------------------------------------------------------
    def release_notes(self, s: HostSettings, version: Version, origin: str) -> list[str]:
        """Notes (and checks) about the release a host runs, beyond its number and origin."""
        return []

    def speculation_details(self, version: Version, method: str,
                            draft: str | None) -> tuple[str | None, str | None]:
        """(TensorRT-LLM's ``decoding_type``, local draft directory) for a method at a release."""
        return None, None

    def tiktoken_dir(self, model: Model) -> str | None:
        """``TIKTOKEN_ENCODINGS_BASE`` when the engine reads the model's encoding from files."""
        return None

    def member_address(self, s: HostSettings) -> str | None:
        """A serving-group member's address for the group's traffic, when set explicitly."""
        return None

    def group_part(self, s: HostSettings, group: Group, version: Version, port: int,
                   method: str, k: int, notes: list[str]) -> DynamoPlan | None:
        """The host's part in its serving group (`serves_groups` engines)."""
        return None

    def group_seat(self, plan: Plan) -> GroupSeat | None:
        """Where verification reaches a group member and its group (None: not a member)."""
        return None

    def describe_group(self, plan: Plan) -> str:
        """A member's group in one line: its endpoint and how the engine serves it."""
        seat = self.group_seat(plan)
        return f"{seat.frontend_url}/v1" if seat is not None else ""

    def ready_workers(self, body: str) -> int:
        """The workers a group frontend's readiness answer (`GroupSeat.ready_path`) counts."""
        return 0

    # -- render ------------------------------------------------------------------------------
    @abstractmethod
    def argv(self, plan: Plan, config_path: str | None) -> list[str]:
        """The engine's command line, from its program name on (``config_path``: where the
        engine reads `config_file` from, when it has one)."""

    def native_command(self, plan: Plan, argv: list[str]) -> list[str]:
        """`argv` as the native unit runs it (the installed program's path)."""
        return [f"/usr/local/bin/{argv[0]}", *argv[1:]]

    def environment(self, plan: Plan) -> list[tuple[str, str]]:
        """Environment of the engine's own, after the Hub's and the token's."""
        return []

    def hub_cli_dir(self, plan: Plan) -> str | None:
        """Natively: where the engine's install keeps its Hugging Face CLI, when it is not on
        PATH (the prefetch looks there first)."""
        return None

    def config_file(self, plan: Plan) -> str | None:
        """The name of the release file the engine reads its settings from, if any."""
        return None

    def release_files(self, plan: Plan, release_id: str) -> list[ReleaseFile]:
        """Files of the release besides the unit (engine YAML, more units)."""
        return []

    def unit_after(self, plan: Plan) -> list[str]:
        """Units of the release the engine's unit starts after."""
        return []

    def host_packages(self, plan: Plan) -> list[HostPackage]:
        """Distribution packages the release's units need on the host."""
        return []

    # -- the network (`specdec.plan.sockets`) ---------------------------------------------------
    def serves_api(self, plan: Plan) -> bool:
        """Whether the host serves the OpenAI API (specdec's API proxy fronts it on
        ``plan.port``; the engine itself listens on loopback only)."""
        return True

    def secret_env(self, plan: Plan) -> list[tuple[str, str]]:
        """Secrets the engine reads from its environment: (variable, credential name of
        `specdec.host.layout.CREDENTIALS`), e.g. its own API key check behind the proxy. Set at
        start from the credential, never written into a unit."""
        return []

    def peers(self, plan: Plan) -> tuple[str, ...] | None:
        """Networks the engine's processes talk to besides loopback (CIDRs; its unit's IP
        filter); None: any (a container's, which the docker CLI's unit does not confine)."""
        return ()

    def sockets(self, plan: Plan) -> list[Socket]:
        """Every socket the engine's units listen on; the API proxy's are
        `specdec.plan.sockets`'."""
        return [Socket(layout.SERVICE_NAME, f"{self.label} HTTP, behind the API proxy", LOOPBACK,
                       plan.engine_port, (), "the API proxy and the benchmark on this host")]

    # -- host facts and verify ---------------------------------------------------------------
    @abstractmethod
    def version_probe(self) -> str:
        """A shell snippet printing ``<name>=<version>`` when the engine is installed natively."""

    def endpoints(self, plan: Plan) -> Endpoints:
        return Endpoints()

    # -- watch -------------------------------------------------------------------------------
    def metrics_sources(self, plan: Plan) -> list[MetricsSource]:
        """Where the running release's counters are read on the host (`specdec watch`);
        empty: the engine exposes none the watch knows."""
        return []

def member_reach(members: Sequence[tuple[str, str]], key: str = "specdec_dynamo_address"
                 ) -> tuple[str, ...]:
    """The members' addresses as /32 or /128 networks (a host name cannot be firewalled: the
    member's address for its group's traffic must be an IP address)."""
    out = []
    for name, addr in members:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            raise ConfigError(f"{key}={addr!r}: must be an IP address (the group's firewall "
                              "lets its members in by address; set it, or ssh_hostname, to "
                              "the member's IP)", host=name) from None
        endpoints.check_endpoint(name, key, addr)  # no multicast, mapped or link-local one
        out.append(str(ipaddress.ip_network(ip)))
    return tuple(out)
