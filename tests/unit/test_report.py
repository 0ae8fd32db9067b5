"""specdec.report.fleet: host JSON, fleet Markdown and HTML, token scrubbing, `specdec report`."""

from __future__ import annotations

import json
import os
import time

import pytest

from specdec.cli import main
from specdec.errors import RolloutError
from specdec.report.cells import figures
from specdec.report.fleet import (
    index_html,
    latest_run,
    load_reports,
    resolve_run,
    skipped_report,
    summary_markdown,
    write_host_report,
)

TOKEN = "hf_MARKERtoken123"


def host_report(host: str, outcome: str, base=(20.0, 50.0, 100.0), cand=(28.0, 35.0, 105.0),
                per_pos=(0.7, 0.4), message="why") -> dict:
    def arm(t):
        return {"c1": {"throughput_tok_s": t[0], "tpot_ms_p50": t[1]},
                "c8": {"throughput_tok_s": t[2], "tpot_ms_p50": t[1] * 2}}
    return {"host": host, "device": "agx-orin-64gb", "method": "eagle3", "draft": "x/head",
            "num_speculative_tokens": 3, "outcome": outcome, "phase": "done",
            "message": message, "baseline": arm(base), "candidate": arm(cand),
            "acceptance": {"length": 2.1, "per_position": list(per_pos)},
            "roofline": {"baseline_pct": 71.0, "speculative_pct": 61.0},
            "power": {"power_mode": "MAXN", "power_mode_id": 0}, "measurements": []}


def test_figures():
    f = figures(host_report("a", "kept"))
    assert f["c1_gain"] == pytest.approx(0.4)
    assert f["tpot_change"] == pytest.approx(-0.3)
    assert f["c8_gain"] == pytest.approx(0.05)
    assert figures(skipped_report("b", "r", "x"))["c1_gain"] is None


def test_the_gain_column_is_the_gates_estimate_its_reason_quotes():
    rep = host_report("nx", "disabled", base=(20.0, 50.0, 100.0), cand=(20.48, 49.0, 101.0))
    rep["gate"] = {"figures": {"throughput_ratio_c1": 1.0, "tpot_p50_ratio_c1": 0.99,
                               "throughput_ratio_c8": 1.01}}
    rep["message"] = "c=1 throughput gain throughput_gain_c1 +0.0% (CI -9.0%..+9.9%) is below 10%"
    f = figures(rep)
    assert f["c1_gain"] == pytest.approx(0.0)  # not the plain +2.4% of the arms' level figures
    row = next(ln for ln in summary_markdown([rep], "r").splitlines() if ln.startswith("| nx"))
    assert "+0.0%" in row and "+2.4%" not in row


def test_summary_table():
    md = summary_markdown([host_report("a", "kept"), host_report("b", "disabled", message="a|b"),
                           skipped_report("c", "r", "not deployed")], "r")
    lines = md.splitlines()
    assert lines[0] == "# specdec rollout r"
    assert "1 kept, 1 disabled, 1 skipped" in md
    header = next(ln for ln in lines if ln.startswith("| host"))
    for col in ("host", "device", "method", "outcome", "c1 throughput gain", "TPOT change",
                "c8 gain", "acceptance length", "reason"):
        assert col in header
    row = next(ln for ln in lines if ln.startswith("| a |"))
    assert "+40.0%" in row and "-30.0%" in row and "+5.0%" in row and "2.10" in row
    assert "a\\|b" in md  # a pipe in a reason does not break the table
    assert "| MAXN |" in row and "| 71% | 61% |" in row
    assert "Roofline: decode tok/s = 1000 / TPOT p50" in md
    assert next(ln for ln in lines if ln.startswith("| c |")).count("| - |") >= 3


def test_serving_groups_one_table_per_kind():
    def member(host: str, group: str, engine: str, **kind: str) -> dict:
        return {**host_report(host, "kept"), "engine": engine,
                "group": {"name": group, "url": f"http://{group}:8000", "role": "worker",
                          "outcome": "kept", **kind}}

    reps = [member("a", "pair", "dynamo"), member("b", "pair", "dynamo"),
            member("c", "duo", "other", kind="Other <serving>"), host_report("d", "kept")]
    md = summary_markdown(reps, "r")
    assert md.count("## Serving groups (NVIDIA Dynamo)") == 1
    assert md.count("## Serving groups (Other <serving>)") == 1
    assert "| pair | http://pair:8000 | a (worker): kept; b (worker): kept | kept |" in md
    assert "| duo | http://duo:8000 | c (worker): kept | kept |" in md
    page = index_html(reps, "r")
    assert "<h2>Serving groups (NVIDIA Dynamo)</h2>" in page
    assert "<h2>Serving groups (Other &lt;serving&gt;)</h2>" in page
    assert "Serving groups" not in summary_markdown([host_report("d", "kept")], "r")


def test_html_has_charts_per_host():
    page = index_html([host_report("a", "kept"), host_report("b", "rolled_back")], "r")
    assert page.count("<svg") == 4  # TPOT, c1 and c8 throughput, acceptance
    assert "TPOT p50" in page and "Acceptance rate per draft position" in page
    assert page.count("<title>speculation:") == 6 and page.count("<title>baseline:") == 6
    assert "a position 2: 0.40" in page


def test_html_svg_is_well_formed_with_odd_host_names():
    import re
    import xml.etree.ElementTree as ET

    page = index_html([host_report("a<b>&c", "kept"), skipped_report("d\"e", "r", "x")], "r")
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 4
    for svg in svgs:
        ET.fromstring(svg)
    assert "a<b>" not in page


def test_token_never_written(tmp_path):
    rep = host_report("a", "rolled_back", message=f"engine said {TOKEN}")
    write_host_report(tmp_path / "r", rep, secret=TOKEN)
    for p in (tmp_path / "r").iterdir():
        assert TOKEN not in p.read_text(), p
    assert "<redacted>" in (tmp_path / "r" / "a.json").read_text()
    assert (tmp_path / "r" / "summary.md").exists() and (tmp_path / "r" / "index.html").exists()


def test_host_names_are_safe_file_names(tmp_path):
    write_host_report(tmp_path / "r", host_report("@fake/orin-1", "kept"))
    assert (tmp_path / "r" / "fake_orin-1.json").exists()
    assert load_reports(tmp_path / "r")[0]["host"] == "@fake/orin-1"


def test_latest_and_unknown_runs(tmp_path):
    with pytest.raises(RolloutError, match="no rollout reports"):
        latest_run(tmp_path)
    write_host_report(tmp_path / "old", host_report("a", "kept"))
    write_host_report(tmp_path / "new", host_report("a", "disabled"))
    past = time.time() - 100
    os.utime(tmp_path / "old", (past, past))
    (tmp_path / "cache" / "a").mkdir(parents=True)
    (tmp_path / "cache" / "a" / "x.json").write_text("{}")
    assert latest_run(tmp_path).name == "new"
    assert resolve_run(tmp_path, "old").name == "old"
    with pytest.raises(RolloutError, match="unknown run id"):
        resolve_run(tmp_path, "nope")
    with pytest.raises(RolloutError, match="not a run id"):
        resolve_run(tmp_path, "../etc")


def test_cli_report(tmp_path, capsys):
    write_host_report(tmp_path / "run7", host_report("a", "kept"))
    assert main(["report", "--reports", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# specdec rollout run7") and "| a |" in out
    assert main(["report", "zzz", "--reports", str(tmp_path)]) == 2  # bad input
    err = capsys.readouterr().err
    assert "unknown run id" in err and len(err.strip().splitlines()) == 1
    json.loads((tmp_path / "run7" / "a.json").read_text())


def test_emulated_hosts_are_labelled_device_time():
    rep = host_report("lab-agx", "kept")
    for arm in ("baseline", "candidate"):
        rep[arm]["device_time"] = {"emulated": True, "time_scale": 0.1}
    md = summary_markdown([rep, host_report("real", "kept")], "r")
    assert "| lab-agx | agx-orin-64gb (emulated) |" in md
    assert "| real | agx-orin-64gb |" in md
    assert "device time (the engine emulator ran at time scale 0.1" in md
    html = index_html([rep], "r")
    assert "agx-orin-64gb (emulated)" in html and "decode % of bw limit" in html
