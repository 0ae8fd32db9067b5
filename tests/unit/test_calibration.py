"""The emulator against published device decode rates (specdec/emulator/calibration.py)."""

from __future__ import annotations

import dataclasses

import pytest

from specdec.catalog import load_catalog
from specdec.emulator.calibration import FIGURES, TOLERANCE, Figure, emulated_tok_s


@pytest.mark.parametrize("fig", FIGURES, ids=lambda f: f"{f.device}-{f.power_mode}-{f.tok_s}")
def test_emulator_within_tolerance_of_every_cited_figure(fig: Figure) -> None:
    got = emulated_tok_s(fig)
    assert abs(got / fig.tok_s - 1) <= TOLERANCE, (
        f"{fig.device} {fig.power_mode} {fig.model} {fig.precision}: emulator {got:.2f} tok/s "
        f"vs {fig.tok_s} cited ({fig.source})")


def test_every_device_family_has_a_cited_figure_with_its_source() -> None:
    families = {load_catalog().devices[f.device].family for f in FIGURES}
    assert families == {"orin-nano", "orin-nx", "agx-orin", "dgx-spark"}
    for f in FIGURES:
        assert f.source and f.mode_basis.split(":")[0] in ("published", "assumed", "inferred")


def test_bandwidth_follows_the_power_mode() -> None:
    # The same weights on the same Nano: the Super mode (102.4 GB/s) vs 15W (68.3 GB/s).
    nano15 = next(f for f in FIGURES if f.device == "orin-nano-8gb" and f.power_mode == "15W")
    super_ = emulated_tok_s(dataclasses.replace(nano15, power_mode="MAXN_SUPER"))
    assert super_ / emulated_tok_s(nano15) > 1.3


def test_a_wrong_efficiency_would_fail() -> None:
    # The tolerance is tight enough to catch a 20% error in the engine's efficiency.
    agx = FIGURES[0]
    cat = load_catalog()
    dev = cat.devices[agx.device]
    wrong = dataclasses.replace(dev, bandwidth_efficiency={"vllm": 0.72 * 1.2})
    cat.devices[agx.device] = wrong
    try:
        assert any(abs(emulated_tok_s(f) / f.tok_s - 1) > TOLERANCE
                   for f in FIGURES if f.device == agx.device)
    finally:
        cat.devices[agx.device] = dev
