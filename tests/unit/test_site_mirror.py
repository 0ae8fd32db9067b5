"""The site mirror's nginx (specdec/render/mirror.py, Debian's nginx) in front of the lab's Hub,
with the real huggingface_hub clients over TLS (the site CA's certificate; the clients trust
that CA only): a fan-out costs the Hub one copy per revision, gated repos stay gated (cached
or not), the token never reaches the mirror's disk or logs, no token is sent for an ungated
repo, and a file the mirror's cache changed is caught by specdec's check against the Hub's
hash (`specdec.host.prefetch.VERIFY`) although every client accepts it."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specdec.config import pki
from specdec.host.prefetch import VERIFY
from specdec.plan.sites import SiteMirror
from specdec.render.mirror import nginx_conf
from specdec_lab.emulator.hf import revision_of
from specdec_lab.hubrepo import WEIGHTS, hub_repo
from tests.unit.test_lab_hub import CLIENTS, LLAMA1, QWEN, TOKEN, LabHub, download, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_main(prefix: Path, mirror_conf: Path) -> str:
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "".join(f"    {k}_temp_path {prefix}/tmp/{k};\n"
                   for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}pid {prefix}/nginx.pid;\nerror_log {prefix}/log/error.log;\ndaemon off;\n"
            f"events {{}}\nhttp {{\n{temp}    access_log off;\n    include {mirror_conf};\n}}\n")


class Mirror:
    def __init__(self, tmp: Path, hub: LabHub) -> None:
        if not Path(NGINX).exists():
            pytest.fail("nginx is not installed ('make setup' installs it)")
        self.prefix = tmp / "nginx"
        for sub in ("cache", "log", "tmp"):
            (self.prefix / sub).mkdir(parents=True)
        self.port, self.lfs = free_port(), free_port()
        m = SiteMirror("s1", "mirror", "127.0.0.1", hub_upstream=hub.url,
                       cdn_hosts=(f"127.0.0.1:{hub.cdn}",))
        # the site's CA and the mirror's certificate, as the deploy makes them
        authority = pki.authority(tmp / "pki" / "_sites" / "s1", "site s1")
        got = pki.issue(authority, "mirror", list(m.names()), server=True)
        self.ca = tmp / "site-ca.crt"
        self.ca.write_bytes(got.ca_pem)
        cert, key = self.prefix / "mirror.crt", self.prefix / "mirror.key"
        cert.write_bytes(got.cert_pem)
        key.write_bytes(got.key_pem)
        conf = self.prefix / "specdec-site-mirror.conf"
        conf.write_text(nginx_conf(m, cache_dir=str(self.prefix / "cache"),
                                   log_dir=str(self.prefix / "log"), hub_port=self.port,
                                   lfs_port=self.lfs, cert=(str(cert), str(key))))
        main = self.prefix / "nginx.conf"
        main.write_text(nginx_main(self.prefix, conf))
        test = subprocess.run([NGINX, "-t", "-q", "-c", str(main), "-p", str(self.prefix)],
                              capture_output=True, text=True, check=False)
        assert test.returncode == 0, test.stderr
        self.proc = subprocess.Popen([NGINX, "-c", str(main), "-p", str(self.prefix)],
                                     stderr=subprocess.PIPE)
        self.context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.get("/nothing-here")
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.05)
        self.stop()  # the nginx this test started, by its own handle
        pytest.fail("nginx did not start")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def get(self, path: str, headers: dict[str, str] | None = None, port: int | None = None
            ) -> bytes:
        url = f"https://127.0.0.1:{port or self.port}{path}"
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=10, context=self.context) as r:
            return bytes(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[LabHub, Mirror]]:
    hub = LabHub(tmp_path)
    try:
        mirror = Mirror(tmp_path, hub)
        yield hub, mirror
        mirror.stop()
    finally:
        hub.close()


def test_a_fan_out_costs_the_hub_one_copy_per_revision(site: tuple[LabHub, Mirror],
                                                       tmp_path: Path) -> None:
    hub, mirror = site
    # every client release the images carry, then six hosts at once; none sends a token for
    # an ungated repo (as specdec runs them: HF_TOKEN_PATH=/dev/null)
    for i, (version, cli) in enumerate(CLIENTS):
        run = download(version, cli, QWEN, tmp_path / f"seq{i}", mirror.url, ca=mirror.ca)
        assert run.returncode == 0, run.stderr[-800:]
    assert hub.hub.counters.snapshot()["with_token"] == 0
    with ThreadPoolExecutor(6) as pool:
        runs = list(pool.map(lambda i: download("2.4.0", "hf", LLAMA1, tmp_path / f"par{i}",
                                                mirror.url, TOKEN, mirror.ca), range(6)))
    assert all(r.returncode == 0 for r in runs), [r.stderr[-300:] for r in runs]
    counters = hub.hub.counters.snapshot()
    assert counters["copies"] == {f"{QWEN}@{revision_of(QWEN)}": 1.0,
                                  f"{LLAMA1}@{revision_of(LLAMA1)}": 1.0}
    for i in range(6):  # each host got the whole revision, and each file is the Hub's
        snap = tmp_path / f"par{i}" / "hf" / "hub" / "models--meta-llama--Llama-3.2-1B-Instruct"
        repo = hub_repo(LLAMA1, hub.hub.scale)
        assert repo is not None
        assert all((snap / "snapshots" / repo.revision / f.path).stat().st_size == f.size
                   for f in repo.files)
        assert verify(snap / "snapshots" / repo.revision).returncode == 0
    log = (mirror.prefix / "log" / "specdec-mirror-lfs.access.log").read_text()
    assert " HIT " in log


@pytest.mark.parametrize(("version", "cli"), CLIENTS)
def test_the_clients_trust_the_site_ca_only(site: tuple[LabHub, Mirror], tmp_path: Path,
                                            version: str, cli: str) -> None:
    _, mirror = site
    # without the site's CA (certifi's bundle, or the system's): no connection at all
    run = download(version, cli, QWEN, tmp_path / "n", mirror.url)
    assert run.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in run.stdout + run.stderr, \
        (run.stdout + run.stderr)[-600:]
    plain = download(version, cli, QWEN, tmp_path / "p", mirror.url.replace("https", "http"),
                     ca=mirror.ca)
    assert plain.returncode != 0  # the mirror speaks no plain HTTP


def verify(snap: Path, where: str = "cache") -> subprocess.CompletedProcess[str]:
    """specdec's check of a snapshot against the Hub's hashes, as the deploy runs it."""
    rec = snap.parent.parent / "record"
    files = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*")
                   if not p.is_dir() and ".cache" not in p.parts)
    rec.write_text("rev\n" + "".join(f"{f}\n" for f in files))
    script = f"snap={shlex.quote(str(snap))}; rec={shlex.quote(str(rec))}; set -- {where}; " \
        + VERIFY
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def _poison(cache: Path, marker: bytes) -> Path:
    """Flip the last byte of the cache entry whose key has ``marker`` (a changed body: what a
    compromised or corrupted mirror serves)."""
    entry = next(p for p in cache.rglob("*") if p.is_file() and marker in p.read_bytes()[:4096])
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0x01
    entry.write_bytes(bytes(data))
    return entry


@pytest.mark.parametrize(("version", "cli"), CLIENTS)
def test_a_poisoned_mirror_cache_is_caught_against_the_hubs_hash(
        site: tuple[LabHub, Mirror], tmp_path: Path, version: str, cli: str) -> None:
    hub, mirror = site
    assert download("2.4.0", "hf", QWEN, tmp_path / "warm", mirror.url, ca=mirror.ca
                    ).returncode == 0
    repo = hub_repo(QWEN, hub.hub.scale)
    assert repo is not None
    _poison(mirror.prefix / "cache" / "lfs", b"bytes=0-")  # the weights' first slice
    _poison(mirror.prefix / "cache" / "hub", b"/config.json\n")  # a small file, by commit
    run = download(version, cli, QWEN, tmp_path / "got", mirror.url, ca=mirror.ca)
    assert run.returncode == 0, run.stderr[-600:]  # the client takes what it is given
    snap = tmp_path / "got" / "hf" / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / \
        repo.revision
    got = verify(snap)
    assert got.returncode == 1 and "does not match the Hub's hash" in got.stderr, got.stderr
    bad = got.stderr.split("specdec: ", 1)[1].split(" ", 1)[0]
    assert bad in ("config.json", WEIGHTS) and not (snap / bad).exists()  # deleted, not used
    assert verify(snap).returncode in (0, 1)  # the rest: the other poisoned file, or none


def test_gated_repos_stay_gated_through_the_mirror(site: tuple[LabHub, Mirror],
                                                   tmp_path: Path) -> None:
    hub, mirror = site
    ok = download("2.4.0", "hf", LLAMA1, tmp_path / "ok", mirror.url, TOKEN, mirror.ca)
    assert ok.returncode == 0, ok.stderr[-800:]
    for version, cli in CLIENTS:  # cached now, and still refused without the token
        denied = download(version, cli, LLAMA1, tmp_path / f"no-{version}", mirror.url,
                          ca=mirror.ca)
        assert denied.returncode != 0, (version, denied.stdout[-300:])
    # a cached file asked for by commit, without a token: the Hub says no, so does the mirror
    path = f"/{LLAMA1}/resolve/{revision_of(LLAMA1)}/config.json"
    with pytest.raises(urllib.error.HTTPError) as got:
        mirror.get(path)
    assert got.value.code == 401 and got.value.headers["X-Error-Code"] == "GatedRepo"
    assert mirror.get(path, {"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as got:
        mirror.get(path, {"Authorization": "Bearer hf_" + "y" * 34})
    assert got.value.code == 401


def test_the_token_never_reaches_the_mirrors_disk_or_logs(site: tuple[LabHub, Mirror],
                                                          tmp_path: Path) -> None:
    hub, mirror = site
    for i in range(2):
        run = download("0.36.2", "hf", LLAMA1, tmp_path / f"t{i}", mirror.url, TOKEN, mirror.ca)
        assert run.returncode == 0, run.stderr[-800:]
    # it did pass through, as the client's Authorization, to the Hub
    assert hub.hub.counters.snapshot()["with_token"] > 0
    leaked = subprocess.run(["grep", "-rl", "--binary-files=text", "hf_MARKER",
                             str(mirror.prefix)], capture_output=True, text=True, check=False)
    assert leaked.stdout == "", leaked.stdout
    assert any((mirror.prefix / "cache" / "lfs").rglob("*"))  # there was something to search


def test_the_lfs_port_is_no_open_proxy(site: tuple[LabHub, Mirror]) -> None:
    _, mirror = site
    with pytest.raises(urllib.error.HTTPError) as got:
        mirror.get("/example.com/index.html", port=mirror.lfs)
    assert got.value.code == 403


def test_the_fielded_configuration_passes_nginx_t(tmp_path: Path) -> None:
    m = SiteMirror("s1", "m1", "10.0.0.5", resolver="127.0.0.53")  # the Hub over TLS, by name
    prefix = tmp_path / "p"
    for sub in ("cache", "log", "tmp"):
        (prefix / sub).mkdir(parents=True)
    got = pki.issue(pki.authority(tmp_path / "ca", "site s1"), "mirror", list(m.names()),
                    server=True)
    (prefix / "c.crt").write_bytes(got.cert_pem)
    (prefix / "c.key").write_bytes(got.key_pem)
    conf = prefix / "mirror.conf"
    conf.write_text(nginx_conf(m, cache_dir=str(prefix / "cache"), log_dir=str(prefix / "log"),
                               cert=(str(prefix / "c.crt"), str(prefix / "c.key"))))
    (prefix / "nginx.conf").write_text(nginx_main(prefix, conf))
    test = subprocess.run([NGINX, "-t", "-c", str(prefix / "nginx.conf"), "-p", str(prefix)],
                          capture_output=True, text=True, check=False)
    assert test.returncode == 0, test.stderr
    assert hashlib.sha256(conf.read_bytes()).hexdigest()  # rendered
