"""The lab's Hub (`specdec_lab.hub`) as a service of a lab instance: started by ``lab up`` on the
control side, stopped by ``lab down``, asked for its counters by ``specdec lab hub``.

It listens on every lab host's gateway (the control node's end of the host's link, ``10.X.n.1``),
port `HUB_PORT` for the Hub and `CDN_PORT` for its CDN: each host reaches it at its own
gateway, and nothing outside the lab does. Over HTTPS, as the Hub: its certificate (for every
gateway) comes from the instance's own CA (`ca_file`, ``<instance>/hub/ca/``), which the lab's
inventory gives every host as ``specdec_hub_ca_file`` (as an operator gives a private Hub's).
It accepts the tokens the lab's hosts are given (``$HF_TOKEN`` at ``lab up``, else the
instance's stand-in token), stored as sha256 digests only. Its files are under
``<instance>/hub/``: ``tokens``, ``requests.jsonl`` (method, path, status, bytes; no query, no
header) and ``hub.log``.

``SPECDEC_LAB_HUB_SCALE`` (default 1e-3) sizes the served weights against the real ones.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specdec.config import pki
from specdec_lab.errors import LabError
from specdec_lab.hub import DEFAULT_SCALE
from specdec_lab.instance import Instance
from specdec_lab.spec import LabHost
from specdec_lab.system import Proc, cmdline, proc_alive, start_time, stop_process

__all__ = ["CDN_PORT", "HUB_PORT", "SCALE_ENV", "ca_file", "check_record", "counters",
           "control", "endpoint", "start", "stop", "summary"]

HUB_PORT = 8090
CDN_PORT = 8091
SCALE_ENV = "SPECDEC_LAB_HUB_SCALE"
_PKG_ROOT = Path(__file__).resolve().parents[1]  # the directory holding specdec_lab


def hub_dir(inst: Instance) -> Path:
    return inst.dir / "hub"


def ca_file(inst: Instance) -> Path:
    """The CA of the instance's Hub certificate (made by `start`)."""
    return hub_dir(inst) / "ca" / "ca.crt"


def endpoint(gateway: str) -> str:
    """A lab host's Hub: ``HF_ENDPOINT`` for downloads straight from it."""
    return f"https://{gateway}:{HUB_PORT}"


def _certificate(inst: Instance, binds: list[str]) -> tuple[Path, Path]:
    """The Hub's certificate and key for every gateway, from the instance's CA (made anew at
    each start). Each address is also a dNSName: Debian's nginx 1.22 checks an upstream's
    name with ``X509_check_host`` even when it is an IP address (ngx_event_openssl.c
    ``ngx_ssl_check_host``; "upstream SSL certificate does not match" otherwise), and the
    site mirror's upstream here is the Hub at its gateway address."""
    ca = pki.authority(hub_dir(inst) / "ca", f"lab {inst.name} hub")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [n for b in binds for n in (
        x509.IPAddress(ipaddress.ip_address(b)), x509.DNSName(b))]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lab hub")]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca.key, hashes.SHA256()))
    crt, key_path = ca.directory / "hub.crt", ca.directory / "hub.key"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt, key_path


def scale(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    text = env.get(SCALE_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_SCALE
    except ValueError:
        value = -1.0
    if not 1e-7 <= value <= 1.0:
        raise LabError(f"{SCALE_ENV}={text!r}: must be a number in 1e-7..1 (served bytes per "
                       "byte of real weights)")
    return value


def _argv(inst: Instance, binds: list[str], factor: float) -> list[str]:
    d = hub_dir(inst)
    cert, key = _certificate(inst, binds)
    return [sys.executable, "-m", "specdec_lab.hub", "--state-dir", str(d),
            *[a for b in binds for a in ("--bind", b)], "--port", str(HUB_PORT),
            "--cdn-port", str(CDN_PORT), "--tokens", str(d / "tokens"), "--scale", repr(factor),
            "--log", str(d / "requests.jsonl"), "--cert", str(cert), "--key", str(key)]


def start(inst: Instance, hosts: list[LabHost], tokens: list[str]) -> dict[str, Any]:
    """Start the instance's Hub on every host's gateway; returns its state record."""
    d = hub_dir(inst)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "tokens", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.writelines(hashlib.sha256(t.encode()).hexdigest() + "\n" for t in tokens if t)
    (d / "requests.jsonl").write_text("")  # this run's requests only
    binds = [h.gateway for h in hosts]
    factor = scale()
    env = {**os.environ, "PYTHONPATH": str(_PKG_ROOT), "PYTHONUNBUFFERED": "1"}
    with open(d / "hub.log", "ab") as log:
        popen = subprocess.Popen(_argv(inst, binds, factor), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    rec = {"proc": Proc(popen.pid).to_dict(), "binds": binds, "port": HUB_PORT,
           "cdn_port": CDN_PORT, "scale": factor, "ca": str(ca_file(inst))}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            tail = (d / "hub.log").read_text(errors="replace").strip()[-300:]
            raise LabError(f"the lab's Hub exited at start: {tail}")
        try:
            counters(rec)
            return rec
        except LabError:
            time.sleep(0.2)
    raise LabError(f"the lab's Hub did not answer on {binds[0]}:{HUB_PORT} (see {d}/hub.log)")


def check_record(inst: Instance, rec: Any) -> Proc | None:
    """The Hub process of a state record, if it is the one the lab started (else None: left
    alone, like any refused entry)."""
    if not isinstance(rec, dict) or not isinstance(rec.get("proc"), dict):
        return None
    pid, begun = rec["proc"].get("pid"), rec["proc"].get("start")
    if type(pid) is not int or pid <= 1 or type(begun) is not int:
        return None
    if start_time(pid) == begun:
        argv = cmdline(pid)
        if "specdec_lab.hub" not in argv or str(hub_dir(inst)) not in argv:
            return None
    return Proc(pid, begun)


def stop(inst: Instance, state: dict[str, Any]) -> str | None:
    """Stop the instance's Hub; a line when it could not be (else None)."""
    rec = state.get("hub")
    if rec is None:
        return None
    p = check_record(inst, rec)
    if p is None:
        return f"refused hub={str(rec)[:80]}: not the Hub process this lab started"
    stop_process(p, grace=5)
    return f"hub process {p.pid} still running" if proc_alive(p) else None


def control(rec: dict[str, Any], path: str, doc: dict[str, Any] | None = None) -> Any:
    """GET (or POST ``doc`` to) one of the Hub's control endpoints, from the control node."""
    binds = rec.get("binds") or []
    if not binds:
        raise LabError("the lab's Hub is not running (no address recorded)")
    url = f"https://{binds[0]}:{rec.get('port', HUB_PORT)}{path}"
    data = json.dumps(doc).encode() if doc is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if doc is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        ctx = ssl.create_default_context(cafile=rec.get("ca"))
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:  # noqa: S310
            return json.loads(resp.read())
    except (OSError, ValueError) as exc:
        raise LabError(f"the lab's Hub at {url}: {exc}") from None


def counters(rec: dict[str, Any]) -> dict[str, Any]:
    got = control(rec, "/_lab/counters")
    if not isinstance(got, dict):
        raise LabError("the lab's Hub answered its counters with something else")
    return got



def summary(snap: dict[str, Any]) -> list[str]:
    """Counters as lines for a person: totals, then per revision and per client."""
    mib = 1 << 20
    kinds = ", ".join(f"{k} {v['requests']} req / {v['bytes'] / mib:.1f} MiB"
                      for k, v in sorted(snap.get("by_kind", {}).items()))
    lines = [f"hub: {snap.get('requests', 0)} requests, {snap.get('bytes', 0) / mib:.1f} MiB "
             f"served ({kinds or 'nothing yet'})"]
    for rev, sent in sorted(snap.get("by_revision", {}).items()):
        size = snap.get("revision_size", {}).get(rev) or 0
        copies = sent / size if size else 0.0
        lines.append(f"  {rev[:60]:<60} {sent / mib:8.2f} MiB = {copies:.2f} cop"
                     f"{'y' if round(copies, 2) == 1 else 'ies'}")
    for client, sent in sorted(snap.get("by_client", {}).items()):
        lines.append(f"  client {client:<15} {sent / mib:8.2f} MiB")
    return lines
