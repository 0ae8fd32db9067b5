"""Judge one release's checker output: every case as expected, and the fact tables in
`specdec.engines.vllm.facts` (and the emulator's finished reasons) equal to what the release itself
has. Each problem is one line."""

from __future__ import annotations

from typing import Any

from specdec.catalog import Catalog, load_catalog
from specdec.engines.registry import support
from specdec.engines.support import Target
from specdec.engines.version import Version
from specdec.engines.vllm import facts
from specdec_lab.contract.cases import Case, Suite
from specdec_lab.contract.controls import ARCH_PREFIX, arch_targets
from specdec_lab.emulator.metrics import FINISH_REASONS

__all__ = ["STAGES", "case_problems", "fact_problems", "judge"]

# Every stage of vllm_check.check_case: an accepted case must have run them all.
STAGES = ["parse", "validate", "engine_args", "model_config", "speculative"]


def _short(text: str, n: int = 300) -> str:
    return " ".join(str(text).split())[:n]


def case_problem(case: Case, r: dict[str, Any] | None) -> str | None:
    if r is None:
        return f"{case.id}: no result from the checker"
    if r.get("stage") == "checker":
        return f"{case.id}: checker error {_short(r.get('error', ''))} {r.get('trace', '')}"
    if case.expect_ok:
        if not r["ok"]:
            return (f"{case.id}: refused at {r.get('stage')}: {_short(r.get('error', ''))} "
                    f"[argv: {' '.join(case.argv)}]")
        if r.get("stages") != STAGES:
            return f"{case.id}: accepted after only {r.get('stages')} (incomplete)"
        spec = r.get("spec") or {}
        wrong = [f"{k}={spec.get(k)!r} (planned {v!r})" for k, v in case.spec
                 if spec.get(k) != v]
        if wrong:
            return f"{case.id}: accepted but resolved {', '.join(wrong)}"
        return None
    if r["ok"]:
        return f"{case.id}: accepted, expected a refusal ({case.why}) [argv: {' '.join(case.argv)}]"
    if case.stage is not None and r.get("stage") != case.stage:
        return (f"{case.id}: refused at {r.get('stage')}, expected at {case.stage}: "
                f"{_short(r.get('error', ''))}")
    if case.error is not None and case.error not in r.get("error", ""):
        return (f"{case.id}: refused with {_short(r.get('error', ''), 600)!r}; expected it to "
                f"contain {case.error!r} ({case.why})")
    return None


def case_problems(suite: Suite, out: dict[str, Any]) -> list[str]:
    results = {r["id"]: r for r in out.get("results", [])}
    problems = []
    for case in suite.cases:
        if case.id.startswith(ARCH_PREFIX):
            continue  # judged with the architecture's interface in arch_problems
        p = case_problem(case, results.get(case.id))
        if p:
            problems.append(p)
    return problems


def arch_problems(suite: Suite, out: dict[str, Any], cat: Catalog) -> list[str]:
    """Per architecture: the release's model-type gate (the probe case), its model-runner gate
    (does the class implement the EAGLE-3 interface) and `support()` agree."""
    v = Version.parse(suite.version)
    vf = facts.vllm_facts(v)
    results = {r["id"]: r for r in out.get("results", [])}
    interfaces = out.get("eagle3_interface", {})
    problems = []
    for arch, (repo, model_type, _) in arch_targets(cat).items():
        case = next(c for c in suite.cases if c.id == ARCH_PREFIX + arch)
        r = results.get(case.id)
        iface = interfaces.get(arch, {})
        sup = support("vllm", v, "eagle3", Target(repo, arch, model_type)).ok
        if not iface.get("registered"):
            if sup:
                problems.append(f"{case.id}: vLLM {v} has no model class for {arch}, but "
                                "support() says eagle3 runs")
            continue
        p = case_problem(case, r)
        if p:
            problems.append(p)
        table = arch in vf.eagle3_architectures()
        if bool(iface.get("eagle3")) != table:
            has = "implements" if iface.get("eagle3") else "lacks"
            problems.append(f"{case.id}: the model class {has} the EAGLE-3 interface "
                            f"({iface.get('via')}), EAGLE3_ARCHITECTURES says "
                            f"{'yes' if table else 'no'} {iface.get('error', '')}".rstrip())
        real = bool(r and r["ok"]) and bool(iface.get("eagle3"))
        if real != sup:
            problems.append(f"{case.id}: eagle3 on {arch} {'builds' if real else 'does not'} in "
                            f"vLLM {v}, support() says {'yes' if sup else 'no'}")
    return problems


def _differ(what: str, release: Any, table: Any, name: str) -> str | None:
    have, want = set(release), set(table)
    if have == want:
        return None
    return (f"{what}: the release has {sorted(have - want)} that {name} lacks, {name} has "
            f"{sorted(want - have)} that the release lacks")


def _reasons(v: Version) -> tuple[str, ...]:
    fact = FINISH_REASONS.at(v)
    return fact.value if fact else ()


def fact_problems(version: str, out: dict[str, Any]) -> list[str]:
    v = Version.parse(version)
    got = out.get("facts", {})
    problems = [p for p in (
        _differ("SpeculativeConfig fields", got.get("spec_fields", []), facts.spec_keys(v),
                "spec_keys()"),
        _differ("method Literal", got.get("method_literal", []), facts.method_literal(v),
                "method_literal()"),
        _differ("FinishReason", got.get("finish_reasons", []), _reasons(v), "FINISH_REASONS"),
    ) if p]
    unknown = facts.UNKNOWN_KEYS.at(v)
    forbid = got.get("extra") == "forbid"
    if unknown is None or forbid != (unknown.value == "reject"):
        problems.append(f"SpeculativeConfig extra={got.get('extra')!r}, UNKNOWN_KEYS says "
                        f"{unknown.value if unknown else None!r}")
    if str(out.get("version", "")).split("+")[0] != version:
        problems.append(f"the environment runs vLLM {out.get('version')}, not {version}")
    return problems


def judge(suite: Suite, out: dict[str, Any], cat: Catalog | None = None) -> list[str]:
    cat = cat or load_catalog()
    return [*suite.problems, *fact_problems(suite.version, out), *case_problems(suite, out),
            *arch_problems(suite, out, cat)]
