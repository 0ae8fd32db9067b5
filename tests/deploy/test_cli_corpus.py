"""The bad-input corpus of the command line (issue 29): every argument of ``specdec plan``,
``rollout``, ``report`` and ``watch`` that takes a value, in its hostile forms (non-ASCII digits,
thousands of digits, empty, out of range, paths out of the reports root, store URLs, tune-cache
locations, shard specs, watch addresses): each refused with exactly one line naming the flag and
the value (cut when long), exit 2, no traceback, within `conftest.CASE_SECONDS`, before any host is
reached (rollout, watch) or a file written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specdec.cli import main
from specdec.errors import TOKEN_SHAPED

HOST = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}
BIG = "9" * 5000
SHARD = "expected I/N with 1 <= I <= N <= 1024 (e.g. 1/2)"
SERVE = "expected HOST:PORT (e.g. 127.0.0.1:9464)"
COUNT = "is not a host count >= 1 or a percentage like 25%"
RUN_ID = "use letters, digits, '.', '_' or '-' (at most 80, not 'cache')"
STORE = "expected etcd://HOST:PORT[,HOST:PORT]"
CUT = "'" + "9" * 59 + "… (5000 chars)"  # how `show` cuts a 5000-digit value
R = ["rollout", "{inv}"]
S = [*R, "--shard", "1/2", "--run-id", "r", "--store"]
W = ["watch", "{inv}", "--once"]

# (argv, the error line after "specdec: error: ")
CASES: dict[str, tuple[list[str], str]] = {
    # --shard I/N
    "shard-sup2": ([*R, "--shard", "²/2"], f"--shard='²/2': {SHARD}"),
    "shard-sup2-n": ([*R, "--shard", "1/²"], f"--shard='1/²': {SHARD}"),
    "shard-arabic": ([*R, "--shard", "٣/٤"], f"--shard='٣/٤': {SHARD}"),
    "shard-zero": ([*R, "--shard", "0/2"], f"--shard='0/2': {SHARD}"),
    "shard-over": ([*R, "--shard", "3/2"], f"--shard='3/2': {SHARD}"),
    "shard-n-zero": ([*R, "--shard", "1/0"], f"--shard='1/0': {SHARD}"),
    "shard-1025": ([*R, "--shard", "1/1025"], f"--shard='1/1025': {SHARD}"),
    "shard-one": ([*R, "--shard", "1"], f"--shard='1': {SHARD}"),
    "shard-three": ([*R, "--shard", "1/2/3"], f"--shard='1/2/3': {SHARD}"),
    "shard-neg": ([*R, "--shard=-1/2"], f"--shard='-1/2': {SHARD}"),
    "shard-space": ([*R, "--shard", " 1/2"], f"--shard=' 1/2': {SHARD}"),
    "shard-float": ([*R, "--shard", "1.5/2"], f"--shard='1.5/2': {SHARD}"),
    "shard-big": ([*R, "--shard", BIG], f"--shard={CUT}: {SHARD}"),
    "shard-big-i": ([*R, "--shard", f"{BIG}/1"],
                    f"--shard='{'9' * 59}… (5002 chars): {SHARD}"),
    "shard-empty": ([*R, "--shard", ""], "--shard='': must not be empty"),
    # --batches
    "batches-sup2": ([*R, "--batches", "²"], f"--batches='²': '²' {COUNT}"),
    "batches-zero": ([*R, "--batches", "0"], f"--batches='0': '0' {COUNT}"),
    "batches-neg": ([*R, "--batches", "-1"], f"--batches='-1': '-1' {COUNT}"),
    "batches-pct": ([*R, "--batches", "101%"],
                    "--batches='101%': '101%' is not a percentage in 1%..100%"),
    "batches-sup2-pct": ([*R, "--batches", "²%"],
                         "--batches='²%': '²%' is not a percentage in 1%..100%"),
    "batches-hole": ([*R, "--batches", "1,,2"],
                     "--batches='1,,2': expected a comma-separated list like 1,25%,100%"),
    "batches-big": ([*R, "--batches", BIG], f"--batches={CUT}: {CUT} {COUNT}"),
    "batches-empty": ([*R, "--batches", ""], "--batches='': must not be empty"),
    # failure budgets, parallelism
    "fail-nan": ([*R, "--max-fail-percent", "nan"], "--max-fail-percent='nan': must be in 0..100"),
    "fail-sup2": ([*R, "--max-fail-percent", "²"], "--max-fail-percent='²': not a number"),
    "unreach-over": ([*R, "--max-unreachable-percent", "101"],
                     "--max-unreachable-percent='101': must be in 0..100"),
    "unreach-inf": ([*R, "--max-unreachable-percent", "inf"],
                    "--max-unreachable-percent='inf': must be in 0..100"),
    "parallel-zero": ([*R, "--parallel", "0"], "--parallel=0: must be at least 1"),
    "parallel-sup2": ([*R, "--parallel", "²"], "rollout: argument --parallel: invalid int "
                      "value: '²' (see specdec rollout --help)"),
    # run ids, resume, reports
    "runid-dotdot": ([*R, "--run-id", "../x"], f"--run-id='../x': {RUN_ID}"),
    "runid-newline": ([*R, "--run-id", "a\nb"], f"--run-id='a\\nb': {RUN_ID}"),
    "runid-cache": ([*R, "--run-id", "cache"], f"--run-id='cache': {RUN_ID}"),
    "runid-empty": ([*R, "--run-id", ""], "--run-id='': must not be empty"),
    "resume-dotdot": ([*R, "--resume", "../../etc"], f"--run-id='../../etc': {RUN_ID}"),
    "resume-empty": ([*R, "--resume", ""], "--resume='': must not be empty"),
    "reports-empty": ([*R, "--reports", ""], "--reports='': must not be empty"),
    "limit-empty": ([*R, "--limit", ""], "--limit='': must not be empty"),
    "plan-limit-empty": (["plan", "{inv}", "--limit", ""], "--limit='': must not be empty"),
    "report-dotdot": (["report", "../../etc"], "run '../../etc': not a run id"),
    # the fleet store
    "store-bare": ([*S, "etcd://"], f"--store='etcd://': {STORE}"),
    "store-port-name": ([*S, "etcd://h:port"], f"--store='etcd://h:port': {STORE}"),
    "store-port-sup2": ([*S, "etcd://h:²"], f"--store='etcd://h:²': {STORE}"),
    "store-port-long": ([*S, "etcd://h:99999999"], f"--store='etcd://h:99999999': {STORE}"),
    "store-trailing-comma": ([*S, "etcd://h:1,"], f"--store='etcd://h:1,': {STORE}"),
    "store-two-commas": ([*S, "etcd://h:1,,g:2"], f"--store='etcd://h:1,,g:2': {STORE}"),
    "store-user": ([*S, "etcd://u:p@h:1"], f"--store='etcd://<redacted>@h:1': {STORE}"),
    "store-path": ([*S, "etcd://h:1/x"], f"--store='etcd://h:1/x': {STORE}"),
    "store-http": ([*S, "http://x"],
                   "--store='http://x': expected a directory, etcd://HOST:PORT or "
                   "etcds://HOST:PORT"),
    "store-tls-no-ca": ([*S, "etcds://h:1"], "--store='etcds://h:1': TLS needs --store-ca (and "
                        "a client certificate when etcd asks for one)"),
    "store-empty": ([*S, ""], "--store='': must not be empty"),
    "store-ca-empty": ([*S, "etcds://h:1", "--store-ca", ""], "--store-ca='': must not be empty"),
    "store-plain-with-ca": ([*S, "etcd://h:1", "--store-ca", "/ca.crt"], "--store='etcd://h:1': "
                            "plaintext, but TLS files are given (--store-ca/--store-cert/"
                            "--store-key); use etcds://"),
    "store-no-shard": ([*R, "--run-id", "r", "--store", "/tmp/x"], "--store is for --shard"),
    # the tune cache's location
    "tune-s3": ([*R, "--tune-cache", "s3://bucket"], "--tune-cache='s3://bucket': no store for "
                "s3:// (known: none registered); use a directory"),
    "tune-newline": ([*R, "--tune-cache", "a\nb"], "--tune-cache='a\\nb': a tune cache location "
                     "is a directory or a URL (one line)"),
    "tune-empty": ([*R, "--tune-cache", ""], "--tune-cache='': must not be empty"),
    "tune-long": ([*R, "--tune-cache", "/" + "a" * 5000],
                  f"--tune-cache='/{'a' * 59}': a tune cache location is a directory or a URL "
                  "(one line)"),
    "plan-tune-s3": (["plan", "{inv}", "--tune-cache", "s3://b"],
                     "h1: --tune-cache='s3://b': no store for s3:// (known: none registered); "
                     "use a directory"),
    "plan-tune-nul": (["plan", "{inv}", "--tune-cache", "x\x00y"],
                      "h1: --tune-cache='x\\x00y': a tune cache location is a directory or a "
                      "URL (one line)"),
    "plan-tune-etcd": (["plan", "{inv}", "--tune-cache", "etcd://h:1"],
                       "h1: --tune-cache='etcd://h:1': no store for etcd:// (known: none "
                       "registered); use a directory"),
    # watch: the exposition's address, times and counts
    "serve-sup2": ([*W, "--serve", "x:²"], f"--serve='x:²': {SERVE}"),
    "serve-arabic": ([*W, "--serve", "127.0.0.1:٨٠"], f"--serve='127.0.0.1:٨٠': {SERVE}"),
    "serve-no-port": ([*W, "--serve", "x:"], f"--serve='x:': {SERVE}"),
    "serve-no-colon": ([*W, "--serve", "9464"], f"--serve='9464': {SERVE}"),
    "serve-over": ([*W, "--serve", ":99999"], f"--serve=':99999': {SERVE}"),
    "serve-neg": ([*W, "--serve", "h:-1"], f"--serve='h:-1': {SERVE}"),
    "serve-big": ([*W, "--serve", BIG], f"--serve={CUT}: {SERVE}"),
    "serve-big-port": ([*W, "--serve", "h:" + BIG],
                       f"--serve='h:{'9' * 57}… (5002 chars): {SERVE}"),
    "serve-empty": ([*W, "--serve", ""], "--serve='': must not be empty"),
    "interval-nan": ([*W, "--interval", "nan"], "--interval='nan': must be in 0.5..3600"),
    "interval-huge": ([*W, "--interval", "1e999"], "--interval='1e999': must be in 0.5..3600"),
    "interval-sup2": ([*W, "--interval", "²"], "--interval='²': not a number"),
    "interval-empty": ([*W, "--interval", ""], "--interval='': must not be empty"),
    "window-inf": ([*W, "--window", "inf"], "--window='inf': must be in 10..604800"),
    "window-small": ([*W, "--window", "9"], "--window='9': must be in 10..604800"),
    "drafted-sup2": ([*W, "--min-drafted", "²"], "--min-drafted='²': not a number"),
    "drafted-zero": ([*W, "--min-drafted", "0"], "--min-drafted='0': must be in 1..1e+09"),
    "duration-neg": ([*W, "--duration", "-1"], "--duration='-1': must be in 1..1e+07"),
    "duration-empty": ([*W, "--duration", ""], "--duration='': must not be empty"),
    "textfile-empty": ([*W, "--textfile", ""], "--textfile='': must not be empty"),
    "textfile-nodir": ([*W, "--textfile", "/nonexistent/x.prom"],
                       "--textfile='/nonexistent/x.prom': no such directory '/nonexistent'"),
}


pytestmark = pytest.mark.usefixtures("no_hang")


@pytest.fixture(autouse=True)
def _guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """No case may start a rollout or reach a host."""
    def reached(*a: Any, **k: Any) -> None:
        raise AssertionError("a bad argument reached the hosts")

    monkeypatch.setattr("specdec.fleet.rollout.run_rollout", reached)
    monkeypatch.setattr("specdec.cli.watch.targets", reached)
    # the inventory's one host, without pyinfra's loader in a child interpreter
    monkeypatch.setattr("specdec.config.inventory._load_in_child",
                        lambda path, cwd: [("h1", [], dict(HOST))])



@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_argument_is_one_line_and_exit_2(name: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv, expected = CASES[name]
    inv = tmp_path / "inv.py"
    inv.write_text(f"fleet = [('h1', {HOST!r})]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECDEC_TUNE_CACHE", raising=False)
    words = [w.replace("{inv}", str(inv)) for w in argv]
    if words[0] == "rollout" and "--reports" not in words:
        words += ["--reports", str(tmp_path / "reports")]
    try:
        rc = main(words)
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert err.endswith("\n") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and err.startswith("specdec: error: "), err
    assert TOKEN_SHAPED.search(err) is None
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_the_corpus_is_large_and_covers_every_argument() -> None:
    assert len(CASES) >= 80
    flags = {w for argv, _ in CASES.values() for w in argv if w.startswith("--")}
    for flag in ("--shard", "--batches", "--store", "--store-ca", "--tune-cache", "--serve",
                 "--run-id", "--resume", "--reports", "--limit", "--interval", "--window",
                 "--min-drafted", "--duration", "--textfile", "--parallel",
                 "--max-fail-percent", "--max-unreachable-percent"):
        assert flag in flags, flag
