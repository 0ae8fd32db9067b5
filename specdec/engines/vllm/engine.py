"""vLLM (``vllm serve``): its command line and ``--speculative-config`` for the plan's release."""

from __future__ import annotations

import json
from typing import ClassVar

from specdec.engines.base import LOOPBACK, Engine, MetricsSource
from specdec.engines.support import Support, Target
from specdec.engines.version import Version
from specdec.engines.vllm import facts, metrics
from specdec.errors import RenderError
from specdec.plan.types import Plan

__all__ = ["MANAGED_FLAGS", "NGRAM_PROMPT_LOOKUP", "VllmEngine", "speculative_config"]

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
    # the engine has no key of its own: it is on loopback behind the API proxy, which checks
    # the fleet's (a key given to vLLM would only add a secret to its environment)
    reserved_env = ("VLLM_API_KEY",)

    def check(self, version: Version, method: str, target: Target) -> Support:
        return facts.check(version, method, target)

    def check_head(self, version: Version, fmt: str) -> Support:
        return facts.check_head(version, fmt)

    def releases(self) -> list[Version]:
        return facts.boundaries()

    def spec_config_release(self, plan: Plan) -> str | None:
        return plan.engine_version

    def per_batch_k(self, plan: Plan) -> bool:
        return bool(facts.vllm_facts(plan.engine_version).per_batch_size_k.value)

    def model_flags(self, plan: Plan, version: str) -> list[str]:
        """The flags of the model, its memory, its batch and its speculation, as vLLM
        ``version``'s engine arguments (shared by every engine that runs vLLM's)."""
        argv = [
            "--served-model-name", plan.served_model_name,
            "--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}",
            "--max-model-len", str(plan.max_model_len),
            "--max-num-seqs", str(plan.max_num_seqs),
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

    def metrics_sources(self, plan: Plan) -> list[MetricsSource]:
        # the engine itself on loopback (argv), not the API proxy: vLLM's API key guards only
        # /v1 routes (0.9.2 api_server.py:1180; 0.31.0 serve/middleware), so /metrics answers
        return [metrics.engine_source(plan, "engine", LOOPBACK, plan.engine_port,
                                      plan.engine_version, truth=True)]

    def version_probe(self) -> str:
        return ("if command -v vllm >/dev/null 2>&1; then "
                "echo \"vllm=$(vllm --version 2>/dev/null | tail -n 1)\"; fi")

