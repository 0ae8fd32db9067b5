"""benchmarks/figures.py: the README's quoted benchmark lines are found with their commands, and
each is the line its measurement page recorded (the page names the run that printed it)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.benchmod import load

ROOT = Path(__file__).resolve().parents[2]
fig = load("figures")

PAGES = {"gate_power.py": "gate-power.md", "oracle_gap.py": "oracle-gap.md"}


def test_the_readme_quotes_the_held_out_lines_of_both_benchmarks() -> None:
    found = fig.quotes((ROOT / "README.md").read_text())
    scripts = [next(s for s in PAGES if s in q.command) for q in found]
    assert sorted(set(scripts)) == sorted(PAGES), [q.command for q in found]
    for q in found:
        assert "--seeds" in q.command and q.lines, q  # a rerun prints the same seeds' lines
        assert all("held-out seeds" in line for line in q.lines), q.lines


def test_every_quoted_line_is_what_its_page_recorded() -> None:
    for q in fig.quotes((ROOT / "README.md").read_text()):
        page = next(p for s, p in PAGES.items() if s in q.command)
        recorded = (ROOT / "docs" / "measurements" / page).read_text()
        assert not fig.missing(q, recorded), (page, fig.missing(q, recorded))


def test_a_changed_figure_is_caught() -> None:
    q = fig.Quote("python3 benchmarks/x.py", ("worst 90.7, target ≤ 90.0: NOT met",))
    assert fig.missing(q, "  worst 90.7, target ≤ 90.0: NOT met\n") == []
    assert fig.missing(q, "worst 89.9, target ≤ 90.0: met\n") == list(q.lines)


def test_commands_run_with_this_python_only_from_benchmarks() -> None:
    assert fig.argv("nice -n 10 python3 benchmarks/gate_power.py --jobs 2")[:4] == [
        "nice", "-n", "10", sys.executable]
