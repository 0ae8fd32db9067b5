"""Every rendered golden command line is accepted verbatim by the emulator's parsers."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from specdec_lab.emulator import cli_trtllm, cli_vllm
from specdec_lab.emulator.launch import engine_of
from specdec_lab.emulator.memory import trtllm_memory, vllm_cpu_memory, vllm_memory
from specdec_lab.emulator.profiles import device_profile
from specdec_lab.emulator.runtime import StartupError
from tests.hostfiles import engine_yaml_on_host

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
DIRS = sorted(p for p in GOLDEN.iterdir() if (p / "specdec-engine.service").is_file())


def engine_argv(unit: str, engine_yaml: Path) -> list[str]:
    """The ``vllm serve ...`` / ``trtllm-serve ...`` tail of ExecStart (docker prefix stripped),
    with the engine.yaml path pointed at ``engine_yaml``."""
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    words = shlex.split(line[len("ExecStart="):])
    start = next(i for i, w in enumerate(words) if engine_of(w) is not None
                 and (w.endswith("trtllm-serve") or words[i + 1:i + 2] == ["serve"]))
    argv = words[start:]
    return [str(engine_yaml) if a.endswith("engine.yaml") else a for a in argv]


@pytest.mark.parametrize("golden", DIRS, ids=[d.name for d in DIRS])
def test_golden_command_line_is_accepted(golden: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's engine release (emulated) accepts the rendered command line and YAML."""
    plan = json.loads((golden / "plan.json").read_text())
    yaml_path = golden / "engine.yaml"
    if yaml_path.is_file():
        yaml_path, env = engine_yaml_on_host(golden, plan, tmp_path)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    unit = (golden / "specdec-engine.service").read_text()
    argv = engine_argv(unit, yaml_path)
    space = re.search(r"^Environment=VLLM_CPU_KVCACHE_SPACE=(\d+)$", unit, re.M)
    kv_space = int(space.group(1)) if space else None
    assert engine_of(argv[0]) == plan["engine"]
    dev = device_profile(plan["device"])
    version = plan["engine_version"]
    if plan["engine"] == "vllm":
        args = cli_vllm.parse_argv(argv[1:])
        cfg = cli_vllm.config_from_args(args, seed=0, device_id=dev.id, device=dev,
                                        version=version)
        if kv_space is not None:
            # the CPU worker sizes its KV cache from that variable and never reads the flag
            # (specdec.engines.vllm.engine), so none is rendered
            assert "--gpu-memory-utilization" not in argv, argv
        else:
            assert cfg.gpu_memory_utilization == plan["gpu_memory_utilization"]
    else:
        assert (golden / "engine.yaml").is_file()
        args = cli_trtllm.parse_argv(argv[1:])
        cfg = cli_trtllm.config_from_args(args, seed=0, device=dev, version=version)
        assert cfg.iter_perf_stats
    assert cfg.engine_version == version
    assert cfg.setup.target.id == plan["model"]
    # the engine listens on loopback, behind the API proxy on plan["port"]
    assert cfg.port == plan["engine_port"] != plan["port"] and cfg.host == "127.0.0.1"
    assert cfg.setup.max_num_seqs == plan["max_num_seqs"]
    assert cfg.setup.model_len == plan["max_model_len"]
    if plan["speculative"]:
        assert cfg.setup.speculative
        assert cfg.setup.k == plan["num_speculative_tokens"]
        assert cfg.setup.method == plan["method"]
    else:
        assert not cfg.setup.speculative
    # the plan's fit and the emulator's startup memory check agree: the engine starts
    inp = cfg.setup.memory_inputs()
    if plan["engine"] == "vllm" and kv_space is not None:
        rep = vllm_cpu_memory(inp, cfg.gpu_memory_utilization, kv_space)
    elif plan["engine"] == "vllm":
        rep = vllm_memory(inp, cfg.gpu_memory_utilization)
    else:
        rep = trtllm_memory(inp, cfg.kv_free_fraction)
    assert rep.kv_tokens >= cfg.setup.model_len


def test_engine_yaml_unknown_key_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "engine.yaml"
    bad.write_text((DIRS[0].parent / "dgx-spark-trtllm-docker" / "engine.yaml").read_text()
                   + "no_such_option: 1\n")
    with pytest.raises(StartupError, match="(?s)no_such_option.*Extra inputs are not permitted"):
        cli_trtllm.parse_extra_options(str(bad))
