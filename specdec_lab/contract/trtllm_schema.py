"""TensorRT-LLM's ``engine.yaml`` (trtllm-serve ``--extra_llm_api_options``) against the schema
facts in `specdec.engines.trtllm.facts`.

TensorRT-LLM on PyPI is a stub that downloads the real package from NVIDIA's registry, which
these machines cannot reach, so no release can be run here. The facts were copied from the
release's source (``tensorrt_llm/llmapi/llm_args.py``: every level a ``StrictBaseModel``, i.e.
``extra='forbid'``; ``DecodingBaseConfig.from_dict``'s decoding types; PR #10099 / #10124), each
with its citation in `specdec.engines.trtllm.facts`. Checked for every rendered ``engine.yaml``: the
golden cases and every TensorRT-LLM host of the example inventories, as planned and pinned to
each TensorRT-LLM release the catalog has.
"""

from __future__ import annotations

from typing import Any

import yaml

from specdec.catalog import Catalog, load_catalog
from specdec.engines.trtllm import facts
from specdec.engines.trtllm.facts import trtllm_facts
from specdec.engines.version import Version
from specdec.errors import PlanError
from specdec.plan.planner import make_plan
from specdec.render.files import render
from specdec_lab.contract.cases import example_hosts, golden_plans, image_of, pinned_versions

__all__ = ["rendered_yamls", "yaml_problems"]


def _unknown(where: str, keys: Any, allowed: frozenset[str], what: str) -> list[str]:
    """Keys outside the schema: every level is a StrictBaseModel, so the release refuses them
    ("Extra inputs are not permitted")."""
    if not isinstance(keys, dict):
        return [f"{where}: {what} is {type(keys).__name__}, not a mapping"]
    extra = sorted(set(keys) - allowed)
    return [f"{where}: {what} has {extra}: Extra inputs are not permitted"] if extra else []


def yaml_problems(where: str, doc: Any, version: str, plan: dict[str, Any]) -> list[str]:
    """Every way ``doc`` breaks release ``version``'s schema, or disagrees with its plan."""
    f = trtllm_facts(Version.parse(version))
    out = _unknown(where, doc, facts.TOP_KEYS, "the top level")
    if out:
        return out
    out += _unknown(where, doc.get("kv_cache_config", {}), facts.KV_CACHE_KEYS,
                    "kv_cache_config")
    out += _unknown(where, doc.get("cuda_graph_config", {}), facts.CUDA_GRAPH_KEYS,
                    "cuda_graph_config")
    spec = doc.get("speculative_config")
    if spec is None:
        if plan["speculative"]:
            out.append(f"{where}: the plan speculates ({plan['method']}) but there is no "
                       "speculative_config")
        return out
    if not isinstance(spec, dict):
        return [*out, f"{where}: speculative_config is not a mapping"]
    dtype = spec.get("decoding_type")
    if dtype not in f.accepted.value:
        out.append(f"{where}: decoding_type {dtype!r} is not one TensorRT-LLM {version} "
                   f"accepts {list(f.accepted.value)} [{f.accepted.source}]")
        return out
    if dtype != f.decoding_type(plan["method"]):
        out.append(f"{where}: decoding_type {dtype!r} for method {plan['method']!r}; "
                   f"TensorRT-LLM {version} spells it {f.decoding_type(plan['method'])!r} "
                   f"[{f.decoding_source}]")
    out += _unknown(where, spec, f.spec_keys(dtype), f"speculative_config ({dtype})")
    model = spec.get("speculative_model_dir", spec.get("speculative_model"))
    if plan.get("draft") and model is None:
        out.append(f"{where}: the plan has draft {plan['draft']} but speculative_config names "
                   "no speculative_model_dir")
    if model is not None and f.head_local_dir.value and not str(model).startswith("/"):
        out.append(f"{where}: speculative_model_dir {model!r} is not a local directory, which "
                   f"TensorRT-LLM {version} needs [{f.head_local_dir.source}]")
    head = load_catalog().heads.get(plan.get("draft") or "")
    if head is not None:  # the release reads the head's config.json and weights
        fmt = facts.check_head(Version.parse(version), head.format, str(model))
        if not fmt.ok:
            out.append(f"{where}: {head.id} is a {head.format}-format EAGLE head, which "
                       f"TensorRT-LLM {version} cannot load ({fmt.reason.splitlines()[0][:120]})"
                       f" [{fmt.source}]")
    if not isinstance(spec.get("max_draft_len"), int) or spec["max_draft_len"] < 1:
        out.append(f"{where}: max_draft_len {spec.get('max_draft_len')!r} is not a positive "
                   "integer")
    return out


def _yaml_of(plan: Any) -> str:
    rendered = render(plan)
    return next(f.content for f in rendered.files if f.path.endswith("/engine.yaml"))


def rendered_yamls(cat: Catalog | None = None) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(where, release, engine.yaml text, plan) for every golden case and example host."""
    cat = cat or load_catalog()
    out: list[tuple[str, str, str, dict[str, Any]]] = []
    for d, golden in golden_plans("trtllm"):
        out.append((f"golden/{d.name}", golden["engine_version"],
                    (d / "engine.yaml").read_text(), golden))
    for inv, name, data in example_hosts():
        if data.get("specdec_engine") != "trtllm":
            continue
        own = make_plan(name, data, None)
        out.append((f"{inv}/{name}", own.engine_version, _yaml_of(own), own.to_dict()))
        for version in pinned_versions("trtllm", cat):
            pinned = dict(data)
            if pinned.get("specdec_runtime", "docker") == "docker":
                pinned["specdec_image"] = image_of(cat, "trtllm", version).ref
            else:
                pinned["specdec_engine_version"] = version
            try:
                plan = make_plan(name, pinned, None)
            except PlanError as exc:
                raise AssertionError(f"{inv}/{name}@{version}: the planner cannot plan it: "
                                     f"{exc}") from None
            out.append((f"{inv}/{name}@{version}", version, _yaml_of(plan), plan.to_dict()))
    return out


def all_problems() -> list[str]:
    problems = []
    for where, version, text, plan in rendered_yamls():
        problems += yaml_problems(where, yaml.safe_load(text), version, plan)
    return problems


if __name__ == "__main__":
    for line in all_problems() or ["no problems"]:
        print(line)
