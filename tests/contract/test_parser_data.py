"""The emulated vLLM's parser data cannot drift from the real releases: each pinned release,
installed from PyPI into its contract environment (`specdec_lab.contract.installer`), regenerates
``specdec_lab/contract/parsers/vllm-X.json`` (`specdec_lab.contract.parsergen`) and the result
must be the committed file, byte for byte. ``tests/unit/test_emulator_parser.py`` then holds the
emulator to every probe in those files."""

from __future__ import annotations

import pytest

from specdec_lab.contract.cases import pinned_versions
from specdec_lab.contract.parsergen import generate, parser_file, render, stale

pytestmark = pytest.mark.contract

VERSIONS = pinned_versions("vllm")


def test_every_pinned_release_has_committed_parser_data() -> None:
    missing = [v for v in VERSIONS if not parser_file(v).is_file()]
    assert not missing, f"no parser data for vLLM {missing}: python3 -m specdec_lab.contract." \
                        "parsergen " + " ".join(missing)


@pytest.mark.parametrize("version", VERSIONS)
def test_parser_data_is_what_the_release_says(version: str) -> None:
    data = generate(version)
    assert data["serve_options"] and data["speculative_config"]["method_literal"]
    assert any(p["ok"] for p in data["probes"]) and any(not p["ok"] for p in data["probes"])
    diff = stale(version, render(data))
    assert not diff, (f"vLLM {version}: the committed parser data differs from the release "
                      "(regenerate: python3 -m specdec_lab.contract.parsergen "
                      f"{version}):\n" + "\n".join(diff[:80]))
