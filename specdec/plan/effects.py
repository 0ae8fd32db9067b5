"""What a plan's first deploy does to a host beyond serving the model, and how long it takes:
the effects a user should know before a rollout (a power-mode change that can reboot the device,
packages installed and units masked, an API key made on this machine, the tune's restarts), one
line each, and a first-deploy estimate from the plan's own figures. Pure: the plan is offline,
so what depends on the host's present state says "can" and why.

Imports `specdec.plan.types`, `.packages`, the engine registry, `specdec.config.apikey` (where
the key is made)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specdec.config.apikey import default_key_file
from specdec.config.settings import HostSettings
from specdec.engines.registry import engine_of
from specdec.plan.packages import host_packages
from specdec.plan.types import POINTS_PER_METHOD, Plan

__all__ = ["LINKS", "Estimate", "effects", "first_deploy"]

# Downloads at these link speeds (bytes/s): a 100 Mbit/s site uplink and a 1 Gbit/s LAN mirror.
LINKS = (("100 Mbit/s", 100e6 / 8), ("1 Gbit/s", 1e9 / 8))
# Reading the weights back at each engine start: eMMC 5.1 (the AGX Orin's, ~300 MB/s) to NVMe.
LOAD_BPS = (0.3e9, 2.0e9)
# The gate's engine starts (the baseline, then the candidate it keeps or drops); the tune's are
# at most `POINTS_PER_METHOD` per method compared.
GATE_RESTARTS = 2
# Benchmarking measured in the lab's device-time model over its 32 host rows (docs/tuning.md,
# "What it costs"): tune 85-773 s, gate 6-53 s.
TUNE_BENCH_S, GATE_BENCH_S = (85.0, 773.0), (6.0, 53.0)
GIB = 1 << 30


@dataclass(frozen=True)
class Estimate:
    """A first deploy's duration range, seconds, and what it counts."""

    low_s: float
    high_s: float
    restarts: tuple[int, int]
    download_gib: float

    def text(self) -> str:
        lo, hi = self.restarts
        return (f"first deploy: about {_minutes(self.low_s)}-{_minutes(self.high_s)} min: "
                f"{self.download_gib:.1f} GiB of weights at {LINKS[1][0]}-{LINKS[0][0]} plus the "
                f"image pull, {lo}-{hi} engine starts (each reads the weights back and captures "
                "graphs), the verification benchmarks (their time as the lab measured it, "
                "docs/tuning.md)")


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))}"


def restarts(plan: Plan) -> tuple[int, int]:
    """Engine starts of a first deploy: the gate's, plus the tune's when k is ``auto``."""
    if not plan.k_auto:
        return GATE_RESTARTS, GATE_RESTARTS
    methods = max(1, len(plan.tune_methods))
    return GATE_RESTARTS + 1, GATE_RESTARTS + methods * POINTS_PER_METHOD


def first_deploy(plan: Plan) -> Estimate:
    """The range: downloads at `LINKS`, each start reading the weights at `LOAD_BPS`, and the
    benchmarking the lab measured (tuning only when k is ``auto``)."""
    weights = (plan.fit.target_gib + plan.fit.draft_gib) * GIB
    lo_starts, hi_starts = restarts(plan)
    bench_lo = GATE_BENCH_S[0] + (TUNE_BENCH_S[0] if plan.k_auto else 0.0)
    bench_hi = GATE_BENCH_S[1] + (TUNE_BENCH_S[1] if plan.k_auto else 0.0)
    low = weights / LINKS[1][1] + lo_starts * weights / LOAD_BPS[1] + bench_lo
    high = weights / LINKS[0][1] + hi_starts * weights / LOAD_BPS[0] + bench_hi
    return Estimate(low, high, (lo_starts, hi_starts), weights / GIB)


def effects(plan: Plan, settings: HostSettings, site_mirror: bool = False,
            key_file: Path | None = None) -> list[str]:
    """The first deploy's effects on the host and on this machine, one line each
    (``key_file``: where the host's API key is made, default `default_key_file`)."""
    out = []
    if plan.jetson_tuning:
        out.append("power: sets the fastest nvpmodel mode by name and runs jetson_clocks; a mode "
                   "whose change needs a boot REBOOTS the device (an AGX Orin in MODE_30W does); "
                   "specdec_jetson_tuning: false leaves mode and clocks alone")
    if plan.k_auto:
        lo, hi = restarts(plan)
        methods = ", ".join(m for m, _ in plan.tune_methods) or plan.method
        out.append(f"tune: num_speculative_tokens auto measures on the host ({methods}): "
                   f"{lo}-{hi} engine starts with the gate's; the tune cache makes later "
                   "deploys free; pin specdec_num_speculative_tokens to skip it")
    pkgs = host_packages(plan, site_mirror)
    masked = "".join(f"; the distribution's {p.unit_off} masked if specdec installs {p.package}"
                     for p in pkgs if p.unit_off)
    out.append(f"packages: {', '.join(p.package for p in pkgs)} installed if missing{masked}")
    if not settings.api_key_file and engine_of(plan).serves_api(plan):
        out.append(f"api key: made on this machine at {key_file or default_key_file()} if not "
                   "there "
                   "(0600; clients send it as a Bearer token); specdec_api_key_file to "
                   "give your own")
    return out
