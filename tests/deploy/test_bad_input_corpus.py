"""The bad-input corpus (issue 10): every case is refused with one exact line naming host, key
and a redacted value, exit 2, before any host is touched, through each entry point:

* ``specdec plan`` (offline; not for token cases, plan reads no token),
* ``specdec rollout`` (must not start a batch),
* the pyinfra deploy's prepare (``deploys/specdec.py`` on a @fake host: no fact gathered, no
  command sent, nothing uploaded).

The inventory loader (pyinfra executing the inventory file in a child interpreter) is replaced
by the case's host here; `test_real_cli_*` at the end run the real loader and CLI in a
subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import State

from specdec.cli import main
from specdec.errors import TOKEN_SHAPED
from specdec.plan.hostdata import KNOWN_KEYS
from specdec.roles.common import DeployError
from tests.deploy import (
    corpus_env,
    corpus_flags,
    corpus_host,
    corpus_network,
    corpus_network2,
    corpus_sec,
)
from tests.deploy.corpus_base import HOST, HOST_RULE, NOT_SINGLE, TOK, VLLM, Case
from tests.deploy.corpus_tune import AUTO, TUNE_CASES, _entry
from tests.deploy.harness import World, run_deploy

ROOT = Path(__file__).resolve().parents[2]
PARTS = (corpus_host.CASES, corpus_network.CASES, corpus_env.CASES, corpus_sec.CASES,
         corpus_flags.CASES, corpus_network2.CASES)
CASES: dict[str, Case] = {k: v for part in PARTS for k, v in part.items()}
assert len(CASES) == sum(map(len, PARTS))  # no name twice



_CLEANUP: list[Path] = []
pytestmark = pytest.mark.usefixtures("no_hang")  # a case hung once (issue 29)


@pytest.fixture(autouse=True)
def _remove_token_dirs():
    yield
    while _CLEANUP:
        shutil.rmtree(_CLEANUP.pop(), ignore_errors=True)


def _setup(case: Case, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """The host data and the expected message; $HF_TOKEN and the token file as the case says."""
    data = {**case.base, **case.data}
    error = case.error
    if case.env_token is not None:
        monkeypatch.setenv("HF_TOKEN", case.env_token)
    if case.file_token is not None:
        short = Path(tempfile.mkdtemp(prefix="sdtok"))  # short: the error shows the path whole
        path = short / "t"
        path.write_bytes(case.file_token)
        _CLEANUP.append(short)
        data["specdec_hf_token_file"] = str(path)
        error = error.replace("{path}", str(path))
    if case.key_file is not None:
        short = Path(tempfile.mkdtemp(prefix="sdkey"))
        path = short / "k"
        path.write_bytes(case.key_file)
        path.chmod(case.key_mode)
        _CLEANUP.append(short)
        data["specdec_api_key_file"] = str(path)
        error = error.replace("{path}", str(path))
    return data, error


def _patch_loader(monkeypatch: pytest.MonkeyPatch, host: str, data: dict[str, Any]) -> None:
    monkeypatch.setattr("specdec.config.inventory._load_in_child",
                        lambda path, cwd: [(host, [], dict(data))])


def _check_line(text: str, expected: str) -> None:
    assert text == f"specdec: error: {expected}\n"
    assert len(text.splitlines()) == 1 and "Traceback" not in text
    assert TOKEN_SHAPED.search(text) is None


@pytest.mark.parametrize("case", [pytest.param(c, id=k) for k, c in CASES.items()])
def test_corpus_plan(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    if not case.offline:
        pytest.skip("specdec plan reads no token")
    data, error = _setup(case, monkeypatch)
    inv = tmp_path / "inv.py"
    inv.write_text("")
    _patch_loader(monkeypatch, case.host, data)
    assert main(["plan", str(inv)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _check_line(err, error)


@pytest.mark.parametrize("case", [pytest.param(c, id=k) for k, c in CASES.items()])
def test_corpus_rollout(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    data, error = _setup(case, monkeypatch)
    inv = tmp_path / "inv.py"
    inv.write_text("")
    _patch_loader(monkeypatch, case.host, data)
    started: list[Any] = []
    monkeypatch.setattr("specdec.fleet.rollout.run_rollout", lambda *a, **k: started.append(a))
    rc = main(["rollout", str(inv), "--reports", str(tmp_path / "r"), "--run-id", "c1"])
    out, err = capsys.readouterr()
    assert rc == 2 and not started and not (tmp_path / "r" / "c1").exists()
    assert out == ""
    _check_line(err, error)


@pytest.mark.parametrize("case", [pytest.param(c, id=k) for k, c in CASES.items()])
def test_corpus_deploy(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, error = _setup(case, monkeypatch)
    world = World()
    states: list[State] = []
    with pytest.raises(DeployError) as exc:
        run_deploy(monkeypatch, world, data, name=case.host, state_out=states)
    assert str(exc.value) == error
    assert TOKEN_SHAPED.search(str(exc.value)) is None
    h = states[0].inventory.get_host(case.host)
    assert world.facts_seen == []  # not even the identity fact
    assert h.connector.executed_commands == [] and h._uploads == []


def test_corpus_size_and_coverage() -> None:
    assert len(CASES) + len(TUNE_CASES) >= 250 + 150
    keys = " ".join(CASES)
    for topic in ("host-", "model-", "draft-", "vllm-", "trt-", "env-", "memlock-", "params-",
                  "token-env-", "token-file-", "image-", "arg", "listen-", "allow-",
                  "engine-port-", "keyfile-", "tls-", "pki-", "trust-", "user-", "ssh-",
                  "dynaddr-", "dynenv-", "proxy-", "cdn-", "reg-", "site-", "group-",
                  "dynport-", "router-", "migr-", "tune-", "resolver-", "mirroraddr-",
                  "hubep-", "hubup-", "regup-", "scope-", "fwallow-", "sshport-", "hubca-"):
        assert topic in keys


def test_every_host_data_key_has_a_case() -> None:
    """Every key the host data may set (`KNOWN_KEYS`) is the subject of at least one case."""
    used = {k for c in CASES.values() for k in c.data} | {"specdec_hf_token_file",
                                                          "specdec_api_key_file"}
    assert set(KNOWN_KEYS) - used <= {"specdec_hub_endpoint", "specdec_hub_upstream"}, \
        sorted(set(KNOWN_KEYS) - used)  # the URL keys: the mirror's TLS work (issue 29, high 1, 3)


def test_one_bad_host_among_good_ones_stops_all(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    states: list[State] = []
    with pytest.raises(DeployError) as exc:
        run_deploy(monkeypatch, world, VLLM, name="@fake/good-1", state_out=states,
                   others=[("@fake/bad\u2028x", VLLM)])
    assert str(exc.value) == f"host name '@fake/bad\\u2028x': {HOST_RULE}"
    assert world.facts_seen == []
    assert all(h.connector.executed_commands == [] for h in states[0].inventory)


# -- the real loader and CLI, in a subprocess ----------------------------------------------------


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), base.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.parametrize(("hosts", "env", "expected"), [
    ("[('ok-1', _d), ('bad\\nExecStartPre=+/bin/sh', _d)]", {},
     f"host name 'bad\\nExecStartPre=+/bin/sh': {HOST_RULE}"),
    ("[('ok-1', {**_d, 'specdec_model': 'Qwen/' + 'a' * 2097152})]", {},
     f"ok-1: specdec_model='Qwen/{'a' * 54}… (2097157 chars): is 2097157 characters long "
     "(at most 193)"),
    ("[('ok-1', {**_d, 'specdec_extra_args': ['--port=1']})]", {},
     "ok-1: specdec_extra_args[0]='--port=1': --port is managed by specdec (use specdec_port)"),
    ("[('ok-1', _d)]", {"HF_TOKEN": TOK[:20] + "\n" + TOK[20:]}, f"ok-1: $HF_TOKEN: {NOT_SINGLE}"),
], ids=["host-newline", "model-2mib", "managed-flag", "token-env"])
def test_real_cli_refuses_with_exit_2(tmp_path: Path, hosts: str, env: dict[str, str],
                                      expected: str) -> None:
    inv = tmp_path / "fleet.py"
    inv.write_text(f"_d = {VLLM!r}\nfleet = {hosts}\n")
    commands = [("rollout", str(inv), "--reports", str(tmp_path / "r"), "--run-id", "x")]
    if not env:
        commands.insert(0, ("plan", str(inv)))
    for argv in commands:
        out = _run(*argv, cwd=tmp_path, env=env)
        assert out.returncode == 2, out.stderr
        assert out.stdout == "" and out.stderr == f"specdec: error: {expected}\n"
        assert not (tmp_path / "r" / "x").exists()
        assert TOKEN_SHAPED.search(out.stderr) is None





@pytest.mark.usefixtures("hf_token")  # the model is gated: the plan wants a token
@pytest.mark.parametrize("name", [*TUNE_CASES, "good"])
def test_tune_cache_entry_is_input(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An entry of the tune cache that fails its checks is ignored with one line in the plan's
    notes, and the host searches again (k auto); a good one is used (k tuned)."""
    from specdec.plan.planner import make_plan
    from specdec.tune.cache import entry_id
    from specdec.tune.store import DirStore, location

    plan = make_plan(HOST, AUTO)
    assert plan.k_auto and len(plan.tune_methods) == 2
    inv = tmp_path / "inv.py"
    inv.write_text("")
    monkeypatch.delenv("SPECDEC_TUNE_CACHE", raising=False)
    path = DirStore(location(inventory=inv)).path(entry_id(plan))  # beside the inventory
    path.parent.mkdir(parents=True)
    make, reason = TUNE_CASES.get(name, (lambda p: _entry(p), ""))
    if make == "symlink":
        path.symlink_to("/etc/passwd")
    else:
        got = make if isinstance(make, bytes) else make(plan)
        path.write_bytes(got if isinstance(got, bytes) else json.dumps(got).encode())
    monkeypatch.setenv("SPECDEC_REPORTS_DIR", str(tmp_path / "reports"))
    _patch_loader(monkeypatch, HOST, AUTO)
    assert main(["plan", str(inv)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out
    row = next(ln for ln in out.splitlines() if ln.startswith(HOST))
    notes = [ln for ln in out.splitlines() if f"tune cache entry {entry_id(plan)}" in ln]
    if name == "good":
        assert " 4 (tuned) " in row and notes and "ignored" not in notes[0]
        return
    assert " (auto) " in row and "(tuned)" not in row, row
    assert len(notes) == 1 and notes[0].endswith("; searching again"), notes
    assert f"tune cache entry {entry_id(plan)} ignored: " in notes[0] and reason in notes[0], \
        notes[0]
    assert TOKEN_SHAPED.search(out) is None and "\x1b" not in out
