"""The site mirror's registry cache (specdec/mirror_config.py registry_yaml) with Debian's
docker-registry 2.8 and skopeo: an image pulled by digest through it is the upstream's image;
with the upstream gone a running cache still serves it; a cache that starts while its upstream
is down exits (the documented gap its unit's Restart=always covers)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.render.mirror import registry_yaml
from tests.unit.test_lab_hub import free_port


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed ('make setup' installs it)")
    return path


def _blob(d: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (d / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def oci_image(d: Path) -> None:
    """A one-layer OCI image layout (a file in a tar), tag ``v1``."""
    (d / "blobs" / "sha256").mkdir(parents=True)
    (d / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"specdec site mirror test\n"
        ti = tarfile.TarInfo("hello.txt")
        ti.size = len(data)
        tar.addfile(ti, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    ld, ls = _blob(d, layer)
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"]},
        "config": {}}).encode()
    cd, cs = _blob(d, cfg)
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": cd, "size": cs},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": ld, "size": ls}]}).encode()
    md, ms = _blob(d, manifest)
    (d / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
         "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}))


class Registry:
    def __init__(self, cfg: Path) -> None:
        self.proc = subprocess.Popen([_need("docker-registry"), "serve", str(cfg)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def wait(self, port: int) -> bool:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        out, _ = self.proc.communicate(timeout=15)
        return out.decode(errors="replace")


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[int, Registry]]:
    port = free_port()
    cfg = tmp_path / "upstream.yml"
    cfg.write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: "
                   f"{{rootdirectory: {tmp_path / 'up'}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n")
    reg = Registry(cfg)
    assert reg.wait(port)
    oci_image(tmp_path / "oci")
    subprocess.run([_need("skopeo"), "copy", "--quiet", "--dest-tls-verify=false",
                    f"oci:{tmp_path / 'oci'}:v1", f"docker://127.0.0.1:{port}/lab/img:v1"],
                   check=True, capture_output=True, timeout=60)
    yield port, reg
    reg.stop()


def _digest(ref: str) -> str:
    out = subprocess.run([_need("skopeo"), "inspect", "--tls-verify=false", "--format",
                          "{{.Digest}}", f"docker://{ref}"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-400:]
    return out.stdout.strip()


def test_pull_through_by_digest_and_served_with_the_upstream_gone(
        tmp_path: Path, upstream: tuple[int, Registry]) -> None:
    up_port, up = upstream
    digest = _digest(f"127.0.0.1:{up_port}/lab/img:v1")
    port = free_port()
    cfg = tmp_path / "mirror.yml"
    cfg.write_text(registry_yaml(f"127.0.0.1:{up_port}", f"http://127.0.0.1:{up_port}", port,
                                 root=str(tmp_path / "mirror")))
    mirror = Registry(cfg)
    try:
        assert mirror.wait(port)
        via = f"127.0.0.1:{port}/lab/img@{digest}"
        got = tmp_path / "pulled"
        subprocess.run([_need("skopeo"), "copy", "--quiet", "--src-tls-verify=false",
                        f"docker://{via}", f"dir:{got}"], check=True, capture_output=True,
                       timeout=60)
        assert _digest(via) == digest
        up.stop()  # the WAN goes down: what the mirror cached is still served, by digest
        again = tmp_path / "again"
        subprocess.run([_need("skopeo"), "copy", "--quiet", "--src-tls-verify=false",
                        f"docker://{via}", f"dir:{again}"], check=True, capture_output=True,
                       timeout=60)
        push = subprocess.run([_need("skopeo"), "copy", "--quiet", "--dest-tls-verify=false",
                               f"oci:{tmp_path / 'oci'}:v1", f"docker://127.0.0.1:{port}/x/y:1"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert push.returncode != 0  # a pull-through cache takes no pushes
    finally:
        mirror.stop()
    # restarted while the upstream is down, docker-registry 2.8 gives up at once
    late = Registry(cfg)
    assert not late.wait(port)
    assert late.proc.returncode not in (None, 0) and "panic" in late.stop()
