"""Every variable specdec sets in any unit it writes (``Environment=``, ``docker run -e``, what a
unit's shell exports from a credential) is reserved: host data (``specdec_env``) can set none of
them, nor the loader's and interpreters' hooks."""

from __future__ import annotations

import re
import shlex

import pytest

from specdec.config import hygiene
from specdec.errors import ConfigError
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import RESERVED_ENV, parse_hosts
from specdec.plan.planner import make_plan, plan_host_settings
from specdec.render.files import render
from tests.unit.test_render import CASES, plan_for

_ENV_LINE = re.compile(r"^Environment=\"?([A-Za-z_][A-Za-z0-9_]*)=", re.M)
_EXPORT = re.compile(r"export ([A-Z_ ]+);")


def _units() -> list[str]:
    plans = [plan_for(c) for c in CASES]
    plans.append(make_plan("t", {"specdec_device": "dgx-spark", "specdec_engine": "trtllm",
                                 "specdec_model": "openai/gpt-oss-120b",
                                 "specdec_method": "eagle3"}))
    for runtime in ("native", "docker"):
        hosts = [(f"s{i}", {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
                            "specdec_runtime": runtime, "specdec_model": "Qwen/Qwen3-8B",
                            "ssh_hostname": f"192.0.2.{i}", "specdec_group": "g"})
                 for i in (1, 2)]
        settings = parse_hosts(hosts)
        groups = groups_of(settings)
        plans += [plan_host_settings(s, group=groups[s.host]) for s in settings]
    return [f.content for p in plans for f in render(p).release_files
            if f.path.endswith(".service")]


def _names(unit: str) -> set[str]:
    names = set(_ENV_LINE.findall(unit))
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line[len("ExecStart="):].replace("$$", "$"))
            names |= {w.split("=", 1)[0] for a, w in zip(words, words[1:], strict=False)
                      if a == "-e"}
            for m in _EXPORT.finditer(line):
                names |= set(m.group(1).split())
    return names


def test_every_variable_specdec_sets_is_reserved() -> None:
    names = {n for u in _units() for n in _names(u)}
    # the tests' lab knobs are the emulator's, set by the inventory through specdec_env itself
    names -= {"SPECDEC_EMU_DEVICE", "SPECDEC_EMU_TIME_SCALE"}
    # (the engines get neither the HF token nor an API key: issue 29; both stay reserved)
    assert {"HF_HOME", "TRANSFORMERS_CACHE", "HOME", "ETCD_AUTH_CLIENT_KEY", "DYN_SYSTEM_PORT",
            "DYN_TCP_RPC_PORT", "TIKTOKEN_ENCODINGS_BASE", "XDG_CACHE_HOME"} <= names, names
    for name in sorted(names | {"HF_TOKEN_PATH", "VLLM_API_KEY"}):
        with pytest.raises(ConfigError, match="is reserved"):
            hygiene.check_env_reserved("h", "specdec_env", name, "x", RESERVED_ENV)


@pytest.mark.parametrize("name", ["XDG_CACHE_HOME", "XDG_CONFIG_HOME"])
def test_xdg_dirs_are_specdecs(name: str) -> None:
    with pytest.raises(ConfigError, match="is reserved"):
        hygiene.check_env_reserved("h", "specdec_env", name, "x", RESERVED_ENV)
