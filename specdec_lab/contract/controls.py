"""Controls: argv lists a release must refuse (so the contract cannot pass vacuously) and the
probes that read a release's EAGLE-3 gates, each expectation taken from
`specdec.engines.vllm.facts`. `checker_input` is what one release's checker gets: every case and
every config.json."""

from __future__ import annotations

import json
import re
from typing import Any

from specdec.catalog import Catalog, load_catalog
from specdec.engines.version import Version
from specdec.engines.vllm import facts
from specdec_lab.contract.cases import Case, Suite, rendered_cases
from specdec_lab.contract.models import CONTROL_TARGETS, configs, generic_head

__all__ = ["ARCH_PREFIX", "arch_targets", "checker_input", "core_error", "full_suite"]

BASE = ("vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096")
ARCH_PREFIX = "eagle3-arch/"
HEAD_PREFIX = "specdec-contract/eagle3-head-for-"
_NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
          "prompt_lookup_max": 5}


def core_error(text: str) -> str:
    """A fact's error text without the module path of its exception class
    (``pydantic_core._pydantic_core.ValidationError: …`` -> ``ValidationError: …``)."""
    return re.sub(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*\.(?=\w+:)", "", text)


def _spec(argv: tuple[str, ...], cfg: dict[str, Any] | str) -> tuple[str, ...]:
    text = cfg if isinstance(cfg, str) else json.dumps(cfg, separators=(",", ":"))
    return (*argv, "--speculative-config", text)


def arch_targets(cat: Catalog) -> dict[str, tuple[str, str, str]]:
    """architecture -> (target repo id, model_type, its config.json's source) for every catalog
    architecture and the control targets."""
    out: dict[str, tuple[str, str, str]] = {}
    for m in cat.models.values():
        if m.architecture and m.vocab_size and m.architecture not in out:
            out[m.architecture] = (m.id, m.model_type, "catalog")
    for repo, cfg in CONTROL_TARGETS.items():
        out.setdefault(cfg["architectures"][0], (repo, cfg["model_type"], "control"))
    return out


def _method_controls(suite: Suite) -> None:
    v = Version.parse(suite.version)
    draft = facts.METHOD_STATES["draft_model"].at(v)
    if draft is not None and draft.value == "refused" and draft.error:
        suite.add(Case("control/draft_model-refused", _spec(
            ("vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "4096"),
            {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}),
            False, "speculative", core_error(draft.error), why=draft.source))
    suffix = facts.METHOD_STATES["suffix"].at(v)
    if suffix is not None and suffix.value == "refused" and suffix.error:
        suite.add(Case("control/suffix-refused", _spec(BASE, {
            "method": "suffix", "num_speculative_tokens": 3}), False, "speculative",
            core_error(suffix.error), why=suffix.source))


def _arch_probes(suite: Suite, cat: Catalog) -> None:
    """eagle3 on each architecture with a head in the EAGLE reference format: accepted where
    the release's model-type gate lets it through, else refused with the gate's own text."""
    v = Version.parse(suite.version)
    gate = facts.vllm_facts(v).eagle3_model_types()
    for arch, (repo, model_type, _) in arch_targets(cat).items():
        argv = _spec(("vllm", "serve", repo, "--max-model-len", "4096"), {
            "method": "eagle3", "model": HEAD_PREFIX + arch, "num_speculative_tokens": 3})
        case_id = ARCH_PREFIX + arch
        if gate.value is None or any(t in model_type for t in gate.value):
            suite.add(Case(case_id, argv, True, spec=(("method", "eagle3"),), why=gate.source))
        else:
            error = (gate.error or "").format(allowed=list(gate.value), model_type=model_type,
                                              method="eagle3")
            suite.add(Case(case_id, argv, False, "speculative", core_error(error),
                           why=gate.source))


def add_controls(suite: Suite, cat: Catalog) -> None:
    v = Version.parse(suite.version)
    suite.add(Case("control/unknown-flag", (*BASE, "--no-such-flag"), False, "parse",
                   "unrecognized arguments: --no-such-flag", why="argparse"))
    suite.add(Case("control/malformed-json", _spec(BASE, '{"method": "ngram", k: 3'), False,
                   "parse", "--speculative-config", why="--speculative-config is json.loads"))
    suite.add(Case("control/bad-method", _spec(BASE, {**_NGRAM, "method": "no_such_method"}),
                   False, "speculative", "no_such_method", why="the method Literal"))
    suite.add(Case("control/k-zero", _spec(BASE, {**_NGRAM, "num_speculative_tokens": 0}),
                   False, "speculative", "num_speculative_tokens", why="k > 0"))
    unknown = facts.UNKNOWN_KEYS.at(v)
    assert unknown is not None
    argv = _spec(BASE, {**_NGRAM, "no_such_key": 1})
    if unknown.value == "reject" and unknown.error:
        error = unknown.error.format(key="no_such_key", value=1, type="int")
        suite.add(Case("control/unknown-key", argv, False, "speculative", core_error(error),
                       why=unknown.source))
    else:
        suite.add(Case("control/unknown-key", argv, True, spec=(("method", "ngram"),),
                       why=unknown.source))
    _method_controls(suite)
    _arch_probes(suite, cat)


def full_suite(version: str, cat: Catalog | None = None) -> Suite:
    cat = cat or load_catalog()
    suite = rendered_cases(version, cat)
    add_controls(suite, cat)
    return suite


def checker_input(version: str, suite: Suite | None = None) -> dict[str, Any]:
    cat = load_catalog()
    suite = suite or full_suite(version, cat)
    models = configs(cat)
    for arch, (repo, _, _) in arch_targets(cat).items():
        models[HEAD_PREFIX + arch] = generic_head(models[repo])
    return {"version": version, "models": models,
            "cases": [{"id": c.id, "argv": list(c.argv)} for c in suite.cases],
            "architectures": sorted(arch_targets(cat))}
