"""Contract tests against the real vLLM releases the catalog pins (`specdec_lab.contract`).

Each release is installed from PyPI into its own environment under /var/cache/specdec-contract
(minutes the first time, reused after) and judges, with its own CLI parser, EngineArgs,
ModelConfig and SpeculativeConfig, every ``vllm serve`` argv specdec renders for it (golden
cases, example inventories, the method matrix), the controls it must refuse, and the fact tables
in `specdec.engines.vllm.facts`.
"""

from __future__ import annotations

from functools import cache

import pytest

from specdec_lab.contract.cases import example_hosts, golden_plans, pinned_versions
from specdec_lab.contract.controls import ARCH_PREFIX, full_suite
from specdec_lab.contract.run import Report, run_vllm

pytestmark = pytest.mark.contract

VERSIONS = pinned_versions("vllm")


@cache
def report(version: str) -> Report:
    return run_vllm(version)


def _problems(r: Report, prefixes: tuple[str, ...], negate: bool = False) -> list[str]:
    return [p for p in r.problems if p.startswith(prefixes) != negate]


RENDERED = ("golden/", "matrix/", "jetsons.py/", "spark.py/", "lab.py/")


def test_every_catalog_release_is_checked() -> None:
    assert VERSIONS == ["0.9.2", "0.11.0", "0.14.0", "0.19.0", "0.31.0", "0.32.0", "0.33.0"]


def test_every_vllm_golden_runs_a_checked_release() -> None:
    goldens = golden_plans("vllm")
    assert len(goldens) >= 5
    for d, plan in goldens:
        assert plan["engine_version"] in VERSIONS, f"{d.name}: vLLM {plan['engine_version']}"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_example_host_is_checked_at_every_release(version: str) -> None:
    """Each host as planned (at its own release) or pinned to this one: the pinned plan is
    left out only when it renders the same argv as the host's own plan at this release."""
    ids = {c.id for c in full_suite(version).cases}
    hosts = [f"{inv}/{name}" for inv, name, data in example_hosts()
             if data.get("specdec_engine", "vllm") == "vllm"]
    assert len(hosts) >= 9
    for host in hosts:
        assert f"{host}@{version}" in ids or host in ids, f"{host}: not checked at {version}"


@pytest.mark.parametrize("version", VERSIONS)
def test_release_accepts_what_specdec_renders(version: str) -> None:
    r = report(version)
    rendered = [c for c in r.suite.cases if c.id.startswith(RENDERED)]
    assert sum(c.expect_ok for c in rendered) >= 10
    problems = [*r.suite.problems, *_problems(r, RENDERED)]
    assert not problems, f"vLLM {version}:\n" + "\n".join(problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_release_refuses_the_controls(version: str) -> None:
    r = report(version)
    controls = [c for c in r.suite.cases if c.id.startswith("control/")]
    assert sum(not c.expect_ok for c in controls) >= 4
    problems = _problems(r, ("control/",))
    assert not problems, f"vLLM {version}:\n" + "\n".join(problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_fact_tables_match_the_release(version: str) -> None:
    r = report(version)
    facts = r.output["facts"]
    assert facts["spec_fields"] and facts["method_literal"]
    assert any(c.id.startswith(ARCH_PREFIX) for c in r.suite.cases)
    problems = _problems(r, (*RENDERED, "control/"), negate=True)
    problems = [p for p in problems if p not in r.suite.problems]
    assert not problems, f"vLLM {version}:\n" + "\n".join(problems)
