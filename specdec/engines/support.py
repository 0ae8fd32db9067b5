"""Can engine E at version V run speculative method M for target T? One answer, with its reason
and the first release that can, from the per-engine fact tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specdec.engines import dynamo, trtllm, vllm
from specdec.engines.ranges import first_version
from specdec.engines.version import Version

__all__ = ["DYNAMO_EAGLE3_ONLY", "Support", "Target", "support"]


@dataclass(frozen=True)
class Target:
    """What the engines check about a target model (its config.json)."""

    id: str
    architecture: str  # config.json "architectures"[0], e.g. Qwen3ForCausalLM
    model_type: str  # config.json "model_type", e.g. qwen3


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str  # why not (the release's own error text where it has one), or a caveat
    source: str
    first_ok: Version | None = None  # the first later release that can (when not ok)
    caveat: str | None = None  # ok, but worth a note (e.g. runs on the V0 engine)


def _vllm(v: Version, method: str, target: Target) -> Support:
    facts = vllm.vllm_facts(v)
    state = facts.method(method)
    if state.value == "absent":
        return Support(False, f"vLLM {v} has no speculative method {method!r}", state.source)
    if state.value == "refused":
        return Support(False, state.error or f"vLLM {v} refuses {method!r}", state.source)
    caveat = None
    if state.value == "v0":
        caveat = f"vLLM {v} runs {method} on its V0 engine (V1 cannot): {state.error}"
    if method == "eagle3":
        gate = facts.eagle3_target(target.model_type, target.architecture)
        if not gate.value:
            return Support(False, gate.error or "EAGLE-3 unsupported for this target",
                           gate.source)
    return Support(True, "", state.source, caveat=caveat)


def _trtllm(v: Version, method: str, target: Target) -> Support:
    facts = trtllm.trtllm_facts(v)
    spelling = facts.decoding_type(method)
    if spelling is None:
        return Support(False, f"TensorRT-LLM {v} has no decoding_type for {method!r}",
                       facts.decoding_source)
    return Support(True, "", facts.decoding_source)


# Dynamo's speculative-decoding guide (docs/features/speculative_decoding/
# speculative_decoding_vllm.md, "Limitations"): only EAGLE-3 is supported as the draft model;
# dynamo.vllm still hands --speculative-config to vLLM unchanged (dynamo/vllm/args.py).
DYNAMO_EAGLE3_ONLY = ("Dynamo's vLLM speculative-decoding guide lists only EAGLE-3 as "
                      "supported; dynamo.vllm passes the config to vLLM {vllm} unchanged")


def _dynamo(v: Version, method: str, target: Target) -> Support:
    facts = dynamo.dynamo_facts(v)
    if facts is None:
        return Support(False, f"Dynamo {v} is not in the release table (its vLLM pin is not "
                       f"known; known: {', '.join(dynamo.known_releases())})",
                       "specdec/engines/dynamo.py RELEASES")
    inner = _vllm(facts.vllm, method, target)
    src = f"{facts.source}; {inner.source}"
    if not inner.ok:
        return Support(False, f"{inner.reason} (Dynamo {v} runs vLLM {facts.vllm})", src)
    return Support(True, "", src, caveat=inner.caveat)


def _dynamo_bounds() -> list[Version]:
    return [Version.parse(r) for r in dynamo.known_releases()]


_CHECKS: dict[str, tuple[Callable[[Version, str, Target], Support], Callable[[], list[Version]]]]
_CHECKS = {"vllm": (_vllm, vllm.boundaries), "trtllm": (_trtllm, trtllm.boundaries),
           "dynamo": (_dynamo, _dynamo_bounds)}


def support(engine: str, version: Version, method: str, target: Target) -> Support:
    """Whether ``engine`` ``version`` runs ``method`` for ``target`` ("none" always runs)."""
    if method == "none":
        return Support(True, "", "speculation off")
    if engine not in _CHECKS:
        raise ValueError(f"unknown engine {engine!r}")
    check, bounds = _CHECKS[engine]
    result = check(version, method, target)
    if result.ok:
        return result
    first = first_version(bounds(), version, lambda v: check(v, method, target).ok)
    return Support(False, result.reason, result.source, first_ok=first)
