"""specdec_lab.contract.runtime without the real engine: what it takes from the rendered unit,
how it maps the host's paths to this machine's, and what a failure says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.host import layout
from specdec_lab import realmodel
from specdec_lab.contract import runtime


@pytest.fixture(scope="module")
def enum() -> runtime.Enumeration:
    return runtime.enumerate_cases()


def _case(enum: runtime.Enumeration, method: str) -> runtime.Case:
    return next(c for c in enum.cases if c.plan.method == method and not c.plan.k_by_batch)


def test_the_rendered_unit_lines_are_taken_as_they_are(enum: runtime.Enumeration) -> None:
    r = _case(enum, "ngram").rendered
    assert r.argv[:2] == (f"{layout.VLLM_CPU_VENV}/bin/vllm", "serve")
    env = dict(r.env)
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"].isdigit()
    assert dict(r.limits)["LimitMEMLOCK"] == "infinity"
    assert r.workdir == layout.STATE_DIR


def test_host_paths_become_local_ones(enum: runtime.Enumeration, tmp_path: Path) -> None:
    case = _case(enum, "draft_model")
    argv, env, cwd = runtime.host_command(case.rendered, Path("/v/venv"), tmp_path, 4321)
    target = str(realmodel.MODELS_DIR / realmodel.REPOS[case.plan.model])
    assert argv[:3] == ["/v/venv/bin/vllm", "serve", target]
    assert argv[argv.index("--port") + 1] == "4321"
    # the served name stays the catalog id; the draft in the JSON is the local folder too
    assert argv[argv.index("--served-model-name") + 1] == case.plan.model
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == target and spec["method"] == "draft_model"
    assert env["LD_PRELOAD"].endswith("/v/venv/lib/libiomp5.so")
    assert env["HF_HOME"].startswith(str(tmp_path)) and env["HOME"].startswith(str(tmp_path))
    assert cwd == tmp_path / "state" and cwd.is_dir()
    assert not any(layout.STATE_DIR in v for v in env.values())


def test_identical_units_are_one_case_and_refusals_are_rendered(
        enum: runtime.Enumeration) -> None:
    units = [c.rendered for c in enum.cases]
    assert len(units) == len(set(units))
    ngram = _case(enum, "ngram")
    assert "(nothing pinned)" in ngram.asked and "specdec_method=ngram" in ngram.asked
    for ref in enum.refusals:
        assert ref.case is not None and ref.case.plan.method == ref.method
        assert f'"method":"{ref.method}"' in " ".join(ref.case.rendered.argv)


def test_a_failed_start_names_the_case_and_quotes_the_engine(
        enum: runtime.Enumeration, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "vllm"
    fake.write_text("#!/bin/sh\necho 'INFO starting'\n"
                    "echo 'ValueError: --dtype float32 is not supported here' >&2\nexit 3\n")
    fake.chmod(0o755)
    case = _case(enum, "ngram")
    with pytest.raises(runtime.RuntimeFailure) as exc:
        runtime.run_case(case, venv, tmp_path / "work")
    msg = str(exc.value)
    assert msg.startswith(case.id) and "specdec_method=ngram" in msg
    assert "exited with code 3 before /health" in msg
    assert "ValueError: --dtype float32 is not supported here" in msg
