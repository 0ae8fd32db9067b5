"""TensorRT-LLM (``trtllm-serve``): its command line and the ``--extra_llm_api_options`` YAML."""

from __future__ import annotations

import shlex
from typing import ClassVar

import yaml

from specdec.catalog import Model
from specdec.engines.base import (
    LOOPBACK,
    Endpoints,
    Engine,
    MetricsSource,
    ReleaseFile,
    describe_speculation,
)
from specdec.engines.support import Support, Target
from specdec.engines.trtllm import facts, metrics
from specdec.engines.version import Version
from specdec.engines.vllm.engine import NGRAM_PROMPT_LOOKUP
from specdec.errors import RenderError
from specdec.host import layout
from specdec.plan.types import Plan
from specdec.render.unitfile import template

__all__ = ["CONFIG_NAME", "MANAGED_FLAGS", "TrtllmEngine", "draft_len_schedule", "engine_yaml"]

CONFIG_NAME = "engine.yaml"
# trtllm-serve (click; NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py at main 00209af):
# "--config" is an alias of "--extra_llm_api_options" there (newer than some pinned releases),
# "--free_gpu_memory_fraction" of "--kv_cache_free_gpu_memory_fraction".
MANAGED_FLAGS = {
    "--host": "the engine listens on 127.0.0.1, behind specdec's API proxy; use specdec_listen",
    "--port": "use specdec_port",
    "--backend": "specdec runs the pytorch backend",
    "--max_batch_size": "use specdec_max_num_seqs",
    "--max_seq_len": "use specdec_max_model_len",
    "--kv_cache_free_gpu_memory_fraction": "use specdec_gpu_memory_utilization",
    "--free_gpu_memory_fraction": "use specdec_gpu_memory_utilization",
    "--extra_llm_api_options": "specdec writes engine.yaml",
    "--config": "specdec writes engine.yaml",
    "--trust_remote_code": "use specdec_trust_remote_code",
}


def engine_yaml(plan: Plan) -> dict[str, object]:
    """The ``--extra_llm_api_options`` document (keys as `specdec.engines.trtllm.facts` lists
    them for the release)."""
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
        spec: dict[str, object] = {
            "decoding_type": decoding,
            "max_draft_len": plan.num_speculative_tokens,
        }
        if plan.k_by_batch:
            spec["draft_len_schedule"] = draft_len_schedule(plan)
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


def draft_len_schedule(plan: Plan) -> dict[int, int]:
    """The plan's k per batch size as the release's ``draft_len_schedule``: each inclusive range
    ``[start, end, k]`` becomes ``{end: k}`` (keys are upper bounds from 1.3.0rc27, PR #10860;
    `specdec.engines.trtllm.facts.DRAFT_LEN_SCHEDULE`). The release's validator wants the
    smallest key to draft ``max_draft_len`` and none more: a schedule that grows is refused."""
    f = facts.trtllm_facts(plan.engine_version)
    if not f.schedules(plan.decoding_type):
        why = (f.schedule.error or "").format(version=plan.engine_version) if (
            f.schedule.value is None) else (f"TensorRT-LLM renders draft_len_schedule for "
                                            f"{', '.join(facts.SCHEDULE_DECODING)} only, not "
                                            f"{plan.decoding_type}")
        raise RenderError(f"num_speculative_tokens per batch size: {why}", host=plan.host)
    sched = {end: k for _start, end, k in plan.k_by_batch}
    first = plan.k_by_batch[0][2]
    if first != plan.num_speculative_tokens or max(sched.values()) > first:
        raise RenderError(f"num_speculative_tokens per batch size {list(plan.k_by_batch)}: "
                          "TensorRT-LLM's draft_len_schedule must draft max_draft_len "
                          f"({plan.num_speculative_tokens}) at its smallest batch size and no "
                          "more above it", host=plan.host)
    return sched


class TrtllmEngine(Engine):
    """``trtllm-serve MODEL`` on the PyTorch backend; speculation in ``engine.yaml``."""

    name = "trtllm"
    label = "TensorRT-LLM"
    managed_flags: ClassVar = MANAGED_FLAGS
    reserved_env = ("TIKTOKEN_ENCODINGS_BASE",)

    def check(self, version: Version, method: str, target: Target) -> Support:
        return facts.check(version, method, target)

    def check_head(self, version: Version, fmt: str) -> Support:
        return facts.check_head(version, fmt)

    def releases(self) -> list[Version]:
        return facts.boundaries()

    def per_batch_k(self, plan: Plan) -> bool:
        return facts.trtllm_facts(plan.engine_version).schedules(plan.decoding_type)

    def schedule_nonincreasing(self) -> bool:
        # draft_len_schedule[smallest key] == max_draft_len, every length <= it (llm_args.py
        # validate_draft_len_schedule_and_sort)
        return True

    def speculation_details(self, version: Version, method: str,
                            draft: str | None) -> tuple[str | None, str | None]:
        f = facts.trtllm_facts(version)
        decoding = f.decoding_type(method) if method != "none" else None
        draft_dir = layout.local_model_dir(draft) if draft and f.head_local_dir.value else None
        return decoding, draft_dir

    def tiktoken_dir(self, model: Model) -> str | None:
        # gpt-oss's harmony encoding: trtllm-serve reads it from TIKTOKEN_ENCODINGS_BASE
        return layout.TIKTOKEN_DIR if model.tokenizer == "o200k_harmony" else None

    def argv(self, plan: Plan, config_path: str | None) -> list[str]:
        if config_path is None:
            raise RenderError("trtllm needs the engine.yaml path", host=plan.host)
        return [
            "trtllm-serve", plan.model,
            "--backend", "pytorch",
            # loopback only, behind specdec's API proxy: trtllm-serve has no key or TLS option
            # (tensorrt_llm/commands/serve.py; `specdec.render.proxy`)
            "--host", LOOPBACK,
            "--port", str(plan.engine_port),
            "--max_batch_size", str(plan.max_num_seqs),
            "--max_seq_len", str(plan.max_model_len),
            "--kv_cache_free_gpu_memory_fraction", f"{plan.gpu_memory_utilization:g}",
            "--extra_llm_api_options", config_path,
            *(["--trust_remote_code"] if plan.trust_remote_code else []),
        ]

    def environment(self, plan: Plan) -> list[tuple[str, str]]:
        return [("TIKTOKEN_ENCODINGS_BASE", plan.tiktoken_dir)] if plan.tiktoken_dir else []

    def config_file(self, plan: Plan) -> str | None:
        return CONFIG_NAME

    def release_files(self, plan: Plan, release_id: str) -> list[ReleaseFile]:
        body = yaml.safe_dump(engine_yaml(plan), sort_keys=True, default_flow_style=False)
        header = template("engine.yaml.j2", plan=plan, release_id=release_id,
                          speculation=describe_speculation(plan))
        return [ReleaseFile(CONFIG_NAME, header + body)]

    def version_probe(self) -> str:
        # the tensorrt_llm distribution's version as the Python behind trtllm-serve sees it
        # (importing tensorrt_llm would print a banner and take long)
        meta = shlex.quote("import importlib.metadata as m; print(m.version('tensorrt_llm'))")
        return ("if t=$(command -v trtllm-serve 2>/dev/null); then "
                "py=$(head -n 1 \"$t\" | sed -n 's|^#! *\\([^ ]*python[0-9.]*\\).*|\\1|p'); "
                f"echo \"trtllm=$(${{py:-python3}} -c {meta} 2>/dev/null | tail -n 1)\"; fi")

    def endpoints(self, plan: Plan) -> Endpoints:
        return Endpoints(metrics_format="trtllm-json")

    def metrics_sources(self, plan: Plan) -> list[MetricsSource]:
        return [metrics.engine_source(plan)]
