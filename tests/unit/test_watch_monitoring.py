"""What the watch hands to monitoring: the exposition (parsed by prometheus_client, served over
HTTP), the Grafana dashboard (rebuilt with grafana-foundation-sdk and compared with the
committed JSON), the example alert rules (``promtool check rules`` and ``promtool test rules``
of Debian's prometheus package), and every metric those two use being one the watch exposes."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdec.cli.watch import parse_address, serve_token
from specdec.errors import ConfigError
from specdec.watch.expose import CODES, Exposition, render, write_textfile

ROOT = Path(__file__).resolve().parents[2]
MON = ROOT / "monitoring"
ROW: dict[str, Any] = {
    "host": "lab-nano", "status": "ok", "speculative": True, "verdict": "marginal",
    "live_al": 1.9, "gate_al": 2.3, "est_gain": 0.17, "est_gain_ci": [0.05, 0.29],
    "gate_gain_c1": 0.68, "tokens_per_s": 35.0, "requests_per_s": 0.3,
    "window": {"mean_batch": 1.2, "draft_tokens": 12000}, "decision": "kept",
    "decision_age_s": 3600.0, "marked": False, "verdict_changes": 2, "keep_level": 1.3,
    "floor_level": 1.1, "device_time": {"emulated": True, "time_scale": 0.1},
}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_exposition_parses_and_says_what_the_row_says() -> None:
    got = _samples(render([ROW, {"host": "lab-agx", "status": "unreachable: x",
                                 "verdict": "no traffic"}], now=123.0))
    host = (("host", "lab-nano"),)
    assert got[("specdec_watch_estimated_speedup", host)] == pytest.approx(1.17)
    assert got[("specdec_watch_estimated_speedup_lower", host)] == pytest.approx(1.05)
    assert got[("specdec_watch_live_acceptance_length", host)] == 1.9
    assert got[("specdec_watch_verdict_code", host)] == CODES["marginal"]
    assert got[("specdec_watch_verdict", (("host", "lab-nano"), ("verdict", "marginal")))] == 1
    assert got[("specdec_watch_verdict", (("host", "lab-nano"), ("verdict", "paying")))] == 0
    assert got[("specdec_watch_up", (("host", "lab-agx"),))] == 0
    assert ("specdec_watch_live_acceptance_length", (("host", "lab-agx"),)) not in got
    assert got[("specdec_watch_last_update_timestamp_seconds", ())] == 123.0
    assert got[("specdec_watch_decision_age_seconds",
                (("decision", "kept"), ("host", "lab-nano")))] == 3600.0
    assert got[("specdec_watch_verdict_changes_total", host)] == 2


def test_label_values_are_escaped() -> None:
    text = render([{**ROW, "host": 'we"ird\\host'}])
    assert 'host="we\\"ird\\\\host"' in text
    assert _samples(text)  # still parses


def test_served_and_written(tmp_path: Path) -> None:
    ex = Exposition(("127.0.0.1", 0))
    try:
        ex.update(render([ROW]))
        host, port = ex.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "specdec_watch_estimated_speedup" in resp.read().decode()
    finally:
        ex.close()
    path = tmp_path / "specdec_watch.prom"
    write_textfile(path, render([ROW]))
    assert _samples(path.read_text()) and not list(tmp_path.glob(".*.tmp"))


def _dashboard_module() -> Any:
    spec = importlib.util.spec_from_file_location("specdec_dashboard", MON / "dashboard.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dashboard_is_the_sdks_output_and_reads_back() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    committed = (MON / "grafana" / "specdec-watch.json").read_text()
    assert _dashboard_module().render() == committed, \
        "regenerate: python3 monitoring/dashboard.py > monitoring/grafana/specdec-watch.json"
    back = json.dumps(Dashboard.from_json(json.loads(committed)), cls=JSONEncoder,
                      sort_keys=True, indent=2) + "\n"
    assert back == committed
    doc = json.loads(committed)
    titles = [p["title"] for p in doc["panels"]]
    for want in ("Verdict over time", "Acceptance length: live vs gate",
                 "Estimated live gain vs the gate's c=1 gain"):
        assert want in titles
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in doc["panels"])


def _exprs() -> list[str]:
    doc = json.loads((MON / "grafana" / "specdec-watch.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets") or []]
    exprs += [v.get("query") if isinstance(v.get("query"), str) else "" for v in
              doc["templating"]["list"]]
    rules = (MON / "prometheus" / "specdec-watch-rules.yml").read_text()
    exprs += re.findall(r"specdec_watch_[a-z0-9_]+", rules)
    return exprs


def test_every_metric_used_is_exposed() -> None:
    exposed = {n for n, _ in _samples(render([ROW]))}
    used = {m for e in _exprs() for m in re.findall(r"specdec_watch_[a-z0-9_]+", e)}
    assert used and used <= exposed, used - exposed


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: the Makefile installs Debian's prometheus package")
    return tool


def test_alert_rules_check_and_their_unit_tests_pass() -> None:
    tool = _promtool()
    rules = MON / "prometheus" / "specdec-watch-rules.yml"
    proc = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run([tool, "test", "rules", "specdec-watch-rules.test.yml"],
                          cwd=rules.parent, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_would_catch_a_broken_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text((MON / "prometheus" / "specdec-watch-rules.yml").read_text()
                   .replace("specdec_watch_up == 0", "specdec_watch_up == (0"))
    proc = subprocess.run([_promtool(), "check", "rules", str(bad)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode != 0


def test_serve_is_loopback_unless_given_a_token(tmp_path: Path) -> None:
    """issue 29: ``--serve :PORT`` bound every interface without authentication."""
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert serve_token(("127.0.0.1", 9464), None) is None
    with pytest.raises(ConfigError, match="not loopback"):
        serve_token(("0.0.0.0", 9464), None)
    tok = tmp_path / "tok"
    tok.write_text("t" * 32 + "\n")
    tok.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        serve_token(("0.0.0.0", 9464), str(tok))
    tok.chmod(0o600)
    assert serve_token(("0.0.0.0", 9464), str(tok)) == "t" * 32
    ex = Exposition(("127.0.0.1", 0), "t" * 32)
    try:
        host, port = ex.address
        url = f"http://{host}:{port}/metrics"
        for sent in (None, "Bearer " + "u" * 32):
            req = urllib.request.Request(url, headers={"Authorization": sent} if sent else {})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=5)
            assert err.value.code == 401
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + "t" * 32})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
    finally:
        ex.close()
