"""One generation request in the running engine: its state and the events it yields."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec_lab.emulator.core import SeqOutput
from specdec_lab.emulator.openai import GenRequest
from specdec_lab.emulator.truth import RequestRecord

__all__ = ["Event", "RequestState"]


@dataclass(frozen=True)
class Event:
    choice: int
    out: SeqOutput
    t: float  # perf_counter when the scheduler published it


@dataclass
class RequestState:
    gen: GenRequest
    record: RequestRecord
    ids: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)  # tokens per choice
    finish: list[str | None] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    first_out: float | None = None
    prev_out: dict[int, float] = field(default_factory=dict)
    aborted: bool = False

    @property
    def completion_tokens(self) -> int:
        return sum(self.completion)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens once per distinct prompt (``n`` > 1 shares one prompt)."""
        seen: dict[int, int] = {}
        for seq in self.gen.seqs:
            seen.setdefault(seq.prompt_key, seq.prompt_tokens)
        return sum(seen.values())
