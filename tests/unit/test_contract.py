"""specdec_lab.contract without the releases: argv extraction, verdicts, installer and lock
files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.engines.version import Version
from specdec.engines.vllm import facts
from specdec.render.files import systemd_quote
from specdec_lab.contract import installer, lockgen
from specdec_lab.contract.cases import (
    GOLDEN,
    Case,
    Suite,
    exec_words,
    pinned_versions,
    rendered_cases,
    unit_argv,
)
from specdec_lab.contract.controls import core_error, full_suite
from specdec_lab.contract.verdict import STAGES, case_problem, fact_problems


@pytest.mark.parametrize("word", [
    '{"method":"eagle3","model":"a/b","num_speculative_tokens":3}', "50%", "$HOME", "a b",
    "it's", 'back\\slash "q"', "plain-word_1.2", "",
])
def test_exec_words_undo_systemd_quote(word: str) -> None:
    line = " ".join(systemd_quote(w) for w in ["/usr/bin/x", word, "--flag"])
    assert exec_words(line) == ["/usr/bin/x", word, "--flag"]


def test_unit_argv_strips_docker_and_binary_path() -> None:
    docker = unit_argv((GOLDEN / "agx-orin-64gb-vllm-docker" / "specdec-engine.service")
                       .read_text())
    native = unit_argv((GOLDEN / "orin-nx-16gb-vllm-native" / "specdec-engine.service")
                       .read_text())
    trt = unit_argv((GOLDEN / "dgx-spark-trtllm-docker" / "specdec-engine.service").read_text())
    assert docker[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert json.loads(docker[docker.index("--speculative-config") + 1])["method"] == "eagle3"
    assert native[:2] == ["vllm", "serve"] and native[-1] == "--enforce-eager"
    assert trt[0] == "trtllm-serve"
    with pytest.raises(ValueError, match="no ExecStart"):
        unit_argv("[Service]\n")


def test_core_error_drops_the_module_path() -> None:
    assert core_error("pydantic_core._pydantic_core.ValidationError: x") == "ValidationError: x"
    assert core_error("NotImplementedError: y") == "NotImplementedError: y"


def _ok(spec: dict | None = None) -> dict:
    return {"ok": True, "stages": list(STAGES), "spec": spec or {}}


def test_case_verdicts() -> None:
    ok_case = Case("a", ("vllm", "serve", "m"), True, spec=(("method", "ngram"),))
    assert case_problem(ok_case, _ok({"method": "ngram"})) is None
    assert "resolved method='eagle'" in str(case_problem(ok_case, _ok({"method": "eagle"})))
    assert "incomplete" in str(case_problem(ok_case, {**_ok({"method": "ngram"}),
                                                      "stages": STAGES[:4]}))
    refused = {"ok": False, "stage": "speculative", "error": "ValidationError: Eagle3 is only"}
    assert "refused at speculative" in str(case_problem(ok_case, refused))
    assert "no result" in str(case_problem(ok_case, None))
    no = Case("b", ("vllm",), False, "speculative", "Eagle3 is only")
    assert case_problem(no, refused) is None
    assert "expected a refusal" in str(case_problem(no, _ok()))
    assert "expected at parse" in str(case_problem(
        Case("c", ("vllm",), False, "parse"), refused))
    assert "expected it to contain" in str(case_problem(
        Case("d", ("vllm",), False, "speculative", "Llama models"), refused))


def test_fact_verdicts() -> None:
    v = "0.9.2"
    good = {"version": v, "facts": {
        "spec_fields": sorted(facts.spec_keys(Version.parse(v))),
        "method_literal": list(facts.method_literal(Version.parse(v))), "extra": None,
        "finish_reasons": ["stop", "length", "abort"]}}
    assert fact_problems(v, good) == []
    bad = json.loads(json.dumps(good))
    bad["facts"]["spec_fields"].append("new_field")
    bad["facts"]["method_literal"].remove("medusa")
    bad["facts"]["extra"] = "forbid"
    bad["facts"]["finish_reasons"].append("error")
    bad["version"] = "0.9.1"
    problems = fact_problems(v, bad)
    assert len(problems) == 5
    assert "['new_field'] that spec_keys() lacks" in problems[0]
    assert "['medusa'] that the release lacks" in problems[1]
    assert "FinishReason: the release has ['error'] that FINISH_REASONS lacks" in problems[2]


def test_suites_cover_goldens_examples_matrix_and_controls() -> None:
    for v in pinned_versions("vllm"):
        suite = full_suite(v)
        assert not suite.problems, suite.problems
        ids = [c.id for c in suite.cases]
        assert len(ids) == len(set(ids))
        assert any(i.startswith("matrix/") for i in ids)
        assert {"control/unknown-flag", "control/malformed-json"} <= set(ids)
    s092 = {c.id: c for c in full_suite("0.9.2").cases}
    assert "Eagle3 is only supported for Llama models" in str(
        s092["eagle3-arch/Qwen3ForCausalLM"].error)
    # every head the target takes is a case of its own: both checkpoint formats
    for head in ("RedHatAI/Qwen3-8B-speculator.eagle3", "Tengyunw/qwen3_8b_eagle3"):
        assert not s092[f"matrix/Qwen/Qwen3-8B/eagle3/{head}@0.9.2"].expect_ok
        s031 = {c.id: c for c in full_suite("0.31.0").cases}
        assert s031[f"matrix/Qwen/Qwen3-8B/eagle3/{head}@0.31.0"].expect_ok
    assert s092["control/unknown-key"].expect_ok  # 0.9.2 drops unknown keys silently
    for v in ("0.11.0", "0.14.0"):
        case = {c.id: c for c in full_suite(v).cases}["control/draft_model-refused"]
        assert case.error and case.error.startswith("NotImplementedError: Speculative decoding "
                                                    "with draft model is not supported yet")
    assert not {c.id: c for c in full_suite("0.31.0").cases}["control/unknown-key"].expect_ok


def test_a_refused_pinned_method_must_be_refused_by_the_release() -> None:
    suite = rendered_cases("0.11.0")
    case = {c.id: c for c in suite.cases}["lab.py/lab-nx@0.11.0"]
    assert not case.expect_ok and case.stage == "speculative"
    assert '"method":"draft_model"' in " ".join(case.argv)


def test_suite_refuses_duplicate_ids() -> None:
    s = Suite("0.9.2")
    s.add(Case("x", (), True))
    with pytest.raises(ValueError, match="duplicate"):
        s.add(Case("x", (), True))


def test_every_pinned_release_has_a_lock_file() -> None:
    for v in pinned_versions("vllm"):
        pins = installer.pins(installer.lock_file("vllm", v))
        assert f"vllm=={v}" in pins
        assert all("==" in p for p in pins), pins
        assert not any(p.startswith("torch==") for p in pins)  # the installer adds torch
    with pytest.raises(installer.InstallError, match="lockgen 0.0.1"):
        installer.lock_file("vllm", "0.0.1")


def test_torch_from_the_local_wheel_else_pypi(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_CONTRACT_WHEELS", str(tmp_path))
    assert installer.torch_spec() == ("torch==2.13.0", True)
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    assert installer.torch_spec() == (str(wheel), False)


def test_comments_of_a_lock_file_do_not_change_its_stamp(tmp_path: Path) -> None:
    lock = tmp_path / "vllm-1.0.txt"
    lock.write_text("# derived by hand\nvllm==1.0\nnumpy==2.0  # why\n")
    stamp = installer._stamp("vllm", "1.0", lock)
    lock.write_text("# derived by lockgen\n\nvllm==1.0\nnumpy==2.0\n")
    assert installer._stamp("vllm", "1.0", lock) == stamp
    lock.write_text("vllm==1.0\nnumpy==2.1\n")
    assert installer._stamp("vllm", "1.0", lock) != stamp


def test_healthy_needs_the_same_stamp(tmp_path: Path) -> None:
    venv = tmp_path / "vllm-0.9.2"
    stamp = {"engine": "vllm", "version": "0.9.2", "lock_sha256": "x"}
    assert not installer.healthy(venv, stamp)
    (installer.site_packages(venv) / "vllm-0.9.2.dist-info").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    (venv / installer.STAMP).write_text(json.dumps(stamp))
    assert installer.healthy(venv, stamp)
    assert not installer.healthy(venv, {**stamp, "lock_sha256": "y"})


def test_lockgen_reads_vllms_requirements(tmp_path: Path) -> None:
    dist = installer.site_packages(tmp_path) / "vllm-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Name: vllm\nRequires-Dist: transformers<5,>=4.56.0\n"
        "Requires-Dist: fastapi[standard]>=0.115.0\n"
        "Requires-Dist: xformers; platform_system == 'Linux'\n"
        "Requires-Dist: tensorizer==2.10.1; extra == \"tensorizer\"\n")
    reqs = lockgen.vllm_requirements(tmp_path, "1.0")
    assert reqs == {"transformers": "transformers<5,>=4.56.0", "fastapi": "fastapi>=0.115.0",
                    "xformers": "xformers"}
    assert lockgen._missing("x\nModuleNotFoundError: No module named 'zmq.asyncio'\n") == "zmq"
    assert lockgen._missing("all fine") is None
    fastapi = ('RuntimeError: Form data requires "python-multipart" to be installed.\n'
               "You can install \"python-multipart\" with: \n\npip install python-multipart")
    assert lockgen._missing(fastapi) == "dist:python-multipart"
    lock = installer.LOCKS / "vllm-0.11.0.txt"
    assert lockgen._origin("--like", lock) == " --like specdec_lab/contract/locks/vllm-0.11.0.txt"
    assert lockgen._origin("--seed", None) == ""
