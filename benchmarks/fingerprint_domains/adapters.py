"""Everything the fingerprint needs beyond the project's stable public entry points, in one place:
private names, and public ones the refactor under way moves (Dynamo groups and units).

After a refactor that moves one of these, adjust it here (and say so when comparing digests).
Every other module calls only public names: `specdec.plan.planner.make_plan` / `baseline` /
`speculating`, `specdec.render.files.render` / `engine_argv` / `speculative_config`,
`specdec.tune.cache.apply_cached` / `store`, `specdec.cli.main`, the on-host bench core
(`specdec.bench.onhost.cli.parse_args`, `run.run_bench`), `specdec.bench.client.run_bench_async`,
`specdec_lab.emulator.setup.setup_for`, `specdec_lab.emulator.core.EngineCore` / `simulate`,
`python3 -m specdec_lab.emulator`, `specdec.gate.decide.decide` (and `benchmarks/gateloop.abab`),
`specdec.tune.search.Search`,
`specdec.report.fleet.summary_markdown` / `index_html`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The environment `inventories/lab.py` reads: a lab instance that is never up (no state file
# pins image digests), every table row, the Dynamo group, no faults, no token.
LAB_ENV = {"SPECDEC_LAB_INSTANCE": "fprint", "SPECDEC_LAB_HOSTS": "8", "SPECDEC_LAB_DYNAMO": "1"}
LAB_ENV_UNSET = ("SPECDEC_LAB_TIME_SCALE", "SPECDEC_LAB_FAULTS", "HF_TOKEN")


@contextmanager
def lab_inventory_pinned(env: dict[str, str]) -> Iterator[None]:
    """`inventories/lab.py` as on a machine where the lab was never built: the lab's image
    mirrors carry no ``@sha256:`` digest (private: `specdec_lab.images.digests_file`, the
    cache of pushed digests, is pointed at a file that does not exist)."""
    # `load_inventory` loads in this process once pyinfra_cli is imported: the patched
    # digests_file below then applies to the inventory too
    import pyinfra_cli.inventory  # noqa: F401

    import specdec_lab.images as images

    saved_env = {k: os.environ.get(k) for k in (*env, *LAB_ENV_UNSET)}
    saved = images.digests_file
    for k in LAB_ENV_UNSET:
        os.environ.pop(k, None)
    os.environ.update(env)
    images.digests_file = lambda: Path("/nonexistent/specdec-fingerprint/images.json")
    try:
        yield
    finally:
        images.digests_file = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def engine_step_fields(result: Any) -> dict[str, Any]:
    """One `specdec_lab.emulator.core.StepResult` as data (all its fields: a dataclass today)."""
    import dataclasses

    return dataclasses.asdict(result)


# -- Dynamo serving groups: moved by the refactor under way (both layouts below) -------------
def dynamo_groups(hosts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The serving groups of a generated inventory. Baseline: `specdec.dynamo.group.groups_of`
    over ``(name, data)``; now: `specdec.plan.groups.groups_of` over parsed host settings."""
    try:
        from specdec.dynamo.group import groups_of
    except ImportError:
        from specdec.plan.groups import groups_of
        from specdec.plan.hostdata import parse_host_settings

        return groups_of([parse_host_settings(n, d) for n, d in hosts])
    return groups_of(hosts)


def check_group_plans(plans: list[Any]) -> None:
    """The members of a group plan the same model and speculation (else `ConfigError`)."""
    try:
        from specdec.dynamo.group import check_plans
    except ImportError:
        from specdec.plan.groups import check_plans
    check_plans(plans)


def aux_units(plan: Any) -> list[tuple[str, str]]:
    """The frontend member's etcd and frontend units (``(file name, content)``)."""
    try:
        from specdec.dynamo.render import aux_units as units
    except ImportError:
        from specdec.engines.dynamo.units import aux_units as units
    return units(plan)
