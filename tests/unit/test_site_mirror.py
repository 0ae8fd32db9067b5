"""The site mirror's nginx (specdec/mirror_config.py, Debian's nginx) in front of the lab's Hub,
with the real huggingface_hub clients: a fan-out costs the Hub one copy per revision, gated
repos stay gated (cached or not), and the token never reaches the mirror's disk or logs."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specdec.plan.sites import SiteMirror
from specdec.render.mirror import nginx_conf
from specdec_lab.emulator.hf import revision_of
from specdec_lab.hubrepo import hub_repo
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
        conf = self.prefix / "specdec-site-mirror.conf"
        conf.write_text(nginx_conf(m, cache_dir=str(self.prefix / "cache"),
                                   log_dir=str(self.prefix / "log"), hub_port=self.port,
                                   lfs_port=self.lfs))
        main = self.prefix / "nginx.conf"
        main.write_text(nginx_main(self.prefix, conf))
        test = subprocess.run([NGINX, "-t", "-q", "-c", str(main), "-p", str(self.prefix)],
                              capture_output=True, text=True, check=False)
        assert test.returncode == 0, test.stderr
        self.proc = subprocess.Popen([NGINX, "-c", str(main), "-p", str(self.prefix)],
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/nothing-here", timeout=1)
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.05)
        pytest.fail("nginx did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[LabHub, Mirror]]:
    hub = LabHub(tmp_path)
    mirror = Mirror(tmp_path, hub)
    yield hub, mirror
    mirror.stop()
    hub.close()


def test_a_fan_out_costs_the_hub_one_copy_per_revision(site: tuple[LabHub, Mirror],
                                                       tmp_path: Path) -> None:
    hub, mirror = site
    # every client release the images carry, then six hosts at once
    for i, (version, cli) in enumerate(CLIENTS):
        run = download(version, cli, QWEN, tmp_path / f"seq{i}", mirror.url)
        assert run.returncode == 0, run.stderr[-800:]
    with ThreadPoolExecutor(6) as pool:
        runs = list(pool.map(lambda i: download("2.4.0", "hf", LLAMA1, tmp_path / f"par{i}",
                                                mirror.url, TOKEN), range(6)))
    assert all(r.returncode == 0 for r in runs), [r.stderr[-300:] for r in runs]
    counters = hub.hub.counters.snapshot()
    assert counters["copies"] == {f"{QWEN}@{revision_of(QWEN)}": 1.0,
                                  f"{LLAMA1}@{revision_of(LLAMA1)}": 1.0}
    for i in range(6):  # each host got the whole revision
        snap = tmp_path / f"par{i}" / "hf" / "hub" / "models--meta-llama--Llama-3.2-1B-Instruct"
        repo = hub_repo(LLAMA1, hub.hub.scale)
        assert repo is not None
        assert all((snap / "snapshots" / repo.revision / f.path).stat().st_size == f.size
                   for f in repo.files)
    log = (mirror.prefix / "log" / "specdec-mirror-lfs.access.log").read_text()
    assert " HIT " in log


def test_gated_repos_stay_gated_through_the_mirror(site: tuple[LabHub, Mirror],
                                                   tmp_path: Path) -> None:
    hub, mirror = site
    ok = download("2.4.0", "hf", LLAMA1, tmp_path / "ok", mirror.url, TOKEN)
    assert ok.returncode == 0, ok.stderr[-800:]
    for version, cli in CLIENTS:  # cached now, and still refused without the token
        denied = download(version, cli, LLAMA1, tmp_path / f"no-{version}", mirror.url)
        assert denied.returncode != 0, (version, denied.stdout[-300:])
    # a cached file asked for by commit, without a token: the Hub says no, so does the mirror
    url = f"{mirror.url}/{LLAMA1}/resolve/{revision_of(LLAMA1)}/config.json"
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(url)
    assert got.value.code == 401 and got.value.headers["X-Error-Code"] == "GatedRepo"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 200
    bad = urllib.request.Request(url, headers={"Authorization": "Bearer hf_" + "y" * 34})
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(bad)
    assert got.value.code == 401


def test_the_token_never_reaches_the_mirrors_disk_or_logs(site: tuple[LabHub, Mirror],
                                                          tmp_path: Path) -> None:
    hub, mirror = site
    for i in range(2):
        run = download("0.36.2", "hf", LLAMA1, tmp_path / f"t{i}", mirror.url, TOKEN)
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
        urllib.request.urlopen(f"http://127.0.0.1:{mirror.lfs}/example.com/index.html")
    assert got.value.code == 403


def test_the_fielded_configuration_passes_nginx_t(tmp_path: Path) -> None:
    m = SiteMirror("s1", "m1", "10.0.0.5", resolver="127.0.0.53")  # the Hub over TLS, by name
    prefix = tmp_path / "p"
    for sub in ("cache", "log", "tmp"):
        (prefix / sub).mkdir(parents=True)
    conf = prefix / "mirror.conf"
    conf.write_text(nginx_conf(m, cache_dir=str(prefix / "cache"), log_dir=str(prefix / "log")))
    (prefix / "nginx.conf").write_text(nginx_main(prefix, conf))
    test = subprocess.run([NGINX, "-t", "-c", str(prefix / "nginx.conf"), "-p", str(prefix)],
                          capture_output=True, text=True, check=False)
    assert test.returncode == 0, test.stderr
    assert hashlib.sha256(conf.read_bytes()).hexdigest()  # rendered
