"""specdec.plan.planner: defaults, fallbacks, pinned values and one-line errors."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from specdec.catalog import load_catalog
from specdec.errors import ConfigError, PlanError, SpecdecError
from specdec.host.identify import Identity
from specdec.plan.planner import baseline, check_image, make_plan

L8 = "meta-llama/Llama-3.1-8B-Instruct"
L3 = "meta-llama/Llama-3.2-3B-Instruct"
L1 = "meta-llama/Llama-3.2-1B-Instruct"
HEAD8 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def data(**kw: Any) -> dict[str, Any]:
    return {f"specdec_{k}": v for k, v in kw.items()}


def ident(device: str, l4t: str | None = "36.4.3") -> Identity:
    return Identity(device=device, model_string="x", module_id=None, l4t=l4t,
                    memory_gib=1.0, arch="aarch64", gpu_name=None)


def test_agx_defaults_to_eagle3() -> None:
    p = make_plan("agx", data(device="agx-orin-64gb", model=L8), None)
    cat = load_catalog()
    dev = cat.device("agx-orin-64gb")
    assert (p.engine, p.runtime, p.method, p.draft) == ("vllm", "docker", "eagle3", HEAD8)
    assert p.num_speculative_tokens == dev.speculative_tokens["eagle3"]
    assert p.gpu_memory_utilization == dev.mem_util_speculative
    assert p.max_model_len == dev.max_model_len
    assert p.max_num_seqs == dev.max_num_seqs
    assert p.port == 8000
    assert p.served_model_name == L8
    assert p.image == load_catalog().default_image(dev, "vllm", "36.4.3").ref
    assert p.fit.fits
    assert any("eagle3" in n for n in p.notes)


def test_identity_only_device() -> None:
    p = make_plan("agx", data(model=L8), ident("agx-orin-64gb"))
    assert p.device == "agx-orin-64gb"


def test_declared_device_contradicts_identity() -> None:
    with pytest.raises(PlanError) as exc:
        make_plan("h", data(device="agx-orin-64gb", model=L8), ident("orin-nano-8gb"))
    assert str(exc.value) == (
        "h: declared specdec_device=agx-orin-64gb but the host identifies as orin-nano-8gb"
    )


def test_no_device_offline() -> None:
    with pytest.raises(ConfigError, match="h: specdec_device is not set"):
        make_plan("h", data(model=L8), None)


def test_nx_falls_back_to_ngram_then_draft_with_more_memory() -> None:
    p = make_plan("nx", data(device="orin-nx-16gb", model=L3), None)
    assert p.method == "ngram" and p.draft is None
    assert any("draft_model" in n and "does not fit" in n for n in p.notes)
    p2 = make_plan("nx", data(device="orin-nx-16gb", model=L3, gpu_memory_utilization=0.7), None)
    assert (p2.method, p2.draft) == ("draft_model", L1)
    assert p2.num_speculative_tokens == load_catalog().device("orin-nx-16gb").speculative_tokens[
        "draft_model"]


def test_eagle3_not_advised_on_nano_picks_ngram() -> None:
    p = make_plan("nano", data(device="orin-nano-8gb", model=L1), None)
    assert p.method == "ngram"


def test_spark_trtllm_image_and_methods() -> None:
    p = make_plan("s", data(device="dgx-spark", engine="trtllm", model="openai/gpt-oss-120b"))
    # GA before release candidates: 1.2.1, which spells EAGLE-3 "Eagle" (before PR #10124) and
    # needs the head as a local directory (before PR #10099).
    assert p.method == "eagle3" and p.image == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    assert (p.engine_version, p.num_speculative_tokens) == ("1.2.1", 5)
    assert p.decoding_type == "Eagle"
    assert p.draft_dir == "/var/lib/specdec/hf/local/nvidia--gpt-oss-120b-Eagle3-long-context"
    assert p.tiktoken_dir == "/var/lib/specdec/hf/tiktoken"
    p2 = make_plan("s", data(device="dgx-spark", engine="trtllm",
                             model="nvidia/Llama-3.3-70B-Instruct-FP4"))
    assert (p2.method, p2.draft) == ("draft_model", "nvidia/Llama-3.1-8B-Instruct-FP4")


def test_trtllm_on_orin_rejected() -> None:
    with pytest.raises(PlanError) as exc:
        make_plan("o", data(device="agx-orin-64gb", engine="trtllm", model=L8))
    assert "specdec_engine='trtllm'" in str(exc.value) and "platform l4t" in str(exc.value)


def test_native_has_no_image() -> None:
    p = make_plan("o", data(device="agx-orin-64gb", runtime="native", model=L8))
    assert p.image is None


def test_user_image_must_be_pinned() -> None:
    ok = "nvcr.io/nvidia/vllm:25.11-py3@sha256:" + "a" * 64
    p = make_plan("s", data(device="dgx-spark", model=L8, image=ok))
    assert p.image == ok
    for bad in ("nvcr.io/nvidia/vllm", "nvcr.io/nvidia/vllm:latest", "dustynv/vllm@sha256:abc",
                "ghcr.io/nvidia-ai-iot/vllm:latest-jetson-orin",
                "Not An Image"):
        with pytest.raises(ConfigError) as exc:
            make_plan("s", data(device="dgx-spark", model=L8, image=bad))
        assert str(exc.value).startswith(f"s: specdec_image={bad!r}: ")
    local = "localhost:5000/specdec/vllm:1.0"
    assert check_image("h", "k", local) == local
    assert check_image("h", "k", "vllm:10") == "vllm:10"
    assert check_image("h", "k", "r/vllm@sha256:" + "0" * 64)


def test_l4t_release_selects_image_key() -> None:
    with pytest.raises(PlanError, match="no vllm image for agx-orin-64gb on L4T 35.6.0"):
        make_plan("o", data(model=L8), ident("agx-orin-64gb", l4t="35.6.0"))


def test_pinned_values_kept() -> None:
    p = make_plan("o", data(device="agx-orin-64gb", model=L8, method="draft_model",
                            num_speculative_tokens=6, gpu_memory_utilization=0.5,
                            max_model_len=2048, max_num_seqs=2, port=9000,
                            extra_args=["--enforce-eager"], env={"SPECDEC_EMU_FAULT": "crash"}))
    assert (p.method, p.draft, p.num_speculative_tokens) == ("draft_model", L1, 6)
    assert (p.gpu_memory_utilization, p.max_model_len, p.max_num_seqs, p.port) == (
        0.5, 2048, 2, 9000)
    assert p.extra_args == ("--enforce-eager",)
    assert dict(p.env)["SPECDEC_EMU_FAULT"] == "crash"
    assert "specdec_gpu_memory_utilization" in p.pinned


def test_draft_infers_method() -> None:
    p = make_plan("o", data(device="agx-orin-64gb", model=L8, draft=L1))
    assert p.method == "draft_model"
    p = make_plan("o", data(device="agx-orin-64gb", model=L8, draft=HEAD8))
    assert p.method == "eagle3"


def test_ngram_and_none() -> None:
    p = make_plan("o", data(device="agx-orin-64gb", model=L8, method="ngram"))
    assert p.method == "ngram" and p.draft is None and p.num_speculative_tokens == 4
    p = make_plan("o", data(device="agx-orin-64gb", model=L8, method="none"))
    assert p.method == "none" and p.num_speculative_tokens == 0 and not p.speculative
    assert p.gpu_memory_utilization == load_catalog().device("agx-orin-64gb").mem_util_baseline


def test_custom_model_needs_params() -> None:
    with pytest.raises(ConfigError) as exc:
        make_plan("o", data(device="agx-orin-64gb", model="acme/Foo-7B"))
    assert "specdec_model='acme/Foo-7B'" in str(exc.value)
    assert "specdec_model_params_b" in str(exc.value)
    p = make_plan("o", data(device="agx-orin-64gb", model="acme/Foo-7B", model_params_b=7.0))
    assert p.method == "ngram"
    assert p.fit.target_gib == pytest.approx(7e9 * 2 / 2**30, abs=0.01)


def test_baseline() -> None:
    p = make_plan("agx", data(device="agx-orin-64gb", model=L8))
    b = baseline(p)
    assert (b.method, b.draft, b.num_speculative_tokens) == ("none", None, 0)
    assert b.gpu_memory_utilization == load_catalog().device("agx-orin-64gb").mem_util_baseline
    assert b.fit.draft_gib == 0 and b.fit.kv_needed_gib < p.fit.kv_needed_gib
    assert b.release_id() != p.release_id()
    assert (b.model, b.image, b.port, b.max_model_len) == (p.model, p.image, p.port,
                                                           p.max_model_len)
    pinned = make_plan("agx", data(device="agx-orin-64gb", model=L8, gpu_memory_utilization=0.6))
    assert baseline(pinned).gpu_memory_utilization == 0.6
    custom = make_plan("o", data(device="agx-orin-64gb", model="acme/Foo-7B", model_params_b=7.0))
    assert baseline(custom).fit.kv_needed_gib == pytest.approx(custom.fit.kv_needed_gib, abs=2e-3)


def test_release_id_ignores_host() -> None:
    a = make_plan("a", data(device="agx-orin-64gb", model=L8))
    b = make_plan("b", data(device="agx-orin-64gb", model=L8))
    assert a.release_id() == b.release_id()


def test_data_from_hostdata_like_object() -> None:
    class HD:
        def dict(self) -> dict[str, Any]:
            return data(device="agx-orin-64gb", model=L8)

    assert make_plan("o", HD()).method == "eagle3"


@pytest.mark.parametrize(
    ("kw", "exc_type", "fragments"),
    [
        ({"device": "orin-agx", "model": L8}, ConfigError, ["specdec_device='orin-agx'",
                                                            "unknown device"]),
        ({"device": "agx-orin-64gb"}, ConfigError, ["specdec_model is not set"]),
        ({"device": "agx-orin-64gb", "model": L8, "method": "medusa"}, ConfigError,
         ["specdec_method='medusa'", "no known medusa head"]),
        ({"device": "agx-orin-64gb", "model": L3, "method": "eagle3"}, ConfigError,
         ["specdec_method='eagle3'", "no known eagle3 head", L3]),
        ({"device": "agx-orin-64gb", "model": L8, "draft": "Qwen/Qwen3-0.6B"}, ConfigError,
         ["specdec_draft='Qwen/Qwen3-0.6B'", "tokenizer qwen3", "llama3"]),
        ({"device": "agx-orin-64gb", "model": L8, "draft": "acme/tiny"}, ConfigError,
         ["specdec_draft='acme/tiny'", "not a catalog model"]),
        ({"device": "agx-orin-64gb", "model": L8, "method": "ngram", "draft": L1}, ConfigError,
         ["specdec_draft=", "takes no draft"]),
        ({"device": "agx-orin-64gb", "model": L1, "method": "draft_model"}, ConfigError,
         ["specdec_method='draft_model'", "no catalog draft"]),
        ({"device": "agx-orin-64gb", "model": "Qwen/Qwen3-8B",
          "draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, ConfigError,
         ["specdec_draft=", "tokenizer llama3"]),
        ({"device": "orin-nano-8gb", "model": "Qwen/Qwen3-8B"}, PlanError,
         ["specdec_model='Qwen/Qwen3-8B'", "model weights 15.26 GiB",
          "exceed 7.44 GiB x 0.45"]),
        ({"device": "orin-nano-8gb", "model": "Qwen/Qwen3-8B",
          "method": "draft_model"}, PlanError, ["specdec_method='draft_model'",
                                                "+ draft 1.12 GiB", "exceed 7.44 GiB x 0.45"]),
        # NVFP4 needs Blackwell: refused on an Orin before any fit.
        ({"device": "agx-orin-64gb", "model": "nvidia/Llama-3.3-70B-Instruct-FP4"}, PlanError,
         ["specdec_model='nvidia/Llama-3.3-70B-Instruct-FP4'",
          "nvfp4 weights do not run on agx-orin-64gb", "runs on: sbsa"]),
        ({"device": "orin-nano-8gb", "model": L1, "max_model_len": 131072}, PlanError,
         ["specdec_max_model_len=131072", "To serve at least one request with max_model_len "
          "(131072)", "larger than the available KV cache memory"]),
        ({"device": "agx-orin-64gb", "model": "Qwen/Qwen3-8B", "max_model_len": 65536},
         ConfigError, ["specdec_max_model_len=65536", "exceeds"]),
        ({"device": "orin-nano-8gb", "model": L1, "gpu_memory_utilization": 0.95}, PlanError,
         ["specdec_gpu_memory_utilization=0.95", "to the OS"]),
        ({"device": "dgx-spark", "engine": "trtllm", "model": L8, "method": "medusa",
          "draft": HEAD8}, ConfigError, ["specdec_draft="]),
        ({"device": "dgx-spark", "engine": "trtllm", "model": L8, "method": "suffix"},
         PlanError, ["specdec_method='suffix'", "TensorRT-LLM 1.2.1 cannot run suffix",
                     "no release in the capability table can"]),
        ({"device": "agx-orin-64gb", "model": L8, "metod": "ngram"}, ConfigError,
         ["unknown key specdec_metod='ngram'; did you mean specdec_method?"]),
        ({"device": "agx-orin-64gb", "model": L8, "runtime": "podman"}, ConfigError,
         ["specdec_runtime='podman'"]),
    ],
)
def test_bad_input_one_line(kw: dict[str, Any], exc_type: type[SpecdecError],
                            fragments: list[str]) -> None:
    with pytest.raises(exc_type) as exc:
        make_plan("host-9", data(**kw), None)
    msg = str(exc.value)
    assert msg.startswith("host-9: ")
    assert "\n" not in msg
    for frag in fragments:
        assert frag in msg, msg


def test_plan_does_not_import_pyinfra() -> None:
    import subprocess

    code = ("import sys, specdec.plan.planner, specdec.render.files, specdec.host.identify, "
            "specdec.plan.memory; "
            "sys.exit(1 if any(m.startswith('pyinfra') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_public_api_signatures() -> None:
    import inspect

    from specdec.config import inventory
    from specdec.host import identify
    from specdec.render import files as render

    assert list(inspect.signature(make_plan).parameters) == ["host", "data", "identity", "catalog",
                                                                 "installed", "group"]
    assert list(inspect.signature(baseline).parameters) == ["plan", "catalog"]
    assert list(inspect.signature(render.render).parameters) == ["plan"]
    assert list(inspect.signature(inventory.load_inventory).parameters) == ["path", "limit", "flag"]
    assert "parse_identity" in identify.__all__ and "IDENTITY_FILES" in identify.__all__
    assert list(inspect.signature(identify.read_identity_root).parameters) == ["root"]


def test_catalog_identity_positional_order_tolerated() -> None:
    cat = load_catalog()
    p = make_plan("o", data(model=L8), cat, ident("agx-orin-64gb"))  # type: ignore[arg-type]
    assert p.device == "agx-orin-64gb"


def test_every_device_model_engine_runtime_plans_or_refuses_cleanly() -> None:
    from specdec.render.files import render

    cat = load_catalog()
    planned = 0
    for dev in cat.devices.values():
        for model in cat.models:
            for engine in ("vllm", "trtllm"):
                for runtime in ("docker", "native"):
                    d = data(device=dev.id, model=model, engine=engine, runtime=runtime)
                    try:
                        p = make_plan("h", d)
                    except (PlanError, ConfigError) as exc:
                        assert "\n" not in str(exc) and str(exc).startswith("h: ")
                        continue
                    assert p.fit.fits and engine in dev.engines
                    assert render(p).files and render(baseline(p)).files
                    planned += 1
    assert planned > 40


def test_default_context_that_does_not_fit_is_shortened() -> None:
    # Qwen3-1.7B on an 8 GB Orin NX: the device's default 4096 leaves too little KV cache.
    p = make_plan("nx8", {"specdec_device": "orin-nx-8gb", "specdec_model": "Qwen/Qwen3-1.7B"},
                  None)
    assert p.max_model_len < 4096 and p.max_model_len % 256 == 0 and p.fit.fits
    assert any("max_model_len 4096 does not fit" in n for n in p.notes)
    # A context the user set is theirs: it fails with vLLM's words instead.
    with pytest.raises(PlanError, match="estimated maximum model length"):
        make_plan("nx8", {"specdec_device": "orin-nx-8gb", "specdec_model": "Qwen/Qwen3-1.7B",
                          "specdec_max_model_len": 4096}, None)
