from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.bench.prompts import builtin_prompts, load_prompts
from specdec.errors import ConfigError


def test_builtin_set() -> None:
    ps = builtin_prompts()
    assert len(ps.measured) >= 48 and len(ps.warmup) >= 4
    assert set(ps.categories()) == {"chat", "code", "summarization", "repetitive"}
    assert min(ps.categories().values()) >= 8
    assert not {p.text for p in ps.warmup} & {p.text for p in ps.measured}
    assert len({p.id for p in ps.measured}) == len(ps.measured)
    assert load_prompts(None) is ps


def test_builtin_categories_agree_with_emulator() -> None:
    from specdec_lab.emulator.textgen import category_of

    for p in builtin_prompts().measured:
        assert category_of(p.text) == p.category, p.id


def test_user_files(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("- hello there\n- {id: x, category: code, prompt: 'def f(): pass'}\n")
    ps = load_prompts(f)
    assert [p.id for p in ps.measured] == ["p001", "x"]
    assert ps.measured[1].category == "code" and ps.warmup == builtin_prompts().warmup
    j = tmp_path / "p.json"
    j.write_text(json.dumps({"measured": ["a", "b"], "warmup": ["w"]}))
    ps = load_prompts(j)
    assert len(ps.measured) == 2 and ps.warmup[0].text == "w"


@pytest.mark.parametrize(("text", "match"), [
    ("{}", "'measured' must be a non-empty list"),
    ("measured: [3]", r"measured\[0\] must be a string"),
    ("measured: [{prompt: ''}]", "non-empty string"),
    ("measured: [{id: a, prompt: x}, {id: a, prompt: y}]", "duplicate id 'a'"),
    ("measured: [x]\nwarmup: [x]", "also in the measured set"),
    ("measured: [{prompt: x, colour: red}]", "unknown field 'colour'"),
    ("measured: [x]\nextra: 1", "unknown field 'extra'"),
    ("[unclosed", "not valid YAML"),
    ("42", "expected a list"),
])
def test_bad_files(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match) as ei:
        load_prompts(f)
    assert "\n" not in str(ei.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_prompts(tmp_path / "missing.yaml")
