"""The on-host client as the deploy runs it (`specdec.bench.remote`: upload, run, collect) against
the fake server, and its rules: the same JSON as the control node's client, tokens estimated
(so the gate holds) when the server sends no usage, since no tokenizer is beside the engine."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from fakeserver import TTFT_S, serve, serve_process

from specdec.bench import metrics, onhost, remote
from specdec.bench.client import BenchConfig, run_bench
from specdec.errors import BenchError
from specdec.gate.decide import decide
from specdec.gate.rounds import RoundBench

RB = RoundBench((1, 8), (4, 8), (0, 0), 12, 1, 4)
KEY = "sdk_" + "Test0key" * 5  # the fake server requires it, as a host's API proxy does


def local_run(command: str, timeout: float | None) -> tuple[bool, list[str]]:
    """`remote.Run` on this machine: the host is us."""
    p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout,
                       check=False)
    return p.returncode == 0, p.stdout.splitlines()


@pytest.fixture
def bench_root(tmp_path: Path) -> Any:
    """A root-owned 0755 directory the client (run as nobody) can read, as /var/lib/specdec;
    the key file root 0600 (the shell opens it as root, into the client's stdin)."""
    if os.geteuid() != 0:
        pytest.fail("the on-host client drops to nobody: run the tests as root")
    root = Path(tempfile.mkdtemp(prefix="sdbench", dir="/var/tmp"))
    root.chmod(0o755)
    key = tmp_path / "api_key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    yield root, str(key)
    shutil.rmtree(root, ignore_errors=True)


def on_host(url: str, where: Any, rb: RoundBench = RB) -> dict:
    root, key = where
    port = int(url.rsplit(":", 1)[1])
    b = remote.bundle(base=str(root / "bench"))
    return remote.run_on_host(local_run, b, port, "m", rb.argv(), 120, "host", key_file=key)


def test_on_host_result_has_the_control_clients_shape(bench_root: Any) -> None:
    with serve("ok", KEY) as (url, st):
        host = on_host(url, bench_root)
        again = on_host(url, bench_root)
        ctl = run_bench(BenchConfig(url=url, model="m", concurrency=RB.levels,
                                    requests=RB.requests, max_tokens=12, warmup=1,
                                    ramp_tokens=4, progress=False, api_key=KEY))
    assert st.unauthorized == 0  # both clients sent the key on every request
    assert host["runner"]["where"] == "host" and host["runner"]["uploaded"] is True
    assert again["runner"]["uploaded"] is False  # content-addressed: not uploaded again
    assert set(host) - {"runner"} == set(ctl)
    for c in ("1", "8"):
        h, k = host["concurrency"][c], ctl["concurrency"][c]
        assert set(h) == set(k)
        assert set(h["requests"][0]) == set(k["requests"][0])
        assert h["completed"] == k["completed"] == RB.requests[RB.levels.index(int(c))]
        assert h["total_output_tokens"] == k["total_output_tokens"]
        assert h["tokens_estimated"] == 0 and h["usage_missing"] == 0
    assert host["config"]["prompt_offset"] == ctl["config"]["prompt_offset"] == [0, 0]
    assert host["tokens"]["tokenizer_found"] is False


def test_on_host_without_usage_marks_tokens_estimated_and_the_gate_holds(bench_root: Any) -> None:
    with serve("nousage3", KEY) as (url, _):
        res = on_host(url, bench_root)
    lvl = res["concurrency"]["1"]
    assert lvl["tokens_estimated"] == lvl["completed"] == 4 and lvl["tokens_counted"] == 0
    assert {r["tokens_source"] for r in lvl["requests"]} == {"estimated"}
    assert any("tokens estimated" in w for w in res["warnings"])
    d = decide(res, res)
    assert d.decision == "inconclusive" and d.held and d.code == "tokens_estimated"


def test_on_host_ttft_is_from_the_request_on_the_wire(bench_root: Any) -> None:
    """The server answers TTFT_S after reading the request; at c=8 the on-host client's TTFT
    p50 stays near it (its own queueing is not counted)."""
    with serve_process("ttft", KEY) as url:
        res = on_host(url, bench_root, RoundBench((8,), (32,), (0,), 2, 0))
    lvl = res["concurrency"]["8"]
    p50 = statistics.median(r["ttft_ms"] for r in lvl["requests"])
    # counting the client's queue would add ~75 ms (32 requests in 4 waves of 50 ms);
    # half a TTFT of slack leaves room for a loaded machine's scheduling, not for that
    assert TTFT_S * 1000 <= p50 <= TTFT_S * 1000 * 1.5, p50
    assert all(r["client_queue_ms"] >= 0 for r in lvl["requests"])


def test_on_host_failure_is_one_line(bench_root: Any) -> None:
    root, key = bench_root
    with serve("ok", KEY) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        b = remote.bundle(base=str(root / "bench"))
        with pytest.raises(BenchError, match="is not served"):
            remote.run_on_host(local_run, b, port, "other-model", RB.argv(), 60, "host",
                               key_file=key)
        with pytest.raises(BenchError, match="401"):  # no key: the API refuses every request
            remote.run_on_host(local_run, b, port, "m", RB.argv(), 60, "host", key_file=None)


@pytest.mark.parametrize("tamper", ["group-writable", "other-owner", "content", "symlink"])
def test_a_tampered_client_is_not_run(bench_root: Any, tamper: str) -> None:
    """What runs as the benchmark is what was uploaded, in root's directories only: a client
    changed, made writable or handed to another user after the upload is refused."""
    root, key = bench_root
    b = remote.bundle(base=str(root / "bench"))
    for cmd in remote.upload_commands(b):
        assert local_run(cmd, 60)[0]
    script = Path(b.script_path)
    if tamper == "group-writable":
        Path(b.dir).chmod(0o775)
    elif tamper == "other-owner":
        os.chown(script, 65534, 65534)
    elif tamper == "content":
        script.write_bytes(script.read_bytes() + b"\n# evil\n")
    else:
        real = script.with_name("real.pyz")
        script.rename(real)
        script.symlink_to(real)
    with serve("ok", KEY) as (url, st):
        port = int(url.rsplit(":", 1)[1])
        ok, lines = local_run(remote.run_command(b, port, "m", RB.argv(), 60, "host", None, key),
                              90)
    assert not ok and not st.bodies
    with pytest.raises(BenchError, match="not running it"):
        remote.parse_output(ok, lines)


def test_run_command_modes() -> None:
    b = remote.bundle()
    cmd = remote.run_command(b, 8000, "m", ["--warmup", "0"], 30, "image", "img:1")
    assert "docker run --rm -i --network host --user 65534:65534 --security-opt " \
           "no-new-privileges --cap-drop ALL --entrypoint python3 -v " in cmd
    assert cmd.endswith("--api-key-file - < /etc/specdec/api_key 2>&1")
    assert "http://127.0.0.1:8000" in cmd and " img:1 " in cmd
    with pytest.raises(BenchError, match="no engine image"):
        remote.run_command(b, 8000, "m", [], 30, "image", None)
    with pytest.raises(BenchError, match="does not run on the host"):
        remote.run_command(b, 8000, "m", [], 30, "control")
    assert f"-I {b.script_path} http://" in cmd
    host = remote.run_command(b, 8000, "m", [], 30, "host")
    assert "setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs python3 -I " \
           f"{b.script_path} http://" in host and "< /etc/specdec/api_key" in host


def test_pyz_is_deterministic() -> None:
    """The same package gives the same zipapp, byte for byte: the same digest, no upload."""
    a, b = remote.pyz(), remote.pyz()
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()
    assert a.startswith(b"#!/usr/bin/env python3\n")
    bun = remote.bundle()
    assert isinstance(bun.script, bytes) and bun.script == a
    assert bun.script_path.endswith("/onhost.pyz") and bun.digest == remote.bundle().digest
    with zipfile.ZipFile(io.BytesIO(a)) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    modules = sorted(f"onhost/{f.name}" for f in resources.files("specdec.bench.onhost").iterdir()
                     if f.name.endswith(".py"))
    assert names == sorted(names) == sorted(["__main__.py", *modules])
    assert {(i.date_time, i.external_attr >> 16, i.compress_type) for i in infos} == {
        ((1980, 1, 1, 0, 0, 0), 0o100644, zipfile.ZIP_STORED)}


def test_onhost_modules_import_the_stdlib_only_and_parse_as_python38() -> None:
    for f in resources.files("specdec.bench.onhost").iterdir():
        if not f.name.endswith(".py"):
            continue
        src = f.read_text()
        assert len(src.splitlines()) < 500, f.name
        tree = ast.parse(src, f.name, feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = {(node.module or "").split(".")[0]}
            else:
                continue
            assert tops <= set(sys.stdlib_module_names), (f.name, tops)


def test_pyz_runs_without_site_packages(tmp_path: Path) -> None:
    """``-I -S``: no site-packages, so no specdec and nothing else outside the stdlib."""
    pyz = tmp_path / "onhost.pyz"
    pyz.write_bytes(remote.pyz())
    p = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--help"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=60, check=False)
    assert p.returncode == 0 and p.stdout.startswith("usage: specdec-bench"), p.stderr
    p = subprocess.run([sys.executable, "-I", "-S", str(pyz), "http://x:1", "--prompts",
                        str(tmp_path / "none.json")], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60, check=False)
    assert p.returncode == 2 and p.stderr.startswith("specdec-bench: error: --prompts "), p.stderr


def _python38() -> str:
    # on PATH, else a pyenv-installed 3.8 (pyenv's shim needs PYENV_VERSION to expose it)
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found = [shutil.which("python3.8"),
             *sorted(str(p) for p in (root / "versions").glob("3.8*/bin/python3.8"))]
    for exe in filter(None, found):
        if subprocess.run([exe, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                          capture_output=True, check=False).returncode == 0:
            return exe
    pytest.skip("no python3.8 on this machine")


def test_pyz_runs_on_python38(tmp_path: Path) -> None:
    """The oldest python3 a host may have (JetPack 5) runs the client against a server."""
    exe = _python38()
    b = remote.bundle(base=str(tmp_path))
    (tmp_path / "onhost.pyz").write_bytes(b.script)
    (tmp_path / "prompts.json").write_text(b.prompts)
    with serve("vllm") as (url, _):
        p = subprocess.run([exe, "-I", "-S", "onhost.pyz", url, "--model", "m", "--prompts",
                            "prompts.json", *RB.argv(), "--json", "-"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    res = remote.parse_output(True, p.stdout.splitlines())
    assert res["concurrency"]["8"]["completed"] == 8 and res["spec_decode"] is not None
    assert json.loads(json.dumps(res)) == res


def test_parse_output() -> None:
    good = {"concurrency": {"1": {"throughput_tok_s": 10.0, "requests": []}}}
    assert remote.parse_output(True, ["noise", onhost.MARKER + json.dumps(good)]) == good
    with pytest.raises(BenchError, match="^boom$"):
        remote.parse_output(False, ["specdec-bench: error: boom"])
    with pytest.raises(BenchError, match="printed no result: last"):
        remote.parse_output(False, ["last"])


@pytest.mark.parametrize(("doc", "why"), [
    ('{"a": 1}', "missing field 'concurrency'"),
    ('{"concurrency": {"1": {"throughput_tok_s": NaN}}}', "NaN is not a finite number"),
    ('{"concurrency": {"1": {"throughput_tok_s": Infinity}}}', "not a finite number"),
    ('{"concurrency": {"1": {"throughput_tok_s": "fast"}}}', "must be a number"),
    ('{"concurrency": {"1": {}}, "model": "m\\u001b[2J"}', "control character"),
    ('{"concurrency": {"1": {}}, "note": "hf_' + "A" * 30 + '"}', "token-shaped"),
    ('{"concurrency": {"1": {"requests": "all"}}}', "must be a list of objects"),
    ('{"concurrency": ' + '[' * 40 + ']' * 40 + '}', "nested deeper"),
])
def test_a_hosts_result_is_input(doc: str, why: str) -> None:
    """What a host prints as its benchmark result is checked as host data is: a host (or
    whoever controls it) cannot feed the gate NaN, a string, a terminal escape or a token."""
    with pytest.raises(BenchError, match=why):
        remote.parse_output(True, [onhost.MARKER + doc])


PROM = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0"} 30
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 18
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 6
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 3
"""


def test_one_counter_implementation_for_both_clients() -> None:
    """The control node runs the on-host core's counters (one definition), its errors raised
    as the control node's `BenchError` (exit code and all)."""
    assert metrics.Counters is onhost.Counters
    assert metrics.parse_vllm.__wrapped__ is onhost.parse_vllm  # type: ignore[attr-defined]
    assert metrics.diff_counters is onhost.diff_counters
    zero = PROM.replace(" 10\n", " 0\n").replace(" 30\n", " 0\n").replace(" 18\n", " 0\n")
    zero = "\n".join(ln.rsplit(" ", 1)[0] + " 0" if "per_pos" in ln else ln
                     for ln in zero.splitlines())
    a = metrics.spec_delta(metrics.parse_vllm(zero), metrics.parse_vllm(PROM))
    assert a is not None and a["acceptance_length"] == pytest.approx(2.8)
    with pytest.raises(BenchError, match="backwards") as caught:
        metrics.spec_delta(metrics.parse_vllm(PROM), metrics.parse_vllm(zero))
    assert not isinstance(caught.value, onhost.BenchError)
