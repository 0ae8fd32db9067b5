"""specdec.catalog: the shipped catalog loads and is internally consistent."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.catalog import (
    ENGINES,
    METHODS,
    RUNTIMES,
    load_catalog,
    parse_catalog,
)
from specdec.errors import ConfigError
from specdec.plan.planner import check_image

CAT_DIR = Path(__file__).resolve().parent.parent.parent / "specdec" / "catalog"


def test_loads() -> None:
    cat = load_catalog()
    assert "agx-orin-64gb" in cat.devices and "dgx-spark" in cat.devices
    assert "meta-llama/Llama-3.1-8B-Instruct" in cat.models


def test_devices_consistent() -> None:
    cat = load_catalog()
    module_ids: set[str] = set()
    for dev in cat.devices.values():
        assert set(dev.engines) <= set(ENGINES) and set(dev.runtimes) <= set(RUNTIMES)
        assert 0 < dev.mem_util_speculative <= dev.mem_util_baseline < 1
        assert dev.memory_gib * (1 - dev.mem_util_baseline) >= 1.0  # the OS keeps >= 1 GiB
        assert set(dev.speculative_tokens) <= set(METHODS)
        for mid in dev.module_ids:
            assert mid not in module_ids
            module_ids.add(mid)
        for engine in dev.engines:
            img = cat.default_image(dev, engine, "36.4.3" if dev.platform == "l4t" else None)
            if dev.runtimes == ("native",):  # no image: the release it pins natively
                assert img is None and engine in dev.native_releases, (dev.id, engine)
                continue
            assert img is not None, (dev.id, engine)  # every device has a default per engine
            check_image("catalog", dev.id, img.ref)  # every catalog image is pinned
        if dev.platform == "l4t":
            assert dev.engines == ("vllm",)  # no trtllm-serve on Orin
            assert dev.module_ids


def test_models_and_heads() -> None:
    cat = load_catalog()
    for model in cat.models.values():
        for method, head in model.heads.items():
            assert method in METHODS
            assert cat.heads[head].tokenizer == model.tokenizer
        for d in model.drafts:
            assert cat.models[d].weight_gib < model.weight_gib


def test_bad_catalog(tmp_path: Path) -> None:
    devices = (CAT_DIR / "devices.yaml").read_text()
    models = tmp_path / "models.yaml"
    models.write_text((CAT_DIR / "models.yaml").read_text())
    bad = tmp_path / "devices.yaml"
    bad.write_text(devices.replace("engines: [vllm]", "engines: [sglang]", 1))
    with pytest.raises(ConfigError, match="unknown engine 'sglang'"):
        parse_catalog(bad, models)
    bad.write_text("devices: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        parse_catalog(bad, models)
    with pytest.raises(ConfigError, match="unknown device 'x'"):
        load_catalog().device("x")


def test_quantized_checkpoints_are_smaller_than_their_base_and_reuse_its_head() -> None:
    cat = load_catalog()
    quantized = [m for m in cat.models.values() if m.base_model]
    assert {m.quantization for m in quantized} >= {"w4a16", "fp8", "nvfp4"}
    for m in quantized:
        base = cat.models[m.base_model]
        assert m.weight_gib < base.weight_gib and m.tokenizer == base.tokenizer, m.id
        assert m.decode_bytes <= m.weight_bytes, m.id
        assert m.heads == base.heads or not base.heads, m.id  # the bf16 head is reused


def test_quantized_target_plans_with_its_base_models_eagle3_head() -> None:
    from specdec.plan.planner import make_plan

    plan = make_plan("h", {"specdec_device": "agx-orin-64gb",
                           "specdec_model": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"},
                     None)
    assert (plan.method, plan.draft) == ("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    fp8 = make_plan("h", {"specdec_device": "agx-orin-32gb",
                          "specdec_model": "Qwen/Qwen3-8B-FP8"}, None)  # W8A16 on Orin
    assert fp8.model == "Qwen/Qwen3-8B-FP8"


def test_weight_formats_per_platform() -> None:
    q = load_catalog().quantizations
    assert set(q["nvfp4"].platforms) == {"sbsa"} and set(q["mxfp4"].platforms) == {"sbsa"}
    assert set(q["fp8"].platforms) == {"l4t", "sbsa"}
    assert set(q["w4a16"].platforms) == {"l4t", "sbsa"}
