"""Emulator calibration: published device figures vs the emulator, the fit set and the held-out
set apart, and the speculative-decoding rows.

Not a test: it prints figures (``tests/unit/test_calibration.py`` holds the held-out rows and
the speculative rows within 15%). Run: ``python3 benchmarks/calibration.py [--sources]``.

For every figure of `specdec_lab.emulator.calibration.FIGURES` (device, power mode, engine,
weights, published batch-1 decode tok/s): the emulator's rate for the same device, mode and
weights, the error, and the catalog bandwidth and efficiency it used; fit rows first (they set
the efficiency, `fitted_efficiencies`), then the held-out rows (predicted). Then
`SPEC_FIGURES`: acceptance length and speed-up from speculation, published vs emulated.
"""

from __future__ import annotations

import argparse

from specdec.catalog import load_catalog
from specdec_lab.emulator.calibration import (
    FIGURES,
    REFERENCE_ENGINES,
    SPEC_FIGURES,
    TOLERANCE,
    Figure,
    class_of,
    emulated_speculation,
    emulated_tok_s,
    fitted_efficiencies,
)


def _rows(figs: list[Figure], fitted: dict[tuple[str, str], float], sources: bool) -> float:
    cat = load_catalog()
    worst = 0.0
    for f in figs:
        dev = cat.devices[f.device]
        bw = dev.mode_bandwidth_gbs(f.power_mode) or dev.bandwidth_gbs
        eff = (fitted[(class_of(f), f.engine)] if f.engine in REFERENCE_ENGINES
               else dev.bandwidth_efficiency.get(f.engine, 0.0))
        got = emulated_tok_s(f)
        err = got / f.tok_s - 1
        worst = max(worst, abs(err))
        print(f"{f.device:14} {f.power_mode or '-':11} {f.engine:6} {f.model[:44]:44} "
              f"{f.precision[:19]:19} {bw:6.1f} {eff:5.2f} {f.tok_s:7.2f} {got:8.2f} "
              f"{err:+7.1%}")
        if sources:
            print(f"{'':14} {f.source}; mode {f.mode_basis}")
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sources", action="store_true", help="print each figure's source")
    a = ap.parse_args()
    fitted = fitted_efficiencies()
    head = (f"{'device':14} {'mode':11} {'engine':6} {'model':44} {'precision':19} "
            f"{'GB/s':>6} {'eff':>5} {'cited':>7} {'emulator':>8} {'error':>7}")
    print("fit set (sets each device class's efficiency: the geometric mean of its rows')")
    print(head)
    fit_worst = _rows([f for f in FIGURES if f.role == "fit"], fitted, a.sources)
    print("\nheld-out set (predicted; not used for any fit)")
    print(head)
    held = [f for f in FIGURES if f.role == "held-out"]
    held_worst = _rows(held, fitted, a.sources)
    print("\nfitted efficiencies: " + ", ".join(f"{c}/{e} {v}" for (c, e), v in fitted.items()))
    print(f"fit rows: worst error {fit_worst:.1%}; held-out rows ({len(held)}): worst error "
          f"{held_worst:.1%} (tolerance {TOLERANCE:.0%})")
    print("\nspeculative decoding (acceptance length always held out; speed-up: role shown)")
    print(f"{'device':9} {'k':>2} {'metric':10} {'role':8} {'AL cited':>8} {'emulator':>8} "
          f"{'error':>7} {'speed-up cited':>14} {'emulator':>8} {'error':>7}  source")
    spec_worst = 0.0
    for s in SPEC_FIGURES:
        al, sp = emulated_speculation(s)
        al_err = al / s.acceptance_length - 1 if s.acceptance_length else None
        sp_err = sp / s.speedup - 1
        if s.role == "held-out":
            spec_worst = max(spec_worst, abs(sp_err), abs(al_err or 0.0))
        cited = f"{s.acceptance_length:8.2f}" if s.acceptance_length else f"{'-':>8}"
        err = f"{al_err:+7.1%}" if al_err is not None else f"{'-':>7}"
        print(f"{s.device:9} {s.k:2} {s.metric:10} {s.role:8} {cited} {al:8.2f} {err} "
              f"{s.speedup:13.2f}x {sp:7.2f}x {sp_err:+7.1%}  {s.source}")
    print(f"speculative held-out rows: worst error {spec_worst:.1%}. No with/without pair is "
          "published for any Jetson Orin module, nor by NVIDIA for DGX Spark (the one NVIDIA "
          "Jetson pair is on the AGX Thor, which the emulator does not model).")
    return 0 if max(held_worst, spec_worst) <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
