"""A vLLM release WITHOUT a contract environment: the emulator's only use of specdec's facts.

No real parser ran for such a release, so nothing here can catch a wrong belief: the decisions
(SpeculativeConfig's keys and ``extra``, the method Literal, which methods it refuses or runs on
V0, the EAGLE-3 gates, the head formats) are `specdec.engines.vllm.facts`; the flags and the
wording of every other refusal are borrowed from the nearest release that has parser data. The
catalog pins only releases with parser data (`tests/contract/test_parser_data.py`), so the lab
never runs one of these; the unit tests that date a fact between two pinned releases do.
"""

from __future__ import annotations

from specdec.engines.version import Version
from specdec.engines.vllm.facts import VllmFacts, method_literal, vllm_facts
from specdec.errors import ConfigError
from specdec_lab.emulator.vllm_release import ARCH, PARSERS, Subs, VllmRelease, load, pinned

__all__ = ["UnverifiedRelease", "unverified"]

# Probes whose verdict the facts decide here (the rest keep the borrowed release's verdict).
_DRAFT = "method/draft_model"
_SPECULATORS = "head-speculators"


class UnverifiedRelease(VllmRelease):
    verified = False

    def __init__(self, version: Version, facts: VllmFacts, near: list[VllmRelease]) -> None:
        super().__init__(near[0].data)
        self.version = version
        self.facts = facts
        self.near = near
        self.source = (f"specdec's facts (specdec/engines/vllm/facts.py); flags and wording of "
                       f"vLLM {near[0].version}")
        self.spec_keys = facts.spec_keys
        self.rejects_unknown = facts.unknown_keys.value == "reject"
        self.literal = method_literal(version)

    @property
    def note(self) -> str:
        return (f"specdec emulator: vLLM {self.version} has no contract environment, so no "
                "parser data from the release: validating with " + self.source)

    def _borrow(self, pid: str, ok: bool | None, subs: Subs) -> str | None:
        """The wording of the nearest release whose probe ``pid`` has verdict ``ok`` (None:
        any), skipping refusals that are that release's draft-model refusal."""
        for rel in self.near:
            p = rel.probe(pid)
            if p is None or (ok is not None and p["ok"] != ok):
                continue
            text = rel.refusal(pid, subs)
            if text is not None and pid != _DRAFT and text == rel.refusal(_DRAFT):
                continue
            return text
        return None

    def refusal(self, pid: str, subs: Subs = ()) -> str | None:
        if pid == "unknown-key":
            return self._borrow(pid, not self.rejects_unknown, subs)
        if pid == "tp-key":
            return self._borrow(pid, "tensor_parallel_size" not in self.spec_keys, subs)
        if pid == _SPECULATORS:
            return self._borrow(pid, self.facts.head_format("speculators").value, subs)
        return self._borrow(pid, None, subs)

    def method_refusal(self, method: str) -> str | None:
        state = self.facts.method(method)
        if state.value == "refused":
            return state.error or f"NotImplementedError: {method}"
        return None

    def v0_fallback(self, pid: str) -> tuple[str, ...]:
        if pid.startswith("method/"):
            state = self.facts.method(pid.removeprefix("method/"))
            return (state.error,) if state.value == "v0" and state.error else ()
        return ()

    def eagle3(self, architecture: str, model_type: str) -> tuple[str | None, str | None]:
        gate = self.facts.eagle3_target(model_type, architecture)
        if gate.value:
            return None, None
        error = gate.error or "EAGLE-3 unsupported"
        if error.startswith("RuntimeError"):
            return None, error
        wording = self._borrow(ARCH + "MistralForCausalLM", False, ())  # a refused gate
        if wording and "  Value error, " in wording:
            head, _, rest = wording.partition("  Value error, ")
            return head + "  Value error, " + error + rest[rest.index(" [type="):], None
        return f"ValueError: {error}", None


def _nearest(v: Version) -> list[VllmRelease]:
    """Every release with parser data, the nearest first (older before newer)."""
    rels = [load(p) for p in pinned()]
    return sorted(rels, key=lambda r: (r.version > v, abs(_index(r.version) - _index(v))))


def _index(v: Version) -> float:
    """A release's place among the parsed ones (a release between two is half-way)."""
    vs = [Version.parse(p) for p in pinned()]
    below = sum(1 for x in vs if x <= v)
    return below - (0.5 if v not in vs else 1)


def unverified(version: str) -> UnverifiedRelease:
    v = Version.parse(version)
    near = _nearest(v)
    if not near:
        raise ConfigError(f"vLLM {version}: no parser data at all in {PARSERS} (the emulator "
                          "needs specdec_lab/contract/parsers/)")
    return UnverifiedRelease(v, vllm_facts(v), near)
