"""What specdec renders for each pinned vLLM release, as ``vllm serve`` argv lists to check.

* every golden case (``tests/golden/*/``) whose plan runs that release: its unit's ExecStart;
* every vLLM host of every example inventory, planned offline as the inventory says and again
  pinned to each release (the planner chooses per release: what it renders for release X must
  pass release X);
* a method matrix: each target those use x each method the catalog has for it (EAGLE-3 head,
  draft model, n-gram), pinned. Where `specdec.engines.support` says the release can, the
  planner must render it and the release accept it; where it says no, the planner must refuse
  and the release must refuse the same config rendered for it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from specdec.catalog import Catalog, Image, load_catalog
from specdec.config.inventory import load_inventory
from specdec.engines.registry import ENGINES, support
from specdec.engines.support import Target
from specdec.engines.version import Version
from specdec.errors import PlanError
from specdec.plan.planner import make_plan
from specdec.plan.types import Plan
from specdec.render.files import render

__all__ = ["Case", "Suite", "exec_words", "pinned_versions", "rendered_cases", "unit_argv"]

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
INVENTORIES = ("inventories/jetsons.py", "inventories/spark.py", "inventories/lab.py")
MATRIX_DEVICE = "dgx-spark"
MATRIX_METHODS = ("eagle3", "draft_model", "ngram")


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect_ok: bool
    stage: str | None = None  # a refusal: the checker stage that must refuse (None: any)
    error: str | None = None  # a refusal: text the release's error must contain
    spec: tuple[tuple[str, Any], ...] = ()  # accepted: SpeculativeConfig values it must resolve
    why: str = ""


@dataclass
class Suite:
    """The cases of one release, and what went wrong building them (planner disagreements)."""

    version: str
    cases: list[Case] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def add(self, case: Case) -> None:
        if any(c.id == case.id for c in self.cases):
            raise ValueError(f"duplicate contract case id {case.id}")
        self.cases.append(case)


def pinned_versions(engine: str, cat: Catalog | None = None) -> list[str]:
    """Every release of ``engine`` some catalog image carries, oldest first."""
    cat = cat or load_catalog()
    found = {i.engine_version for i in cat.images.values() if i.engine == engine}
    return [str(v) for v in sorted(found)]


def image_of(cat: Catalog, engine: str, version: str) -> Image:
    imgs = [i for i in cat.images.values()
            if i.engine == engine and str(i.engine_version) == version]
    if not imgs:
        raise ValueError(f"no catalog image carries {engine} {version}")
    return max(imgs, key=lambda i: i.channel == "ga")


def exec_words(line: str) -> list[str]:
    """An ``ExecStart=`` value split as systemd does for what `specdec.render.files.systemd_quote`
    writes: whitespace-separated words, single or double quotes with backslash escapes, ``%%``
    and ``$$`` for ``%`` and ``$``."""
    words: list[str] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        chars: list[str] = []
        if line[i] in "'\"":
            quote, i = line[i], i + 1
            while i < n and line[i] != quote:
                if line[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(line[i])
                i += 1
            if i >= n:
                raise ValueError(f"unterminated quote in ExecStart: {line[:80]}")
            i += 1
        else:
            while i < n and not line[i].isspace():
                chars.append(line[i])
                i += 1
        words.append("".join(chars).replace("%%", "%").replace("$$", "$"))
    return words


def unit_argv(unit: str) -> list[str]:
    """The engine's command line in a rendered unit: ``vllm serve …`` or ``trtllm-serve …``
    (the docker wrapper and the binary's directory dropped)."""
    line = next((x for x in unit.splitlines() if x.startswith("ExecStart=")), None)
    if line is None:
        raise ValueError("unit has no ExecStart=")
    words = exec_words(line[len("ExecStart="):])
    for i, w in enumerate(words):
        name = w.rsplit("/", 1)[-1]
        if name == "vllm" and words[i + 1:i + 2] == ["serve"]:
            return ["vllm", *words[i + 1:]]
        if name == "trtllm-serve":
            return ["trtllm-serve", *words[i + 1:]]
    raise ValueError(f"no engine command in ExecStart: {line[:120]}")


def rendered_argv(plan: Plan) -> list[str]:
    return unit_argv(render(plan).unit.content)


def expected_spec(plan: Plan) -> tuple[tuple[str, Any], ...]:
    if not plan.speculative:
        return ()
    out: list[tuple[str, Any]] = [("method", plan.method),
                                  ("num_speculative_tokens", plan.num_speculative_tokens)]
    if plan.draft:
        out.append(("model", plan.draft))
    return tuple(out)


def golden_plans(engine: str) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for d in sorted(GOLDEN.iterdir()):
        plan_file = d / "plan.json"
        if plan_file.is_file():
            plan = json.loads(plan_file.read_text())
            if plan["engine"] == engine:
                out.append((d, plan))
    return out


@cache
def example_hosts() -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """(inventory, host, data) of every example inventory (the lab's: every row of its table)."""
    saved = {k: os.environ.get(k) for k in ("SPECDEC_LAB_HOSTS", "SPECDEC_LAB_FAULTS")}
    os.environ["SPECDEC_LAB_HOSTS"] = "8"
    os.environ.pop("SPECDEC_LAB_FAULTS", None)
    try:
        out = []
        for inv in INVENTORIES:
            for name, data in load_inventory(str(REPO / inv)):
                out.append((Path(inv).name, name, data))
        return tuple(out)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pinned(data: dict[str, Any], cat: Catalog, version: str) -> dict[str, Any]:
    data = dict(data)
    if data.get("specdec_runtime", "docker") == "docker":
        data["specdec_image"] = image_of(cat, "vllm", version).ref
    else:
        data["specdec_engine_version"] = version
    return data


def _target(cat: Catalog, model: str) -> Target:
    m = cat.models[model]
    return Target(m.id, m.architecture, m.model_type)


def _accepted(case_id: str, plan: Plan, why: str) -> Case:
    return Case(case_id, tuple(rendered_argv(plan)), True, spec=expected_spec(plan), why=why)


def _refusal(suite: Suite, cat: Catalog, case_id: str, data: dict[str, Any], why: str) -> None:
    """The planner refused ``data`` at the suite's release: the release must refuse the same
    configuration, rendered from a plan at another pinned release that can run it."""
    for other in pinned_versions("vllm", cat):
        try:
            plan = make_plan("contract", _pinned(data, cat, other), None)
        except PlanError:
            continue
        plan = dataclasses.replace(plan, engine_version=suite.version)
        suite.add(Case(case_id, tuple(rendered_argv(plan)), False, stage="speculative",
                       why=why))
        return
    suite.problems.append(f"{case_id}: no pinned release can plan it, nothing to check")


def add_goldens(suite: Suite) -> None:
    for d, plan in golden_plans("vllm"):
        if plan["engine_version"] != suite.version:
            continue
        argv = unit_argv((d / "specdec-engine.service").read_text())
        spec: tuple[tuple[str, Any], ...] = ()
        if plan["speculative"]:
            spec = (("method", plan["method"]),
                    ("num_speculative_tokens", plan["num_speculative_tokens"]))
            spec += (("model", plan["draft"]),) if plan["draft"] else ()
        suite.add(Case(f"golden/{d.name}", tuple(argv), True, spec=spec, why="golden case"))


def add_examples(suite: Suite, cat: Catalog) -> None:
    for inv, name, data in example_hosts():
        if data.get("specdec_engine", "vllm") != "vllm":
            continue
        own = make_plan(name, data, None)
        own_argv: tuple[str, ...] = ()
        if own.engine_version == suite.version:
            case = _accepted(f"{inv}/{name}", own, "example host as planned")
            own_argv = case.argv
            suite.add(case)
        pinned = _pinned(data, cat, suite.version)
        case_id = f"{inv}/{name}@{suite.version}"
        try:
            plan = make_plan(name, pinned, None)
        except PlanError as exc:
            method = data.get("specdec_method")
            v = Version.parse(suite.version)
            if method and not support("vllm", v, method, _target(cat, own.model)).ok:
                _refusal(suite, cat, case_id, pinned, f"planner refuses: {exc}")
            else:
                suite.problems.append(f"{case_id}: the planner cannot plan it: {exc}")
            continue
        case = _accepted(case_id, plan, f"example host pinned to vLLM {suite.version}")
        if case.argv != own_argv:  # the host's own plan at this release said it already
            suite.add(case)


def matrix_targets(cat: Catalog) -> list[str]:
    """Every target model the vLLM goldens and example hosts run."""
    found = {plan["model"] for _, plan in golden_plans("vllm")}
    for _, name, data in example_hosts():
        if data.get("specdec_engine", "vllm") == "vllm":
            found.add(make_plan(name, data, None).model)
    return sorted(m for m in found if m in cat.models)


def add_matrix(suite: Suite, cat: Catalog) -> None:
    v = Version.parse(suite.version)
    for model in matrix_targets(cat):
        m = cat.models[model]
        pairs: list[tuple[str, str | None]] = []
        for x in MATRIX_METHODS:
            if x == "eagle3":  # every head the model takes: each checkpoint format
                pairs += [(x, h.id) for h in cat.heads_for(m, x)]
            elif x != "draft_model" or m.drafts:
                pairs.append((x, None))
        for method, head in pairs:
            case_id = f"matrix/{model}/{method}{'/' + head if head else ''}@{suite.version}"
            data = _pinned({"specdec_device": MATRIX_DEVICE, "specdec_model": model,
                            "specdec_method": method}, cat, suite.version)
            sup = support("vllm", v, method, _target(cat, model))
            if head is not None:
                data["specdec_draft"] = head
                fmt = ENGINES["vllm"].head_support(v, cat.heads[head].format)
                sup = sup if not sup.ok or fmt.ok else fmt
            try:
                plan = make_plan("contract", data, None)
            except PlanError as exc:
                if sup.ok:
                    suite.problems.append(f"{case_id}: support() says yes, planner: {exc}")
                else:
                    _refusal(suite, cat, case_id, data, f"support(): {sup.reason}")
                continue
            if not sup.ok:
                suite.problems.append(f"{case_id}: support() says no ({sup.reason}) but the "
                                      "planner rendered it")
            suite.add(_accepted(case_id, plan, f"support(): yes [{sup.source}]"))


def rendered_cases(version: str, cat: Catalog | None = None) -> Suite:
    cat = cat or load_catalog()
    suite = Suite(version)
    add_goldens(suite)
    add_examples(suite, cat)
    add_matrix(suite, cat)
    return suite
