"""The benchmark beside the engine: upload the on-host client, run it on the host, collect its JSON.

Pure command builders and parsers (no pyinfra; `roles/verify.py` runs them through the host's
connection). Where the client runs (``specdec_bench_mode``):

* ``host`` (default): the host's own ``python3`` (3.8+; JetPack 5/6 and DGX OS ship one, and a
  native engine is itself Python) against ``http://127.0.0.1:PORT``: no link between client and
  engine, and no container to start (Docker's vfs or a Jetson's nvidia runtime make that cost
  seconds per arm);
* ``image``: inside the engine's own image (``docker run --rm --network host``), for a docker
  host without python3: the image is known to carry one (every engine is Python);
* ``control``: the control node's client over the network (`specdec.bench.client`), as before.

Files: ``/var/lib/specdec/bench/<digest>/onhost.pyz`` (the client, `specdec.bench.onhost`, as a
zipapp: `pyz`) and ``prompts.json`` (the package's built-in prompt set), where ``<digest>`` is
the first 16 hex digits of the sha256 of both: content-addressed, so an upload is skipped when
both files are there with their sha256, and a changed client goes to a new directory. Nothing
else is written or deleted on the host. The directories and files are root's and writable by
root only, which the run checks again, with both files' sha256, right before it runs them
(`verified`). The client runs as ``nobody`` (``setpriv``, no new privileges), against the API
proxy on loopback (HTTPS, verified against the fleet's CA, ``/etc/specdec/ca/api.crt``; with
the operator's own certificate, whose names need not include 127.0.0.1, unverified on
loopback only: `tls_mode`), with the API key on its standard input (opened by root from the
root-only key file: never an argument); it prints its JSON on stdout
(`specdec.bench.onhost.cli.MARKER`); the HF token is never involved.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import shlex
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from specdec.bench.onhost.cli import MARKER
from specdec.bench.prompts import PromptSet, builtin_prompts
from specdec.config.readback import check_tree, parse_json
from specdec.config.settings import BENCH_MODES, DEFAULT_BENCH_MODE
from specdec.errors import BenchError, GateError
from specdec.gate.inputs import check_result
from specdec.host.layout import API_CA_FILE

__all__ = [
    "BENCH_DIR",
    "DEFAULT_MODE",
    "MODES",
    "Bundle",
    "bundle",
    "parse_output",
    "prompts_json",
    "pyz",
    "run_command",
    "run_on_host",
    "tls_mode",
    "upload_commands",
]

MODES, DEFAULT_MODE = BENCH_MODES, DEFAULT_BENCH_MODE
BENCH_DIR = "/var/lib/specdec/bench"
NOBODY = "65534"  # the client's user and group (Debian / Ubuntu: nobody, nogroup)
KEY_FILE = "/etc/specdec/api_key"  # specdec.host.layout.API_KEY_FILE (read by root, into stdin)
_CHUNK = 48 * 1024  # base64 characters per upload command (a shell argument is capped at 128K)
Run = Callable[[str, float | None], tuple[bool, list[str]]]
_PACKAGE = "specdec.bench.onhost"
# the zipapp's entry: the package is ``onhost/`` beside it (its own ``__main__`` is for ``-m``)
_ZIP_MAIN = b"import sys\n\nfrom onhost.cli import main\n\nsys.exit(main())\n"


@functools.cache  # the package does not change while a deploy runs: built once
def pyz() -> bytes:
    """The on-host client as a zipapp: ``onhost/*.py`` (the package's modules) and a
    ``__main__.py`` that runs its command line, behind a ``#!/usr/bin/env python3`` line; run
    as ``python3 -I onhost.pyz ...``. Deterministic (sorted entries, stored, 1980-01-01 time
    stamps, mode 0644): the same package gives the same bytes, so the same digest (no upload)."""
    pkg = resources.files(_PACKAGE)
    files = {f"onhost/{f.name}": f.read_bytes() for f in pkg.iterdir()
             if f.name.endswith(".py") and f.is_file()}
    files["__main__.py"] = _ZIP_MAIN
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system, info.external_attr = 3, 0o100644 << 16  # unix, -rw-r--r--
            zf.writestr(info, files[name])
    return buf.getvalue()


def prompts_json(pset: PromptSet) -> str:
    """The prompt set as the on-host client reads it (same ids, categories, texts, source)."""
    def items(ps: Sequence[Any]) -> list[dict[str, str]]:
        return [{"id": p.id, "category": p.category, "prompt": p.text} for p in ps]

    return json.dumps({"source": pset.source, "measured": items(pset.measured),
                       "warmup": items(pset.warmup)}, indent=1) + "\n"


@dataclass(frozen=True)
class Bundle:
    script: bytes  # the client's zipapp (`pyz`)
    prompts: str
    base: str = BENCH_DIR  # benchmarks put it elsewhere

    @staticmethod
    def sha(data: bytes | str) -> str:
        return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()

    @property
    def digest(self) -> str:
        return hashlib.sha256((self.sha(self.script) + self.sha(self.prompts)).encode()
                              ).hexdigest()[:16]

    @property
    def dir(self) -> str:
        return f"{self.base}/{self.digest}"

    @property
    def script_path(self) -> str:
        return f"{self.dir}/onhost.pyz"

    @property
    def prompts_path(self) -> str:
        return f"{self.dir}/prompts.json"


def bundle(pset: PromptSet | None = None, base: str = BENCH_DIR) -> Bundle:
    return Bundle(pyz(), prompts_json(pset or builtin_prompts()), base)


def upload_commands(b: Bundle) -> list[str]:
    """Shell commands that put the bundle in place, idempotently: each is skipped when both
    files already carry their sha256 (the first prints ``present`` then). Files are written
    under a temporary name in their directory, checked, then renamed."""
    q = shlex.quote
    check = (f"printf '%s  %s\\n' {b.sha(b.script)} {q(b.script_path)} {b.sha(b.prompts)} "
             f"{q(b.prompts_path)} | sha256sum -c --status 2>/dev/null")
    cmds = [f"{check} && echo present || install -d -m 0755 {q(b.dir)}"]
    for name, raw, path in (("onhost.pyz", b.script, b.script_path),
                            ("prompts.json", b.prompts.encode(), b.prompts_path)):
        tmp = q(f"{b.dir}/.{name}.b64")
        data = base64.b64encode(raw).decode()
        parts = [data[i:i + _CHUNK] for i in range(0, len(data), _CHUNK)]
        for i, part in enumerate(parts):
            cmds.append(f"{check} || printf '%s' {q(part)} {'>' if i == 0 else '>>'} {tmp}")
        cmds.append(f"{check} || {{ base64 -d {tmp} > {q(path + '.tmp')} && "
                    f"echo '{b.sha(raw)}  {path}.tmp' | sha256sum -c --status && "
                    f"chmod 0644 {q(path + '.tmp')} && mv -f {q(path + '.tmp')} {q(path)} && "
                    f"rm -f {tmp}; }}")
    cmds.append(check)
    return cmds


def verified(b: Bundle) -> str:
    """A check that fails unless the bench directory, the bundle's and both files are root's,
    writable by root only, not symbolic links, and carry their sha256: what runs is what was
    uploaded (the state directory above them is root's 0755, `specdec.roles.docker_access`)."""
    q = shlex.quote
    paths = " ".join(q(p) for p in [b.base, b.dir, b.script_path, b.prompts_path])
    sums = (f"printf '%s  %s\\n' {b.sha(b.script)} {q(b.script_path)} {b.sha(b.prompts)} "
            f"{q(b.prompts_path)} | sha256sum -c --status")
    return (f"for p in {paths}; do if [ -L \"$p\" ] || [ ! -e \"$p\" ]; then bad=$p; break; fi; "
            "set -- $(stat -c '%u %a' \"$p\"); if [ \"$1\" != 0 ] || "
            "[ $(( 0$2 & 022 )) != 0 ]; then bad=$p; break; fi; done; "
            "if [ -n \"${bad:-}\" ]; then echo \"specdec-bench: error: $bad is not root's or is "
            "writable by others: not running it\"; exit 3; fi; "
            f"{sums} || {{ echo 'specdec-bench: error: the benchmark client on the host does "
            "not match what was uploaded: not running it'; exit 3; }")


def tls_mode(tls: bool, fleet_ca: bool) -> str | None:
    """How the on-host client speaks to the API: None (plain HTTP), ``ca`` (HTTPS verified
    against the fleet's CA on the host), ``loopback`` (the operator's certificate: HTTPS
    unverified, to 127.0.0.1 only)."""
    return None if not tls else "ca" if fleet_ca else "loopback"


def _tls_args(tls: str | None) -> tuple[str, list[str]]:
    if tls is None:
        return "http", []
    return "https", (["--ca-file", API_CA_FILE] if tls == "ca" else ["--insecure-loopback"])


def run_command(b: Bundle, port: int, model: str, args: Sequence[str], timeout_s: float,
                mode: str = DEFAULT_MODE, image: str | None = None,
                key_file: str | None = KEY_FILE, tls: str | None = None) -> str:
    """Run the client beside the engine (``mode`` host or image) as nobody, against the API on
    loopback (``tls``: `tls_mode`), the key on its stdin; stdout carries its result."""
    q = shlex.quote
    deadline = max(1, int(timeout_s))
    scheme, tls_args = _tls_args(tls)
    client = [b.script_path, f"{scheme}://127.0.0.1:{port}", "--model", model, "--prompts",
              b.prompts_path, *args, *tls_args, "--deadline", str(deadline), "--json", "-"]
    key = ["--api-key-file", "-"] if key_file else []
    stdin = f" < {q(key_file)}" if key_file else " < /dev/null"
    if mode == "image":
        if not image:
            raise BenchError("specdec_bench_mode=image: the host runs no engine image")
        vols = ["-v", f"{b.dir}:{b.dir}:ro"]
        if tls == "ca":
            vols += ["-v", f"{API_CA_FILE}:{API_CA_FILE}:ro"]
        return verified(b) + "; " + " ".join(q(x) for x in [
            "docker", "run", "--rm", "-i", "--network", "host", "--user", f"{NOBODY}:{NOBODY}",
            "--security-opt", "no-new-privileges", "--cap-drop", "ALL", "--entrypoint",
            "python3", *vols, image, "-I", *client, *key]) + stdin + " 2>&1"
    if mode != "host":
        raise BenchError(f"bench mode {mode!r} does not run on the host")
    return ("command -v python3 >/dev/null || { echo 'specdec-bench: error: no python3 on the "
            "host (set specdec_bench_mode: image or control)'; exit 3; }; "
            + verified(b) + "; "
            f"timeout -k 10 {deadline + 30} setpriv --reuid={NOBODY} --regid={NOBODY} "
            "--clear-groups --no-new-privs python3 -I "
            + " ".join(q(x) for x in [*client, *key]) + stdin + " 2>&1")


def parse_output(ok: bool, lines: Sequence[str]) -> dict[str, Any]:
    """The client's JSON from its output, or `BenchError` with its one-line error."""
    for line in lines:
        if line.startswith(MARKER):
            try:  # read back from the host: checked as input (no NaN, one-line strings, ...)
                doc = check_tree(parse_json(line[len(MARKER):], "result"), "result")
            except ValueError as exc:
                raise BenchError(f"the on-host benchmark printed a result specdec refuses: "
                                 f"{exc}") from None
            if isinstance(doc, dict):
                try:
                    return check_result(doc, "the on-host benchmark's result")
                except GateError as exc:
                    raise BenchError(str(exc)) from None
    err = [ln for ln in lines if ln.startswith("specdec-bench: error: ")]
    if err:
        raise BenchError(err[-1].removeprefix("specdec-bench: error: "))
    tail = [ln.strip() for ln in lines if ln.strip()]
    raise BenchError("the on-host benchmark printed no result"
                     + (f": {tail[-1][:160]}" if tail else f" ({'ok' if ok else 'failed'})"))


def run_on_host(run: Run, b: Bundle, port: int, model: str, args: Sequence[str],
                timeout_s: float, mode: str = DEFAULT_MODE,
                image: str | None = None, key_file: str | None = KEY_FILE,
                tls: str | None = None) -> dict[str, Any]:
    """Upload (when needed), run, collect. ``run(command, timeout)`` runs a shell command on
    the host as root and returns (success, stdout lines)."""
    uploaded = True
    for cmd in upload_commands(b):
        ok, out = run(cmd, 120)
        if "present" in out:
            uploaded = False
        if not ok:
            raise BenchError(f"could not upload the benchmark client to {b.dir}")
    ok, lines = run(run_command(b, port, model, args, timeout_s, mode, image, key_file, tls),
                    timeout_s + 60)
    doc = parse_output(ok, lines)
    doc["runner"] = {"where": mode, "client": b.script_path, "uploaded": uploaded}
    return doc
