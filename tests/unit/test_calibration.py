"""The emulator against published device figures (specdec_lab/emulator/calibration.py): the fit set
sets each device class's efficiency, the held-out set is predicted within the tolerance."""

from __future__ import annotations

import dataclasses

import pytest

from specdec.catalog import load_catalog
from specdec_lab.emulator.calibration import (
    FIGURES,
    REFERENCE_ENGINES,
    SPEC_FIGURES,
    TOLERANCE,
    Figure,
    device_class,
    emulated_speculation,
    emulated_tok_s,
    fitted_efficiencies,
)

HELD_OUT = [f for f in FIGURES if f.role == "held-out"]


@pytest.mark.parametrize("fig", HELD_OUT, ids=lambda f: f"{f.device}-{f.model}-{f.tok_s}")
def test_the_emulator_predicts_every_held_out_figure(fig: Figure) -> None:
    got = emulated_tok_s(fig)
    assert abs(got / fig.tok_s - 1) <= TOLERANCE, (
        f"{fig.device} {fig.power_mode} {fig.model} {fig.precision}: emulator {got:.2f} tok/s "
        f"vs {fig.tok_s} cited ({fig.source})")


def test_the_catalog_holds_the_fit_and_the_split_is_real() -> None:
    fitted = fitted_efficiencies()
    cat = load_catalog()
    for dev in cat.devices.values():
        for engine, eff in dev.bandwidth_efficiency.items():
            key = (device_class(dev.id), "vllm" if engine == "dynamo" else engine)
            assert eff == fitted[key], (dev.id, engine, eff, fitted[key])
    # every held-out row belongs to a class the fit set sets, and no row is both
    classes = {(device_class(f.device) if f.engine not in REFERENCE_ENGINES else f.device,
                f.engine) for f in FIGURES if f.role == "fit"}
    assert HELD_OUT and all(
        (device_class(f.device) if f.engine not in REFERENCE_ENGINES else f.device, f.engine)
        in classes for f in HELD_OUT)
    assert {f.role for f in FIGURES} == {"fit", "held-out"}


def test_power_modes_are_what_the_sources_procedure_sets() -> None:
    for f in FIGURES:
        assert f.mode_basis.split(":")[0] in ("published", "procedure"), f
        if f.device.startswith("orin-nx"):  # nvpmodel -m 0 on the NX super conf
            assert f.power_mode == "MAXN_SUPER"
        if f.device.startswith("agx-orin"):
            assert f.power_mode == "MAXN"


def test_bandwidth_follows_the_power_mode() -> None:
    # The same weights on the same Nano: the Super mode (102.4 GB/s) vs 15W (68.3 GB/s).
    nano15 = next(f for f in FIGURES if f.device == "orin-nano-8gb" and f.power_mode == "15W")
    super_ = emulated_tok_s(dataclasses.replace(nano15, power_mode="MAXN_SUPER"))
    assert super_ / emulated_tok_s(nano15) > 1.3


def test_a_wrong_efficiency_would_fail_the_held_out_rows() -> None:
    agx = next(f for f in HELD_OUT if f.device == "agx-orin-64gb")
    cat = load_catalog()
    dev = cat.devices[agx.device]
    wrong = {"vllm": dev.bandwidth_efficiency["vllm"] * 0.8}  # 20% off the fit
    cat.devices[agx.device] = dataclasses.replace(dev, bandwidth_efficiency=wrong)
    try:
        assert any(abs(emulated_tok_s(f) / f.tok_s - 1) > TOLERANCE
                   for f in HELD_OUT if f.device == agx.device)
    finally:
        cat.devices[agx.device] = dev


@pytest.mark.parametrize("fig", SPEC_FIGURES, ids=lambda f: f"k{f.k}-{f.metric}-{f.role}")
def test_speculation_acceptance_and_speedup_within_tolerance(fig) -> None:  # type: ignore[no-untyped-def]
    al, speedup = emulated_speculation(fig, requests=12)
    if fig.acceptance_length is not None:
        assert abs(al / fig.acceptance_length - 1) <= TOLERANCE, (fig, al)
    assert abs(speedup / fig.speedup - 1) <= TOLERANCE, (fig, speedup)
