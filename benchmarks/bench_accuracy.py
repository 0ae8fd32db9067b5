"""Bench accuracy: does `specdec bench` measure what the engine emulator actually did?

Not a test: it prints figures. Run: ``python3 benchmarks/bench_accuracy.py``.

Starts the emulator on loopback (vLLM flavour on the AGX Orin 64GB profile with EAGLE-3, and
trtllm-serve on DGX Spark, time scale 0.05 by default); for concurrency 1 and then 8: resets
``/lab/truth``, runs ``python3 -m specdec.cli bench URL --concurrency C --warmup 0 --json …``
and compares ``tpot_ms_p50`` and ``throughput_tok_s`` with ``GET /lab/truth`` (goal: within 2%).
Both sides in device time: the bench converts an emulator's figures (``device_time`` label),
the truth's ``unscaled`` block is the same figures divided by the time scale.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from specdec_lab.emulator.local import emulator, lab_truth, reset_truth

HEAD = "RedHatAI/Qwen3-8B-speculator.eagle3"
FLAVOURS = {
    "vllm": ("vllm", "Qwen/Qwen3-8B", "agx-orin-64gb",
             ["--speculative-config", json.dumps({"method": "eagle3", "model": HEAD,
                                                  "num_speculative_tokens": 3})]),
    "trtllm": ("trtllm-serve", "Qwen/Qwen3-8B", "dgx-spark", []),
}


def run(flavour: str, a: argparse.Namespace, tmp: Path) -> list[float]:
    engine, model, device, args = FLAVOURS[flavour]
    if flavour == "trtllm":
        opts = tmp / "extra.yaml"
        opts.write_text("enable_iter_perf_stats: true\nspeculative_config:\n  decoding_type: "
                        f"Eagle3\n  max_draft_len: 3\n  speculative_model_dir: {HEAD}\n")
        args = ["--extra_llm_api_options", str(opts)]
    env = {"SPECDEC_EMU_DEVICE": device, "SPECDEC_EMU_TIME_SCALE": str(a.time_scale),
           "SPECDEC_EMU_SEED": "3"}
    errors: list[float] = []
    with emulator(engine, model, args, env) as url:
        for conc in (1, 8):
            reset_truth(url)
            out = tmp / f"{flavour}-c{conc}.json"
            cmd = [sys.executable, "-m", "specdec.cli", "bench", url, "--concurrency", str(conc),
                   "--warmup", "0", "--max-tokens", str(a.max_tokens), "--json", str(out)]
            if a.requests:
                cmd += ["--requests", str(a.requests)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                print(f"{flavour} c={conc}: bench failed: {p.stderr.strip()}")
                errors.append(float("inf"))
                continue
            doc = json.loads(out.read_text())
            if (doc.get("device_time") or {}).get("time_scale") != a.time_scale:
                print(f"{flavour} c={conc}: the result is not labelled device time")
                errors.append(float("inf"))
                continue
            lvl = doc["concurrency"][str(conc)]
            truth = lab_truth(url)
            dev_truth = truth["unscaled"]
            for key in ("tpot_ms_p50", "throughput_tok_s"):
                got, want = lvl[key], dev_truth[key]
                err = got / want - 1.0
                errors.append(abs(err))
                print(f"{flavour:7} {device:14} c={conc}  {key:17} bench {got:10.3f}  truth "
                      f"{want:10.3f}  error {err:+.2%}")
            print(f"{'':7} {'':14} c={conc}  (ttft_ms_p50 bench {lvl['ttft_ms_p50']:.2f} truth "
                  f"{dev_truth['ttft_ms_p50']:.2f}; steady throughput "
                  f"{lvl['steady_output_throughput'] or float('nan'):.1f}; requests "
                  f"{lvl['completed']}/{truth['requests']}; acceptance length "
                  f"{(lvl['spec_decode'] or {}).get('acceptance_length')})")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, default=0.05)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=None, help="default: every prompt once")
    ap.add_argument("--flavour", choices=sorted(FLAVOURS), action="append")
    a = ap.parse_args()
    errors: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for fl in a.flavour or ["vllm", "trtllm"]:
            errors += run(fl, a, Path(d))
    worst = max(errors)
    print(f"worst error {worst:.2%} (goal <= 2%): {'met' if worst <= 0.02 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
