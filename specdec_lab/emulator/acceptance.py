"""How many draft tokens the target accepts (pure; randomness comes from the caller's RNG).

Acceptance is a chain: position ``i`` is accepted with conditional probability ``p_i`` only when
positions ``0..i-1`` were; the first rejection ends the chain and the target adds one token of
its own (the bonus/corrected token), so a verify step yields ``accepted + 1`` tokens and the mean
acceptance length is ``1 + E[accepted]`` (vLLM's AL, between 1 and k+1).

``p_i = clamp(p0 + growth * i)`` with ``p0``/``growth`` set per (method, target/draft pairing,
prompt category) from published behaviour:

* EAGLE-3 with the head trained for the target: AL ~3.1 at k=5 and ~3.4 at k=7 on chat
  (vLLM: 3.53 at K=7 on MT-bench; per-position rates 0.71, 0.53, 0.42 ...), lower on code
  (chat-tuned heads), a bit lower on summarisation, high on repetitive text.
* n-gram: proposes only when the context contains a match (likely on summarisation and
  repetitive text, rare on chat); when it proposes, acceptance follows the category.
* draft model: moderate, better when the draft is a larger fraction of the target.
* a head trained for another target: collapses (AL ~1.1).

Sampling at temperature > 0 lowers every ``p`` (rejection sampling accepts less than greedy
matching).

**Variants** (`VARIANTS`, the emulator's ``SPECDEC_EMU_ACCEPTANCE``): ``chain`` (the default,
above: drafting fewer tokens truncates the same chain, which is what the tuner's model assumes)
and ``measured``, a second world to test that model against: a step that drafts ``k`` tokens
accepts each position with ``p_i·(1 − DILUTION·(k − 1))``, so acceptance at a position depends on
how many are drafted and a measurement at one k no longer gives every smaller k by truncation;
its drafting cost follows vLLM issue #20780's measured curve (`specdec_lab.emulator.timing`). The
published sweeps (vLLM #20780, PR #18909) are consistent with a chain within their noise: the
dilution is a stated stress, not a measurement.

**Per-prompt spread** (`prompt_offset`, off unless a setup asks for it: ``prompt_spread``): with
the tables above, acceptance varies only by the four categories the gate stratifies on, so
every prompt of a category is the same to the drafter, which flatters a stratified estimate.
With a spread ``s`` each prompt gets its own offset ``s·z`` (``z`` a standard normal drawn from
the prompt's content, clipped to ±`SPREAD_CLIP`; the same in every run and seed, as a prompt's
predictability is), added to every position's rate and, for lookup methods, to the chance that
its context has a match. `PROMPT_SPREAD` (0.05) is a stated stress, not a measurement: no
per-prompt acceptance within a category was found published; it is half the spread between the
categories of the tables above (EAGLE-3's ``p0`` 0.58..0.82: sd 0.10) and about what separates
datasets for one head (the yuhuili EAGLE-3 head at temperature 1, K=7: τ 2.77 on MT-bench,
3.49 on HumanEval, nebius/EAGLE3-Llama-3.3-70B-Instruct's comparison table, via
docs/research/measurement.md Q5). A prompt at ±1 sd moves EAGLE-3's chat AL at k=5 from 3.1 to
3.5 or 2.8.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["CATEGORIES", "DILUTION", "PROMPT_SPREAD", "SPREAD_CLIP", "VARIANTS", "AcceptanceModel",
           "acceptance_model", "expected_length", "prompt_offset"]

CATEGORIES = ("chat", "code", "summarization", "repetitive")
VARIANTS = ("chain", "measured")
DILUTION = 0.025  # "measured": every position's rate falls by this per extra drafted token
PROMPT_SPREAD = 0.05  # sd of a prompt's own offset of every rate (a stated stress, above)
SPREAD_CLIP = 2.5  # a prompt's offset is at most this many spreads

# method -> category -> (p0, growth per position)
_HEADS: dict[str, dict[str, tuple[float, float]]] = {
    "eagle3": {"chat": (0.70, 0.02), "code": (0.58, 0.02), "summarization": (0.66, 0.02),
               "repetitive": (0.82, 0.01)},
    "eagle": {"chat": (0.62, 0.0), "code": (0.52, 0.0), "summarization": (0.58, 0.0),
              "repetitive": (0.78, 0.0)},
    "dflash": {"chat": (0.74, 0.02), "code": (0.62, 0.02), "summarization": (0.70, 0.02),
               "repetitive": (0.85, 0.01)},
    "mtp": {"chat": (0.80, -0.10), "code": (0.72, -0.10), "summarization": (0.78, -0.10),
            "repetitive": (0.88, -0.05)},
    "medusa": {"chat": (0.58, -0.08), "code": (0.50, -0.08), "summarization": (0.55, -0.08),
               "repetitive": (0.75, -0.05)},
    "mlp_speculator": {"chat": (0.62, -0.05), "code": (0.54, -0.05),
                       "summarization": (0.60, -0.05), "repetitive": (0.78, -0.03)},
}
# n-gram style: category -> (probability the context has a match, p0 given a match)
_LOOKUP: dict[str, dict[str, tuple[float, float]]] = {
    "ngram": {"chat": (0.25, 0.45), "code": (0.45, 0.55), "summarization": (0.75, 0.70),
              "repetitive": (0.95, 0.90)},
    "suffix": {"chat": (0.35, 0.50), "code": (0.55, 0.60), "summarization": (0.80, 0.72),
               "repetitive": (0.97, 0.92)},
}
_DRAFT_CATEGORY_DELTA = {"chat": 0.0, "code": -0.07, "summarization": 0.03, "repetitive": 0.15}
MISMATCHED_P = 0.08
P_MAX = 0.97


@dataclass(frozen=True)
class AcceptanceModel:
    """Acceptance for one (method, pairing, category, temperature)."""

    p0: float
    growth: float = 0.0
    match_prob: float = 1.0  # lookup methods: chance that a step has any draft at all
    variant: str = "chain"  # one of VARIANTS
    offset: float = 0.0  # the prompt's own shift of every rate (`prompt_offset`)

    def p(self, position: int, k: int = 1) -> float:
        dilute = 1.0 - DILUTION * (k - 1) if self.variant == "measured" else 1.0
        return min(P_MAX, max(0.0, (self.p0 + self.growth * position + self.offset) * dilute))

    def for_prompt(self, offset: float) -> AcceptanceModel:
        """This model for one prompt: its rates (and a lookup's match chance) shifted by
        ``offset``."""
        if not offset:
            return self
        match = self.match_prob if self.match_prob >= 1.0 else \
            min(0.999, max(0.01, self.match_prob + offset))
        return AcceptanceModel(self.p0, self.growth, match, self.variant, offset)

    def has_draft(self, rng: random.Random) -> bool:
        return self.match_prob >= 1.0 or rng.random() < self.match_prob

    def draw(self, rng: random.Random, k: int) -> int:
        """Accepted draft tokens (0..k) for one verify step."""
        accepted = 0
        for i in range(k):
            if rng.random() < self.p(i, k):
                accepted += 1
            else:
                break
        return accepted

    def expected_accepted(self, k: int) -> float:
        total, run = 0.0, 1.0
        for i in range(k):
            run *= self.p(i, k)
            total += run
        return total


def prompt_offset(prompt_key: int, spread: float) -> float:
    """A prompt's own offset of its acceptance: ``spread`` × a standard normal drawn from the
    prompt's content key (the same in every run), clipped to ±`SPREAD_CLIP` spreads."""
    if spread <= 0:
        return 0.0
    z = random.Random(f"prompt-spread/{prompt_key}").gauss(0.0, 1.0)
    return spread * max(-SPREAD_CLIP, min(SPREAD_CLIP, z))


def expected_length(model: AcceptanceModel, k: int) -> float:
    """Mean acceptance length (tokens per verify step, bonus included) when a draft exists."""
    return 1.0 + model.expected_accepted(k)


def _temperature_factor(temperature: float) -> float:
    return 1.0 - 0.15 * min(max(temperature, 0.0), 2.0)


def _draft_p0(target_params: float, draft_params: float) -> float:
    ratio = max(draft_params / max(target_params, 1.0), 1e-3)
    return min(0.75, max(0.35, 0.55 + 0.06 * math.log10(ratio * 100)))


def acceptance_model(
    method: str,
    category: str,
    *,
    temperature: float = 0.0,
    target_params: float = 0.0,
    draft_params: float = 0.0,
    matched: bool = True,
    variant: str = "chain",
) -> AcceptanceModel:
    """The acceptance model for a method on a prompt category.

    ``matched`` is False when a head was trained for another target (acceptance collapses).
    ``target_params``/``draft_params`` set the draft-model pairing quality.
    """
    cat = category if category in CATEGORIES else "chat"
    tf = _temperature_factor(temperature)
    if not matched:
        return AcceptanceModel(p0=MISMATCHED_P * tf, variant=variant)
    if method in _LOOKUP:
        match, p0 = _LOOKUP[method][cat]
        return AcceptanceModel(p0=p0 * tf, match_prob=match, variant=variant)
    if method == "ngram_gpu":
        match, p0 = _LOOKUP["ngram"][cat]
        return AcceptanceModel(p0=p0 * tf, match_prob=match, variant=variant)
    if method == "draft_model":
        p0 = _draft_p0(target_params, draft_params) + _DRAFT_CATEGORY_DELTA[cat]
        return AcceptanceModel(p0=min(P_MAX, p0) * tf, growth=0.01, variant=variant)
    table = _HEADS.get(method, _HEADS["eagle"])
    p0, growth = table[cat]
    return AcceptanceModel(p0=p0 * tf, growth=growth, variant=variant)
