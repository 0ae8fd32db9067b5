"""What one vLLM release's ``vllm serve`` accepts, as the emulated vLLM validates it.

For every release the catalog pins, from the release itself: ``specdec_lab/contract/parsers/
vllm-X.json``, which `specdec_lab.contract.parsergen` writes by running that release's parser,
EngineArgs, ModelConfig and SpeculativeConfig in its contract environment (and which
``make contract`` regenerates and compares). The emulator quotes the release's own error for
each probe, with its own values put in place of the probe's (`VllmRelease.refusal`).

A release without a contract environment has no such file: `specdec_lab.emulator.
vllm_unverified` answers for it from specdec's own fact tables (marked in the engine log).
Where the release accepted what the emulator cannot emulate, `gap` says so in the emulator's
own words, never in vLLM's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from specdec.engines.version import Version

__all__ = ["PARSERS", "Option", "VllmRelease", "gap", "pinned", "release"]

PARSERS = Path(__file__).resolve().parents[1] / "contract" / "parsers"
ARCH = "eagle3-arch/"  # `specdec_lab.contract.parsergen.ARCH`

Subs = tuple[tuple[str, str], ...]


def gap(version: Version | str, what: str, probe: str) -> str:
    """The emulator's refusal of what the release accepted but the emulator cannot run."""
    return (f"specdec emulator: {what} is not emulated (vLLM {version}'s own parser accepts it: "
            f"probe {probe!r} in {PARSERS.name}/; what its engine does next was not run)")


@dataclass(frozen=True)
class Option:
    """One action of the release's ``vllm serve`` parser."""

    flags: tuple[str, ...]
    dest: str
    action: str
    nargs: Any
    const: Any
    type: str | None
    choices: tuple[Any, ...] | None


class VllmRelease:
    """One release's parser data (``parsers/vllm-X.json``)."""

    verified = True

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.version = Version.parse(str(data["version"]).split("+")[0])
        self.source = f"{PARSERS.name}/vllm-{self.version}.json ({data.get('release', '')})"
        self.options = tuple(
            Option(tuple(o["flags"]), o["dest"], o["action"], o["nargs"], o["const"], o["type"],
                   tuple(o["choices"]) if o["choices"] is not None else None)
            for o in data["serve_options"])
        sc = data["speculative_config"]
        self.spec_keys = frozenset(sc["fields"])
        self.rejects_unknown = sc["extra"] == "forbid"
        self.literal = tuple(sc["method_literal"])
        self._probes = {p["id"]: p for p in data["probes"]}
        self._interface = data["eagle3"]["interface"]
        self._runner = data["eagle3"]["runner_refusal"]

    @property
    def note(self) -> str | None:
        """A line for the engine log when these are not the release's own answers."""
        return None

    def probe(self, pid: str) -> dict[str, Any] | None:
        return self._probes.get(pid)

    def refusal(self, pid: str, subs: Subs = ()) -> str | None:
        """The release's error for probe ``pid`` (None: accepted), each (probe's value, own
        value) of ``subs`` put in; KeyError when no probe has that id."""
        p = self.probe(pid)
        if p is None:
            raise KeyError(f"no probe {pid!r} for vLLM {self.version} ({self.source})")
        if p["ok"]:
            return None
        text = str(p["error"])
        for old, new in subs:
            text = text.replace(old, new)
        return text

    def field_error(self, pid: str) -> bool:
        """Whether the refusal is pydantic's field validation (before ``__post_init__``)
        rather than a ValueError raised in it ("Value error, ...")."""
        text = self.refusal(pid) or ""
        return "ValidationError" in text and "  Value error, " not in text

    def method_refusal(self, method: str) -> str | None:
        """The release's refusal of ``method`` (probe ``method/<name>``); KeyError: no probe."""
        return self.refusal(f"method/{method}")

    def v0_fallback(self, pid: str) -> tuple[str, ...]:
        """The V0-fallback warnings the release logs for accepted probe ``pid`` (0.9.2)."""
        p = self.probe(pid) or {}
        return tuple(p.get("v1_fallback", ()))

    def eagle3(self, architecture: str, model_type: str) -> tuple[str | None, str | None]:
        """(the config-time refusal of eagle3 on this target, the model runner's refusal at
        load); KeyError when the release was not asked about ``architecture``."""
        del model_type  # the probe ran on a catalog target of this architecture
        config = self.refusal(ARCH + architecture)
        iface = self._interface.get(architecture)
        if iface is None:
            raise KeyError(f"vLLM {self.version} was not asked about {architecture}")
        if iface.get("eagle3"):
            return config, None
        runner = self._runner["error"] if self._runner else None
        return config, runner or gap(self.version, f"EAGLE-3 on {architecture} (its class "
                                     "lacks the hook and no runner refusal was read)",
                                     ARCH + architecture)


def pinned() -> list[str]:
    """The releases with parser data, oldest first."""
    found = [Version.parse(p.stem.removeprefix("vllm-")) for p in PARSERS.glob("vllm-*.json")]
    return [str(v) for v in sorted(found)]


@cache
def load(version: str) -> VllmRelease:
    return VllmRelease(json.loads((PARSERS / f"vllm-{version}.json").read_text()))


@cache
def release(version: Version | str) -> VllmRelease:
    """Release ``version`` from its parser data, else from specdec's facts (unverified)."""
    v = str(version if isinstance(version, Version) else Version.parse(version))
    if v in pinned():
        return load(v)
    from specdec_lab.emulator.vllm_unverified import unverified

    return unverified(v)
