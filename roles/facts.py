"""pyinfra facts for specdec: device identity, Docker, HF cache, images, releases, power mode."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from pyinfra.facts.server import Users
from typing_extensions import override

from specdec.engines.registry import ENGINES
from specdec.engines.version import Version
from specdec.host import power, prefetch, release
from specdec.host.identify import (
    Identity,
    identity_command,
    parse_identity,
    split_identity_output,
)
from specdec.host.power import PowerState
from specdec.render import firewall

__all__ = [
    "BootId",
    "DeviceIdentity",
    "DockerDaemonConfig",
    "EngineVersions",
    "FirewallLive",
    "HfCached",
    "ImageDigest",
    "JetsonPower",
    "PackageState",
    "UserAccount",
    "SpecdecReleases",
]

DAEMON_JSON = "/etc/docker/daemon.json"


class DeviceIdentity(FactBase[Identity | None]):
    """Which catalog device the host is (`specdec.host.identify.Identity`).

    Raises `specdec.errors.IdentifyError` (one line) for unsupported hardware.
    """

    @override
    def command(self) -> str:
        return identity_command()

    @override
    def process(self, output: list[str]) -> Identity | None:
        return parse_identity(split_identity_output(output))


class DockerDaemonConfig(FactBase[dict[str, Any] | None]):
    """``/etc/docker/daemon.json`` as a dict; None when absent. Invalid JSON fails the host."""

    @override
    def command(self) -> str:
        return f"if [ -f {DAEMON_JSON} ]; then cat {DAEMON_JSON}; fi"

    @override
    def process(self, output: list[str]) -> dict[str, Any] | None:
        text = "\n".join(output).strip()
        if not text:
            return {}  # an empty file
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            # Fails the host: never overwrite a file we cannot merge into.
            raise FactProcessError(f"{DAEMON_JSON} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise FactProcessError(f"{DAEMON_JSON} is not a JSON object")
        return doc



class HfCached(FactBase[bool]):
    """Whether ``repo`` (or its ``local_dir`` copy) was downloaded completely: its completion
    record lists every file of the snapshot and each one is there (`specdec.host.prefetch`)."""

    @staticmethod
    @override
    def default() -> bool:
        return False

    @override
    def command(self, repo: str, local_dir: str | None = None, user: str | None = None) -> str:
        return prefetch.cached_check(repo, local_dir, user)

    @override
    def process(self, output: list[str]) -> bool:
        return bool(output) and output[-1].strip() == "yes"


class ImageDigest(FactBase[str | None]):
    """The image's repo digest (``repo@sha256:…``), else its id (``sha256:…``); None if absent."""

    @override
    def command(self, image: str) -> str:
        fmt = shlex.quote("{{range .RepoDigests}}{{println .}}{{end}}{{.Id}}")
        return (
            f"! command -v docker >/dev/null 2>&1 || "
            f"docker image inspect --format {fmt} {shlex.quote(image)} 2>/dev/null || true"
        )

    @override
    def process(self, output: list[str]) -> str | None:
        lines = [line.strip() for line in output if line.strip()]
        if not lines:
            return None
        return lines[0]


class SpecdecReleases(FactBase[release.ReleaseState]):
    """`specdec.host.release.ReleaseState`: current / last-good targets, releases, decisions."""

    @staticmethod
    @override
    def default() -> release.ReleaseState:
        return release.ReleaseState()

    @override
    def command(self) -> str:
        return release.read_state()

    @override
    def process(self, output: list[str]) -> release.ReleaseState:
        return release.parse_state(output)


class FirewallLive(FactBase[str]):
    """``ok`` (the live table is the one the running release loaded), ``gone`` (flushed,
    deleted or changed since) or ``none`` (no release firewall): `specdec.render.firewall`."""

    @override
    def command(self) -> str:
        return firewall.live_check()

    @override
    def process(self, output: list[str]) -> str:
        word = output[-1].strip() if output else ""
        return word if word in ("ok", "gone", "none") else "gone"


class _Pairs(FactBase[dict[str, str]]):
    """A fact that is ``key=value`` pairs (empty when the host says nothing)."""

    @staticmethod
    @override
    def default() -> dict[str, str]:
        return {}


class EngineVersions(_Pairs):
    """Engines installed on the host (native runtime) and their versions, e.g.
    ``{"vllm": "0.19.0"}``: each engine's own probe (`specdec.engines.base.Engine.version_probe`:
    ``vllm --version``, the ``tensorrt_llm`` distribution's version, ai-dynamo's in its venv)."""

    @override
    def command(self) -> str:
        return "".join(f"{e.version_probe()}; " for e in ENGINES.values()) + "true"

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in output:
            engine, sep, text = line.strip().partition("=")
            if not sep or engine not in ENGINES or not text:
                continue
            try:
                found[engine] = str(Version.parse(text.split()[-1]))
            except ValueError:
                continue  # not a version: as good as not installed
        return found


class PackageState(_Pairs):
    """A distribution package's binary (a name on PATH, or an absolute path of a file it
    ships) on the host: ``binary`` (its path, or empty) and the
    state of the distribution's unit of it (``enabled``/``active`` as ``systemctl
    is-enabled``/``is-active`` print them; empty without a unit)."""

    @override
    def command(self, binary: str, unit: str = "") -> str:
        b, u = shlex.quote(binary), shlex.quote(unit)
        # a path (a library the package ships): present or not; a name: on PATH
        find = f"[ -e {b} ] && echo {b}" if binary.startswith("/") else f"command -v {b}"
        return (f"echo \"binary=$({find} 2>/dev/null)\"; "
                + (f"echo \"enabled=$(systemctl is-enabled {u} 2>/dev/null)\"; "
                   f"echo \"active=$(systemctl is-active {u} 2>/dev/null)\"; " if unit else "")
                + "true")

    @override
    def process(self, output: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in output:
            key, sep, value = line.strip().partition("=")
            if sep and key in ("binary", "enabled", "active"):
                out[key] = value.strip()
        return out


class UserAccount(Users):
    """One account as pyinfra's ``Users`` fact describes each (``{name: {uid, group, groups,
    home, shell, ...}}``, ``{}`` when absent), from ``getent passwd`` and ``id``: ``Users``
    runs seven commands per account of the host (lastlog, the shadow file: about 0.8 s on a lab
    host, read twice a run) for the one account the deploy manages. No password hash is read."""

    @override
    def command(self, user: str) -> str:  # type: ignore[override]
        u = shlex.quote(user)
        return (f"e=$(getent passwd {u}) && "
                f"echo \"$e|$(id -gn {u})|$(id -Gn {u})||\"; true")


class JetsonPower(FactBase[PowerState | None]):
    """The host's power mode (`specdec.host.power.PowerState`): /etc/nvpmodel.conf (mode ids and
    names), ``nvpmodel -q`` (else the status file) and ``jetson_clocks --show``. None when the
    host has no nvpmodel conf (DGX Spark, or nvpmodel not installed). Read-only."""

    @override
    def command(self) -> str:
        return power.state_command()

    @override
    def process(self, output: list[str]) -> PowerState | None:
        return power.parse_state_dump(output)


class BootId(FactBase[str | None]):
    """``/proc/sys/kernel/random/boot_id``: changes at every boot."""

    @override
    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id 2>/dev/null || true"

    @override
    def process(self, output: list[str]) -> str | None:
        text = "".join(output).strip()
        return text or None
