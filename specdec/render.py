"""Render a `Plan` into exact file contents with on-host paths, modes and owners (pure).

Release files go to ``/var/lib/specdec/releases/<release_id>/``: the systemd unit, ``plan.json``
and, for trtllm, ``engine.yaml`` (``--extra_llm_api_options``). Host files: the limits.d entry
for the service user. The HF token is never rendered; the unit only points at
``/etc/specdec/hf_token`` (``LoadCredential=`` natively, a read-only bind mount under docker).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2
import yaml

from specdec import layout
from specdec.errors import RenderError
from specdec.hygiene import bad_char, show
from specdec.plan_types import Plan

__all__ = [
    "CONTAINER_ENGINE_YAML",
    "CONTAINER_HF_TOKEN",
    "LIMITS_PATH",
    "STACK_BYTES",
    "Rendered",
    "RenderedFile",
    "engine_argv",
    "hub_env",
    "render",
    "speculative_config",
    "systemd_quote",
    "unit_text",
]

STACK_BYTES = 67108864
LIMITS_PATH = "/etc/security/limits.d/90-specdec.conf"
CONTAINER_HF_TOKEN = "/run/secrets/hf_token"
CONTAINER_ENGINE_YAML = "/etc/specdec/engine.yaml"
UNIT_FILE = f"{layout.SERVICE_NAME}.service"
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
# Cold loads of big models on Jetson take minutes; systemd waits at least this long.
MIN_START_TIMEOUT = 300
NGRAM_PROMPT_LOOKUP = (2, 5)


@dataclass(frozen=True)
class RenderedFile:
    path: str  # absolute on-host path
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"


@dataclass(frozen=True)
class Rendered:
    release_id: str
    files: tuple[RenderedFile, ...]

    @property
    def by_path(self) -> dict[str, RenderedFile]:
        return {f.path: f for f in self.files}

    @property
    def release_dir(self) -> str:
        return layout.release_dir(self.release_id)

    @property
    def unit(self) -> RenderedFile:
        """The release's systemd unit (``current/<SERVICE_NAME>.service`` once switched)."""
        return self.by_path[f"{self.release_dir}/{UNIT_FILE}"]

    @property
    def release_files(self) -> tuple[RenderedFile, ...]:
        prefix = self.release_dir + "/"
        return tuple(f for f in self.files if f.path.startswith(prefix))

    @property
    def host_files(self) -> tuple[RenderedFile, ...]:
        prefix = self.release_dir + "/"
        return tuple(f for f in self.files if not f.path.startswith(prefix))


_SAFE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def systemd_quote(arg: str) -> str:
    """One argv word for ``ExecStart=``: quoted if needed, ``%`` and ``$`` escaped."""
    if _SAFE.fullmatch(arg):
        word = arg
    else:
        word = "'" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return word.replace("%", "%%").replace("$", "$$")


def _env_assignment(name: str, value: str) -> str:
    """The value of one ``Environment=`` line (``%`` escaped; ``$`` is literal there)."""
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"' if not _SAFE.fullmatch(f"{name}={value}") else text


def hub_env() -> list[tuple[str, str]]:
    """Every variable through which an image may point the Hub cache elsewhere, set to the host
    cache. huggingface_hub (constants.py) reads HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, then
    HF_HOME/hub; transformers reads TRANSFORMERS_CACHE; jetson-containers images set the last
    three to /data/models/huggingface (packages/llm/huggingface_hub/Dockerfile), which would
    otherwise win over HF_HOME."""
    hub = f"{layout.HF_HOME}/hub"
    return [("HF_HOME", layout.HF_HOME), ("HF_HUB_CACHE", hub), ("HUGGINGFACE_HUB_CACHE", hub),
            ("TRANSFORMERS_CACHE", hub)]


def speculative_config(plan: Plan) -> dict[str, object] | None:
    """vLLM's ``--speculative-config`` for the plan (None when speculation is off), with only the
    keys the plan's vLLM release has (`specdec.engines.vllm.spec_keys`)."""
    from specdec.engines import vllm_facts

    if not plan.speculative:
        return None
    version = plan.vllm_version
    if version is None:
        raise RenderError(f"engine={plan.engine!r} takes no vLLM speculative config",
                          host=plan.host)
    cfg: dict[str, object] = {"method": plan.method}
    if plan.draft:
        cfg["model"] = plan.draft
    cfg["num_speculative_tokens"] = plan.num_speculative_tokens
    cfg["draft_tensor_parallel_size"] = 1
    if plan.method in ("ngram", "ngram_gpu"):
        cfg["prompt_lookup_min"], cfg["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP
    if plan.k_by_batch:
        # [[start, end, k], ...], the first range starting at 1, k = 0 off: vLLM 0.24.0
        # vllm/config/speculative.py:161-167 (PR #32374); refused below for older releases
        cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in plan.k_by_batch]
    unknown = set(cfg) - vllm_facts(version).spec_keys
    if unknown:
        raise RenderError(f"vLLM {version} has no speculative-config key "
                          f"{', '.join(sorted(unknown))}", host=plan.host)
    return cfg


def _engine_yaml_path(plan: Plan, release_id: str) -> str:
    return f"{layout.release_dir(release_id)}/engine.yaml"


def engine_argv(plan: Plan, engine_yaml: str | None = None) -> list[str]:
    """The engine's command line (without the binary path or docker wrapper)."""
    if plan.engine == "vllm":
        argv = [
            "vllm", "serve", plan.model,
            "--host", "0.0.0.0",
            "--port", str(plan.port),
            "--served-model-name", plan.served_model_name,
            "--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}",
            "--max-model-len", str(plan.max_model_len),
            "--max-num-seqs", str(plan.max_num_seqs),
        ]
        cfg = speculative_config(plan)
        if cfg is not None:
            argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    elif plan.engine == "dynamo":
        from specdec.dynamo.render import worker_argv

        cfg = speculative_config(plan)
        argv = worker_argv(plan, json.dumps(cfg, separators=(",", ":")) if cfg else None)
    elif plan.engine == "trtllm":
        if engine_yaml is None:
            raise RenderError("trtllm needs the engine.yaml path", host=plan.host)
        argv = [
            "trtllm-serve", plan.model,
            "--backend", "pytorch",
            "--host", "0.0.0.0",
            "--port", str(plan.port),
            "--max_batch_size", str(plan.max_num_seqs),
            "--max_seq_len", str(plan.max_model_len),
            "--kv_cache_free_gpu_memory_fraction", f"{plan.gpu_memory_utilization:g}",
            "--extra_llm_api_options", engine_yaml,
        ]
    else:
        raise RenderError(f"engine={plan.engine!r}: unknown engine", host=plan.host)
    return argv + list(plan.extra_args)


def _docker_argv(plan: Plan, release_id: str, device_is_jetson: bool) -> list[str]:
    memlock = "-1" if plan.memlock == "unlimited" else f"{plan.memlock}:{plan.memlock}"
    argv = ["/usr/bin/docker", "run", "--rm", "--name", layout.SERVICE_NAME]
    if device_is_jetson:
        # As jetson-containers' run.sh on Tegra (dusty-nv/jetson-containers run.sh @ e750cb65:
        # `docker run --runtime nvidia ... --network host --shm-size=8g`): the engine's
        # processes share tensors through /dev/shm, which Docker caps at 64 MB. Not --ipc=host:
        # run.sh does not pass it on Tegra, and a sized /dev/shm keeps the host's IPC
        # namespace out of the container.
        argv += ["--runtime", "nvidia", "--network", "host", "--shm-size=8g"]
    else:
        argv += ["--gpus", "all", "--ipc=host", "--network", "host"]
    argv += [
        "--ulimit", f"memlock={memlock}",
        "--ulimit", f"stack={STACK_BYTES}",
        "-v", f"{layout.HF_HOME}:{layout.HF_HOME}",
        *[a for k, v in hub_env() for a in ("-e", f"{k}={v}")],
        "-e", "HF_HUB_OFFLINE=1",
        "-v", f"{layout.HF_TOKEN_FILE}:{CONTAINER_HF_TOKEN}:ro",
        "-e", f"HF_TOKEN_PATH={CONTAINER_HF_TOKEN}",
    ]
    if device_is_jetson:
        argv += ["-v", "/etc/nv_tegra_release:/etc/nv_tegra_release:ro"]
    if plan.tiktoken_dir:
        argv += ["-e", f"TIKTOKEN_ENCODINGS_BASE={plan.tiktoken_dir}"]
    if plan.engine == "dynamo":
        from specdec.dynamo.render import worker_env

        argv += [a for k, v in worker_env(plan) for a in ("-e", f"{k}={v}")]
    for name, value in plan.env:
        argv += ["-e", f"{name}={value}"]
    engine_yaml = None
    if plan.engine == "trtllm":
        argv += ["-v", f"{_engine_yaml_path(plan, release_id)}:{CONTAINER_ENGINE_YAML}:ro"]
        engine_yaml = CONTAINER_ENGINE_YAML
    assert plan.image is not None
    return argv + [plan.image] + engine_argv(plan, engine_yaml)


def _native_argv(plan: Plan, release_id: str) -> list[str]:
    engine_yaml = _engine_yaml_path(plan, release_id) if plan.engine == "trtllm" else None
    argv = engine_argv(plan, engine_yaml)
    if plan.engine == "dynamo":
        return argv  # the venv's interpreter already
    if plan.engine == "vllm":
        return ["/usr/local/bin/vllm"] + argv[1:]
    return ["/usr/local/bin/trtllm-serve"] + argv[1:]


def _exec_line(argv: Sequence[str]) -> str:
    return " ".join(systemd_quote(a) for a in argv)


def _engine_yaml(plan: Plan) -> dict[str, object]:
    doc: dict[str, object] = {
        "enable_iter_perf_stats": True,
        "kv_cache_config": {
            "free_gpu_memory_fraction": plan.gpu_memory_utilization,
            "enable_block_reuse": False,
        },
        "cuda_graph_config": {"max_batch_size": plan.max_num_seqs},
    }
    decoding = plan.decoding_type
    if plan.speculative:
        if decoding is None:
            raise RenderError(f"method={plan.method!r}: TensorRT-LLM {plan.engine_version} has "
                              "no decoding_type for it", host=plan.host)
        if plan.k_by_batch:
            raise RenderError("num_speculative_tokens per batch size: trtllm-serve has no such "
                              "setting", host=plan.host)
        spec: dict[str, object] = {
            "decoding_type": decoding,
            "max_draft_len": plan.num_speculative_tokens,
        }
        if plan.draft:
            # A local directory where the release needs one (before PR #10099), else the repo
            # id (read from the prefetched Hub cache). The alias works on every release.
            spec["speculative_model_dir"] = plan.draft_dir or plan.draft
        if decoding == "NGram":
            spec["max_matching_ngram_size"] = NGRAM_PROMPT_LOOKUP[1]
        doc["speculative_config"] = spec
        doc["disable_overlap_scheduler"] = decoding in ("DraftTarget", "NGram")
    else:
        doc["disable_overlap_scheduler"] = False
    return doc


def _one_line(value: object) -> object:
    """Every ``{{ … }}`` of every template: a value can never add a line to a rendered file
    (host data is validated long before; this is the last line of defence)."""
    if isinstance(value, str) and (c := bad_char(value)) is not None:
        raise RenderError(f"refusing to render {show(value)}: contains a line break or "
                          f"control character ({c})")
    return value


def unit_text(value: object) -> str:
    """Free text in a unit setting such as ``Description=``: systemd expands ``%`` specifiers
    there (systemd.unit(5), "Specifiers"), so a literal ``%`` is written ``%%``."""
    return str(_one_line(str(value))).replace("%", "%%")


@cache
def _env() -> jinja2.Environment:
    if not TEMPLATES_DIR.is_dir():
        raise RenderError(f"templates directory {TEMPLATES_DIR} is missing")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_one_line,
    )
    env.filters["unit_text"] = unit_text
    return env


def _template(name: str, **ctx: object) -> str:
    try:
        return _env().get_template(name).render(**ctx)
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {name}: {exc}") from None


def _limits_kib(memlock: str) -> str:
    if memlock == "unlimited":
        return "unlimited"
    return str(max(1, int(memlock) // 1024))


def render(plan: Plan) -> Rendered:
    """All files of the plan's release, plus host files, with exact contents."""
    from specdec.catalog import load_catalog

    if plan.runtime not in ("docker", "native"):
        raise RenderError(f"runtime={plan.runtime!r}: unknown runtime", host=plan.host)
    if plan.runtime == "docker" and not plan.image:
        raise RenderError("runtime docker needs an image", host=plan.host)
    device = load_catalog().devices.get(plan.device)
    is_jetson = device.is_jetson if device is not None else plan.device.startswith(
        ("orin", "agx")
    )
    release_id = plan.release_id()
    rdir = layout.release_dir(release_id)
    docker = plan.runtime == "docker"
    speculation = (
        f"{plan.method}" + (f" {plan.draft}" if plan.draft else "")
        + f" k={plan.num_speculative_tokens}" if plan.speculative else "off"
    )

    env_lines = [_env_assignment(k, v) for k, v in hub_env()]
    env_lines.append(_env_assignment("HF_HUB_OFFLINE", "1"))
    if not docker:
        env_lines.append("HF_TOKEN_PATH=%d/hf_token")  # %d: systemd's credentials directory
        if plan.tiktoken_dir:
            env_lines.append(_env_assignment("TIKTOKEN_ENCODINGS_BASE", plan.tiktoken_dir))
    after: list[str] = []
    if plan.dynamo is not None:
        from specdec.dynamo.render import worker_env

        if not docker:
            env_lines += [_env_assignment(k, v) for k, v in worker_env(plan)]
        if plan.dynamo.is_frontend:  # the worker registers with the etcd beside it
            after.append(f"{layout.ETCD_SERVICE}.service")
    env_lines += [_env_assignment(k, v) for k, v in plan.env]

    argv = _docker_argv(plan, release_id, is_jetson) if docker else _native_argv(plan, release_id)
    unit = _template(
        "specdec-engine.service.j2",
        plan=plan,
        release_id=release_id,
        speculation=speculation,
        docker=docker,
        environment=env_lines,
        hf_token_file=layout.HF_TOKEN_FILE,
        limit_memlock="infinity" if plan.memlock == "unlimited" else plan.memlock,
        stack_bytes=STACK_BYTES,
        timeout_start=max(plan.health_timeout_s + 60, MIN_START_TIMEOUT),
        container=layout.SERVICE_NAME,
        exec_start=_exec_line(argv),
        state_dir=layout.STATE_DIR,
        after="".join(" " + u for u in after),
    )
    files = [RenderedFile(f"{rdir}/{UNIT_FILE}", unit)]
    if plan.dynamo is not None:
        from specdec.dynamo.render import aux_units

        files += [RenderedFile(f"{rdir}/{name}", text) for name, text in aux_units(plan)]
    if plan.engine == "trtllm":
        body = yaml.safe_dump(_engine_yaml(plan), sort_keys=True, default_flow_style=False)
        header = _template("engine.yaml.j2", plan=plan, release_id=release_id,
                           speculation=speculation)
        files.append(RenderedFile(f"{rdir}/engine.yaml", header + body))
    files.append(RenderedFile(f"{rdir}/plan.json", plan.to_json() + "\n"))
    files.append(RenderedFile(
        LIMITS_PATH,
        _template("limits.conf.j2", user=plan.service_user,
                  memlock=_limits_kib(plan.memlock), stack=STACK_BYTES // 1024),
    ))
    return Rendered(release_id=release_id, files=tuple(files))
