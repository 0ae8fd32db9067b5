"""What one verification is given: `VerifySpec`, its `FileSpec`s and `Roofline`, and `HostIO`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specdec.gate.rounds import BenchSettings, RoundBench
from specdec.plan.types import Plan
from specdec.render.files import RenderedFile as FileSpec  # a file verification writes on the host
from specdec.tune.store import TuneStore

__all__ = ["FileSpec", "HostIO", "Roofline", "VerifySpec"]


class HostIO(Protocol):
    """What verification needs from the world."""

    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        """Run a shell command on the host as root: (success, stdout lines)."""
        ...

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        """GET from the control node, with the fleet's API key: (status, body); status 0 when
        unreachable."""
        ...

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        """GET from the host itself (over its connection): a serving group's member-only
        servers, which the control node cannot reach. (status, body); 0 when unreachable."""
        ...

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        """Benchmark ``url`` as ``run`` says (levels, requests, prompt offsets, tokens,
        warmup); write and return the bench JSON. Raises `BenchError`."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def monotonic(self) -> float: ...


@dataclass(frozen=True)
class Roofline:
    bandwidth_gbs: float  # peak memory bandwidth (in the host's power mode when known)
    model_bytes: int  # bytes read per decode step at batch 1 (weights, or active experts)
    time_scale: float = 1.0  # engine emulator: wall seconds per emulated second
    bandwidth_source: str = "catalog device peak"
    power: dict[str, Any] | None = None  # the host's power mode and clocks (Jetsons)

    @property
    def tokens_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 / self.model_bytes if self.model_bytes > 0 else 0.0


@dataclass(frozen=True)
class VerifySpec:
    plan: Plan  # the candidate's plan
    address: str  # host address the control node reaches the engine at
    candidate: str  # release id of the plan
    desired: str  # what serve made current (candidate, or a recorded baseline)
    baseline_id: str | None = None  # speculation-off release; None when the plan has none
    baseline_files: tuple[FileSpec, ...] = ()  # uploaded when the baseline release is absent
    restarted: bool = False  # serve restarted the engine in this run
    reverify: bool = False
    benchmark: bool = True  # False (specdec_verify=false): health and process checks only
    prior_current: str | None = None  # `current` before this deploy changed anything
    secret_sha256: str | None = None  # of the HF token; the token itself never comes here
    cache_dir: Path | None = None  # baseline bench cache (<inventory state>/cache/<host>)
    work_dir: Path | None = None  # where bench JSONs of this run go
    bench: BenchSettings = field(default_factory=BenchSettings)
    roofline: Roofline | None = None
    poll_s: float = 2.0
    run_id: str = ""
    tune_cache: TuneStore | None = None  # where tuned entries go (specdec.tune.store)
    bench_mode: str = "host"  # where the bench client runs (specdec.bench.remote.MODES)
    api_key_file: str | None = None  # control node: the fleet's API key (the path, not the key)
    ca_file: str | None = None  # control node: the CA of the API's certificate (None: system's)

    @property
    def tunes(self) -> bool:
        """The tune phase runs: k is auto and the plan carries no tuned value yet."""
        p = self.plan
        return p.speculative and p.k_auto and not p.tuned and bool(p.tune_methods)
