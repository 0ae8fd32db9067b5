"""specdec.plan.memory: memory budget and vLLM-worded failures."""

from __future__ import annotations

import pytest

from specdec.catalog import GIB, Device, load_catalog
from specdec.plan.memory import OVERHEAD_FIXED_GIB, OVERHEAD_WEIGHT_FRACTION, fit, fit_problem


def dev(name: str) -> Device:
    return load_catalog().device(name)


def test_budget_arithmetic() -> None:
    r = fit(dev("agx-orin-64gb"), 14.96, 131072, 0.79, 4096, 0.65, 8192)
    assert r.device_gib == 61.44  # MemTotal of a 64 GB AGX Orin: what the engine sees
    assert r.usable_gib == pytest.approx(61.44 * 0.65)
    overhead = OVERHEAD_FIXED_GIB + OVERHEAD_WEIGHT_FRACTION * (14.96 + 0.79)
    assert r.overhead_gib == pytest.approx(overhead, abs=1e-3)
    assert r.kv_gib == pytest.approx(61.44 * 0.65 - 14.96 - 0.79 - overhead, abs=1e-3)
    assert r.kv_needed_gib == pytest.approx(8192 * (131072 + 4096) / GIB, abs=1e-3)
    assert r.fits
    assert r.max_concurrency == pytest.approx(r.kv_gib / r.kv_needed_gib, rel=1e-2)
    assert fit_problem(r, 0.65, 8192) is None


def test_weights_exceed() -> None:
    r = fit(dev("orin-nano-8gb"), 14.96, 131072, 2.30, 32768, 0.45, 4096)
    assert not r.fits
    msg = fit_problem(r, 0.45, 4096)
    assert msg is not None
    assert msg.startswith("model weights 14.96 GiB + draft 2.30 GiB + overhead")
    assert "exceed 7.44 GiB x 0.45 = 3.35 GiB" in msg


def test_kv_does_not_fit() -> None:
    r = fit(dev("orin-nano-8gb"), 2.30, 32768, 0.0, 0, 0.45, 131072)
    msg = fit_problem(r, 0.45, 131072)
    assert msg is not None
    assert msg.startswith(
        "To serve at least one request with max_model_len (131072), 4.00 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (0.51 GiB)"
    )
    assert "estimated maximum model length is 16711" in msg


def test_os_reserve() -> None:
    r = fit(dev("orin-nano-4gb"), 1.12, 114688, 0.0, 0, 0.9, 512)
    msg = fit_problem(r, 0.9, 512)
    assert msg is not None and "leaves 0.34 GiB of 3.44 GiB" in msg


def test_more_utilization_more_kv() -> None:
    lo = fit(dev("dgx-spark"), 39.5, 327680, 5.66, 131072, 0.6, 16384)
    hi = fit(dev("dgx-spark"), 39.5, 327680, 5.66, 131072, 0.7, 16384)
    assert hi.kv_gib > lo.kv_gib and hi.kv_needed_gib == lo.kv_needed_gib
