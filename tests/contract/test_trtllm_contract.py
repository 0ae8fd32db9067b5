"""TensorRT-LLM: every rendered engine.yaml against the schema facts copied from the release's
source (`specdec.engines.trtllm.facts`; its PyPI package is a download stub, so no release runs
here)."""

from __future__ import annotations

import pytest
import yaml

from specdec_lab.contract.cases import pinned_versions
from specdec_lab.contract.trtllm_schema import rendered_yamls, yaml_problems

pytestmark = pytest.mark.contract


def test_every_rendered_engine_yaml_fits_its_release() -> None:
    yamls = rendered_yamls()
    versions = {v for _, v, _, _ in yamls}
    assert set(pinned_versions("trtllm")) <= versions
    assert {w.split("@")[0] for w, *_ in yamls} >= {
        "golden/dgx-spark-trtllm-docker", "golden/dgx-spark-trtllm-native",
        "spark.py/spark-01", "spark.py/spark-02", "lab.py/lab-spark"}
    problems = [p for where, v, text, plan in yamls
                for p in yaml_problems(where, yaml.safe_load(text), v, plan)]
    assert not problems, "\n".join(problems)


def _golden(name: str) -> tuple[dict, str, dict]:
    where, version, text, plan = next(y for y in rendered_yamls() if y[0] == name)
    return yaml.safe_load(text), version, plan


@pytest.mark.parametrize(("edit", "expect"), [
    (lambda d: d.update(no_such_option=1), "the top level has ['no_such_option']"),
    (lambda d: d["kv_cache_config"].update(free_gpu_memory=0.5), "kv_cache_config has"),
    (lambda d: d["cuda_graph_config"].update(padding=True), "cuda_graph_config has"),
    (lambda d: d["speculative_config"].update(eagle_choice=1), "speculative_config (Eagle)"),
    (lambda d: d["speculative_config"].update(decoding_type="Eagle3"), "is not one"),
    (lambda d: d["speculative_config"].update(decoding_type="NGram"), "spells it 'Eagle'"),
    (lambda d: d["speculative_config"].update(
        speculative_model_dir="nvidia/gpt-oss-120b-Eagle3-long-context"),
     "is not a local directory"),
    (lambda d: d["speculative_config"].update(speculative_model="/x"),
     "['speculative_model']"),
    (lambda d: d["speculative_config"].update(max_draft_len=0), "max_draft_len 0"),
    (lambda d: d.pop("speculative_config"), "no speculative_config"),
])
def test_schema_breaks_are_found(edit, expect: str) -> None:
    doc, version, plan = _golden("golden/dgx-spark-trtllm-docker")
    assert version == "1.2.1" and not yaml_problems("g", doc, version, plan)
    edit(doc)
    problems = yaml_problems("g", doc, version, plan)
    assert any(expect in p for p in problems), problems


def test_later_releases_take_eagle3_and_hub_ids() -> None:
    doc, version, plan = _golden("golden/dgx-spark-trtllm-1.3.0rc15-docker")
    assert doc["speculative_config"]["decoding_type"] == "Eagle3"
    assert not yaml_problems("g", doc, version, plan)
    assert yaml_problems("g", doc, "1.2.1", plan)  # the same file breaks 1.2.1


def test_a_speculators_format_head_is_refused_and_no_trtllm_host_gets_one() -> None:
    for where, version, _text, plan in rendered_yamls():
        draft = plan.get("draft")
        if draft and plan["method"] == "eagle3":
            assert draft != "RedHatAI/Qwen3-8B-speculator.eagle3", (where, version)
    doc, version, plan = _golden("golden/dgx-spark-trtllm-docker")
    head = "RedHatAI/Qwen3-8B-speculator.eagle3"
    doc["speculative_config"]["speculative_model_dir"] = f"/var/lib/specdec/models/{head}"
    problems = yaml_problems("g", doc, version, {**plan, "draft": head})
    assert any("speculators-format EAGLE head" in p and "cannot load" in p for p in problems)
    lab = next(y for y in rendered_yamls() if y[0].startswith("lab.py/lab-spark@1.2.1"))
    assert lab[3]["draft"] == "Tengyunw/qwen3_8b_eagle3"
