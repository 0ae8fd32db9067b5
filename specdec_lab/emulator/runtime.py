"""What both CLIs hand to the server: the serve configuration and the run context."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from specdec.catalog import load_catalog
from specdec.engines.version import Version
from specdec.errors import ConfigError, SpecdecError
from specdec.host.identify import parse_identity, read_identity_root
from specdec_lab.emulator.faults import Faults, parse_faults
from specdec_lab.emulator.hostpower import HostPower
from specdec_lab.emulator.logs import EngineLog
from specdec_lab.emulator.profiles import DeviceProfile, device_profile
from specdec_lab.emulator.setup import EngineSetup

__all__ = [
    "VERSION_ENV",
    "RunContext",
    "ServeConfig",
    "StartupError",
    "emulated_version",
    "engine_version",
    "env_float",
    "make_context",
    "resolve_device",
]

# The engine release to emulate. A lab image carries it in its environment, as the real image
# carries its engine; without it, the release of the device's default catalog image.
VERSION_ENV = "SPECDEC_EMU_ENGINE_VERSION"


class StartupError(Exception):
    """The engine fails to start: ``root`` is the exception line, logged before exiting 1."""

    def __init__(self, root: str, *, stage: str = "config", progress: float = 1.0) -> None:
        super().__init__(root)
        self.root = root
        self.stage = stage
        self.progress = progress


@dataclass(frozen=True)
class ServeConfig:
    engine: str  # "vllm" | "trtllm"
    model_ref: str  # as given on the command line
    served_model_names: tuple[str, ...]
    setup: EngineSetup
    host: str
    port: int
    draft_ref: str | None = None
    api_keys: tuple[str, ...] = ()
    gpu_memory_utilization: float = 0.9  # vLLM
    kv_free_fraction: float = 0.9  # TRT-LLM
    iter_perf_stats: bool = False  # TRT-LLM enable_iter_perf_stats
    default_temperature: float = 1.0
    default_top_p: float = 1.0
    generation_config_log: str | None = None
    non_default_args: dict[str, Any] = field(default_factory=dict)
    spec_log: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    tp: int = 1
    engine_version: str = ""


@dataclass
class RunContext:
    device: DeviceProfile
    time_scale: float
    faults: Faults
    seed: int
    reserved_gib: float
    log: EngineLog
    stop: threading.Event = field(default_factory=threading.Event)
    signum: int | None = None
    engine: str | None = None  # "vllm" | "trtllm": whose bandwidth efficiency applies
    power: HostPower | None = None  # the host's nvpmodel state (Jetsons)

    def refresh_power(self) -> bool:
        """Follow the host's power mode: True (and ``device`` updated) when it changed."""
        if self.power is None or not self.power.poll():
            return False
        self.device = device_profile(self.device.id, engine=self.engine,
                                     power_mode=self.power.mode)
        return True

    def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` (already scaled); True if a stop signal arrived meanwhile."""
        if seconds <= 0:
            return self.stop.is_set()
        return self.stop.wait(seconds)

    def install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self.signum = signum
            self.stop.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def env_float(name: str, default: float, *, positive: bool = False) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if positive and v <= 0:
        raise ConfigError(f"{name}={raw!r} must be > 0")
    if v < 0:
        raise ConfigError(f"{name}={raw!r} must be >= 0")
    return v


def resolve_device(device: str | None, engine: str | None = None,
                   power_mode: str | None = None) -> DeviceProfile:
    """Explicit device, else $SPECDEC_EMU_DEVICE, else identify this machine."""
    name = device or os.environ.get("SPECDEC_EMU_DEVICE", "").strip() or None
    if name:
        return device_profile(name, engine=engine, power_mode=power_mode)
    try:
        ident = parse_identity(read_identity_root(Path("/")))
    except SpecdecError as exc:
        raise ConfigError(f"RuntimeError: Failed to infer device type ({exc}); set "
                          "SPECDEC_EMU_DEVICE") from None
    return device_profile(ident.device, engine=engine, power_mode=power_mode)


def make_context(engine: str, device: str | None, time_scale: float | None,
                 host_root: Path | str = "/") -> RunContext:
    """The run context: device profile in the host's current power mode, time scale, faults."""
    scale = time_scale if time_scale is not None else env_float(
        "SPECDEC_EMU_TIME_SCALE", 1.0, positive=True)
    if scale <= 0:
        raise ConfigError(f"time_scale={scale!r} must be > 0")
    faults = parse_faults(os.environ.get("SPECDEC_EMU_FAULT"))
    seed_raw = os.environ.get("SPECDEC_EMU_SEED", "").strip()
    try:
        seed = int(seed_raw) if seed_raw else 0
    except ValueError:
        raise ConfigError(f"SPECDEC_EMU_SEED={seed_raw!r} is not an integer") from None
    reserved = env_float("SPECDEC_EMU_RESERVED_GIB", 0.0)
    power = HostPower(host_root)
    profile = resolve_device(device, engine, power.mode)
    return RunContext(device=profile, time_scale=scale, faults=faults, seed=seed,
                      reserved_gib=reserved, log=EngineLog(engine), engine=engine,
                      power=power if power.mode is not None else None)


def engine_version(engine: str, device: DeviceProfile) -> str:
    """$SPECDEC_EMU_ENGINE_VERSION, else the device's default catalog image's release."""
    raw = os.environ.get(VERSION_ENV, "").strip()
    if raw:
        try:
            return str(Version.parse(raw))
        except ValueError as exc:
            raise ConfigError(f"{VERSION_ENV}: {exc}") from None
    cat = load_catalog()
    dev = cat.devices.get(device.id)
    img = cat.default_image(dev, engine, "36.4" if dev.is_jetson else None) if dev else None
    if img is None:  # an emulator-only device: the newest release the catalog knows
        versions = [i.engine_version for i in cat.images.values() if i.engine == engine]
        if not versions:
            raise ConfigError(f"no {engine} release in the catalog; set {VERSION_ENV}")
        return str(max(versions))
    return str(img.engine_version)


def emulated_version(engine: str) -> str:
    """What ``--version`` prints: the release this emulator process emulates."""
    raw = os.environ.get(VERSION_ENV, "").strip()
    try:
        if raw:
            return str(Version.parse(raw))
        return engine_version(engine, resolve_device(None))
    except (SpecdecError, ValueError) as exc:
        return f"unknown ({exc})"

