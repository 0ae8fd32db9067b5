"""Run the vLLM contract for one release: its environment (built if needed), every case in one
checker process, the verdict. ``python3 -m specdec_lab.contract [VERSION...]`` prints it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.catalog import load_catalog
from specdec_lab.contract.cases import Suite, pinned_versions
from specdec_lab.contract.controls import checker_input, full_suite
from specdec_lab.contract.installer import InstallError, cache_root, ensure_vllm
from specdec_lab.contract.verdict import judge

__all__ = ["CHECKER", "Report", "run_vllm"]

CHECKER = Path(__file__).resolve().parent / "vllm_check.py"
CHECK_TIMEOUT = 1200


@dataclass
class Report:
    version: str
    suite: Suite
    output: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    install_s: float = 0.0
    check_s: float = 0.0  # the checker process, import included

    def summary(self) -> str:
        n = len(self.suite.cases)
        refused = sum(1 for c in self.suite.cases if not c.expect_ok)
        return (f"vLLM {self.version}: {n} cases ({n - refused} to accept, {refused} to refuse), "
                f"{len(self.problems)} problems; environment {self.install_s:.0f} s, checker "
                f"{self.check_s:.1f} s (import {self.output.get('import_s')} s)")


def _log(msg: str) -> None:
    print(f"[contract] {msg}", file=sys.stderr, flush=True)


def run_checker(venv: Path, data: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="specdec-contract-") as tmp:
        inp, out = Path(tmp) / "input.json", Path(tmp) / "output.json"
        inp.write_text(json.dumps(data))
        proc = subprocess.run(
            [str(venv / "bin" / "python"), "-I", str(CHECKER), "--input", str(inp),
             "--output", str(out)],
            capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise InstallError(f"the checker failed in {venv} (exit {proc.returncode}):\n{tail}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def run_vllm(version: str) -> Report:
    t0 = time.monotonic()
    venv = ensure_vllm(version, log=_log)
    t1 = time.monotonic()
    cat = load_catalog()
    suite = full_suite(version, cat)
    output = run_checker(venv, checker_input(version, suite))
    t2 = time.monotonic()
    report = Report(version, suite, output, judge(suite, output, cat), t1 - t0, t2 - t1)
    reports = cache_root() / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"vllm-{version}.json").write_text(json.dumps(
        {"summary": report.summary(), "problems": report.problems, "output": output},
        indent=1, default=str))
    _log(report.summary())
    return report


def main(argv: list[str] | None = None) -> int:
    versions = (sys.argv[1:] if argv is None else argv) or pinned_versions("vllm")
    bad = 0
    for v in versions:
        try:
            report = run_vllm(v)
        except InstallError as exc:
            print(f"vLLM {v}: {exc}")
            bad += 1
            continue
        print(report.summary())
        for p in report.problems:
            print(f"  {p}")
        bad += bool(report.problems)
    return 1 if bad else 0
