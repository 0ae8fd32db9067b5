"""Check the README's quoted benchmark lines against what their commands print now.

The README quotes a benchmark as a command in backticks, a colon (or a parenthesised commit and a
colon), a blank line, then the printed lines indented by four spaces. This script finds every
such quote, runs each command (from the checkout, with this Python), and fails when a quoted
line is not in what the command printed. Heavy: the gate and tuner benchmarks take an hour or
more on two cores; ``--list`` only shows what it would run.

    python3 benchmarks/figures.py [--list] [--only SUBSTRING] [--file README.md]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `command` [(…)]:  then a blank line, then the quoted lines (4-space indent)
_QUOTE = re.compile(r"`([^`\n]*benchmarks/[^`\n]+\.py[^`\n]*)`[^\n`]*(?:\n[^\n`]*)?:\n\n"
                    r"((?:    [^\n]*\n)+)")


@dataclass(frozen=True)
class Quote:
    command: str
    lines: tuple[str, ...]


def quotes(text: str) -> list[Quote]:
    """Every quoted benchmark output of a Markdown text, in order."""
    return [Quote(m.group(1), tuple(line[4:] for line in m.group(2).splitlines()))
            for m in _QUOTE.finditer(text)]


def argv(command: str) -> list[str]:
    """The command as run here: ``nice -n N`` kept, ``python3`` this interpreter."""
    words = shlex.split(command)
    out = [sys.executable if w == "python3" else w for w in words]
    if "benchmarks/" not in command or sys.executable not in out:
        raise SystemExit(f"figures: {command!r}: not a python3 benchmarks/ command")
    return out


def missing(q: Quote, printed: str) -> list[str]:
    """The quoted lines the output does not hold (compared line by line, spaces trimmed)."""
    got = {line.strip() for line in printed.splitlines()}
    return [line for line in q.lines if line.strip() not in got]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--file", default="README.md", help="the Markdown file (default README.md)")
    p.add_argument("--list", action="store_true", help="show the commands, run nothing")
    p.add_argument("--only", default=None, help="run only commands containing this text")
    args = p.parse_args()
    found = [q for q in quotes((ROOT / args.file).read_text())
             if args.only is None or args.only in q.command]
    if not found:
        print(f"figures: no quoted benchmark output in {args.file}", file=sys.stderr)
        return 2
    bad = 0
    for q in found:
        print(f"{q.command}  ({len(q.lines)} quoted lines)")
        if args.list:
            continue
        proc = subprocess.run(argv(q.command), cwd=ROOT, capture_output=True, text=True,
                              check=False)
        lost = missing(q, proc.stdout)
        for line in lost:
            print(f"  NOT PRINTED: {line}")
        print(f"  {len(q.lines) - len(lost)}/{len(q.lines)} quoted lines printed "
              f"(exit {proc.returncode})")
        bad += bool(lost) or proc.returncode != 0
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
