"""benchmarks/realbench (the real-engine benchmark's helpers): the generated prompts and the
watch section's own counter parser."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from realbench.prompts import generate, tagged  # noqa: E402
from realbench.watchcheck import engine_counters  # noqa: E402

from specdec_lab.emulator.textgen import category_of  # noqa: E402


def test_prompts_follow_the_seed_and_read_as_their_category() -> None:
    a, b = generate(12, 4242), generate(12, 4242)
    assert a.measured == b.measured and a.measured != generate(12, 4243).measured
    assert [p.category for p in a.measured[:4]] == ["chat", "code", "summarization",
                                                   "repetitive"]
    assert all(category_of(p.text) == p.category for p in generate(40, 7).measured)
    t = tagged(a, "r1 c4").measured
    assert t[0].text == "[r1 c4 #01] " + a.measured[0].text and t[0].id == a.measured[0].id


def test_engine_counters_sum_label_sets_and_skip_the_rest() -> None:
    text = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total drafts",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 21.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 60.0'])
    assert engine_counters(text) == {"drafts": 15.0, "accepted": 21.0}
