"""Fidelity: the emulator's H100 profile reproduces the EAGLE-3 paper's Llama-3.1-8B figures.

EAGLE-3 (Li et al., 2025), SGLang on one H100, Llama-3.1-8B-Instruct: 158 -> 373 tok/s at batch
size 1 (2.36x) and 1.38x at batch size 64. The pure `simulate` (virtual clock, no sleeping) must
land within 15% of both.
"""

from __future__ import annotations

import pytest

from specdec.emulator.core import SimPrompt, simulate
from specdec.emulator.setup import setup_for
from specdec.emulator.textgen import stable_int

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
PAPER = {1: 2.36, 64: 1.38}
BASELINE_BS1_TOK_S = 158.0
PROMPTS = [SimPrompt(key=stable_int("mt-bench", i), prompt_tokens=80 + (i * 53) % 420,
                     category="chat") for i in range(80)]


def run(batch: int, speculative: bool) -> float:
    if speculative:
        s = setup_for("h100-sxm", LLAMA8, "eagle3", 6, max_num_seqs=256)
    else:
        s = setup_for("h100-sxm", LLAMA8, max_num_seqs=256)
    n = 10 if batch == 1 else batch * 3
    return simulate(s.engine_model(), PROMPTS, concurrency=batch, num_requests=n,
                    max_tokens=256).throughput_tok_s


@pytest.mark.parametrize("batch", [1, 64])
def test_h100_eagle3_speedup_matches_paper(batch: int) -> None:
    speedup = run(batch, True) / run(batch, False)
    assert speedup == pytest.approx(PAPER[batch], rel=0.15), speedup


def test_h100_baseline_batch1_throughput() -> None:
    assert run(1, False) == pytest.approx(BASELINE_BS1_TOK_S, rel=0.15)
