"""Emulator calibration: published device decode rates vs the emulator's timing model.

Not a test: it prints figures (``tests/unit/test_calibration.py`` holds each within 15%).
Run: ``python3 benchmarks/calibration.py [--sources]``.

For every figure of `specdec.emulator.calibration.FIGURES` (device, power mode, engine, weights,
published batch-1 decode tok/s): the emulator's rate for the same device, mode and weights, the
error, and the catalog bandwidth and efficiency it used. Rows whose mode is inferred also show
the device's top mode, so the effect of the inference is visible.
"""

from __future__ import annotations

import argparse
import dataclasses

from specdec.catalog import load_catalog
from specdec.emulator.calibration import FIGURES, REFERENCE_ENGINES, TOLERANCE, emulated_tok_s
from specdec.power import PREFERRED


def _top_mode(device: str) -> str | None:
    modes = load_catalog().devices[device].power_modes
    return next((m for m in PREFERRED if m in modes), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", action="store_true", help="print each figure's source")
    a = ap.parse_args()
    cat = load_catalog()
    print(f"{'device':14} {'mode':11} {'engine':6} {'model':44} {'precision':19} "
          f"{'GB/s':>6} {'eff':>5} {'cited':>7} {'emulator':>8} {'error':>7}")
    worst = 0.0
    for i, f in enumerate(FIGURES, 1):
        dev = cat.devices[f.device]
        bw = dev.mode_bandwidth_gbs(f.power_mode) or dev.bandwidth_gbs
        ref = REFERENCE_ENGINES.get(f.engine)
        eff = ref.bw_eff if ref else dev.bandwidth_efficiency.get(f.engine, 0.0)
        got = emulated_tok_s(f)
        err = got / f.tok_s - 1
        worst = max(worst, abs(err))
        mode = f.power_mode or "-"
        mark = "*" if f.mode_basis.startswith(("assumed", "inferred")) else ""
        print(f"{f.device:14} {mode + mark:11} {f.engine:6} {f.model[:44]:44} "
              f"{f.precision[:19]:19} {bw:6.1f} {eff:5.2f} {f.tok_s:7.2f} {got:8.2f} "
              f"{err:+7.1%}")
        if f.mode_basis.startswith("inferred"):
            top = _top_mode(f.device)
            if top and top != f.power_mode:
                alt = emulated_tok_s(dataclasses.replace(f, power_mode=top))
                print(f"{'':14} {top:11} (the same figure at the top mode: {alt:.2f} tok/s, "
                      f"{alt / f.tok_s - 1:+.1%})")
        if a.sources:
            print(f"{'':14} [{i}] {f.source}; mode {f.mode_basis}")
    print(f"\n{len(FIGURES)} figures, worst error {worst:.1%} (tolerance {TOLERANCE:.0%}); "
          "* = power mode not published (assumed or inferred, see --sources)")
    for name, ref in REFERENCE_ENGINES.items():
        print(f"reference engine {name}: efficiency {ref.bw_eff} ({ref.basis})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
