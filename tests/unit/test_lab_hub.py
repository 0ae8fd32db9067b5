"""The lab's Hub (specdec_lab/hub.py) against the real huggingface_hub clients the catalog's
images carry (0.33.5, 0.36.2, 2.4.0: specdec_lab/hubclient.py, installed by `make setup`):
snapshot downloads, revisions and ETags, gated repos, bad tokens, resumed downloads, no Xet,
and the byte counters."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.plan.sites import CA_VARIABLES
from specdec_lab.emulator.hf import revision_of
from specdec_lab.hub import Hub, serve
from specdec_lab.hubclient import cli_argv
from specdec_lab.hubrepo import WEIGHTS, hub_repo

TOKEN = "hf_MARKERhubtest" + "Xq7Zr2Lp9Wm4Ks1Vb6Nt3"
QWEN = "Qwen/Qwen3-0.6B"
LLAMA1 = "meta-llama/Llama-3.2-1B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"  # 16 MB of weights at the default scale
CLIENTS = [("0.33.5", "huggingface-cli"), ("0.36.2", "hf"), ("2.4.0", "hf")]
MIB10 = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE (constants.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LabHub:
    def __init__(self, tmp: Path) -> None:
        self.log = tmp / "requests.jsonl"
        self.hub = Hub([hashlib.sha256(TOKEN.encode()).hexdigest()], log=self.log)
        self.port, self.cdn = free_port(), free_port()
        self.servers = serve(self.hub, ["127.0.0.1"], self.port, self.cdn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, doc: dict[str, object]) -> None:
        req = urllib.request.Request(self.url + path, json.dumps(doc).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5):
            pass

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LabHub]:
    h = LabHub(tmp_path)
    yield h
    h.close()


def download(version: str, cli: str, repo: str, home: Path, endpoint: str,
             token: str | None = None, ca: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``ca``: the one CA the client trusts, as specdec sets it for a site mirror
    (`specdec.plan.sites.CA_VARIABLES`); without a token the client reads none (as
    `specdec.host.prefetch` runs it)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HF_HOME": str(home / "hf"),
           "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_DISABLE_XET": "1", "NO_COLOR": "1",
           "HF_TOKEN_PATH": "/dev/null"}
    if ca is not None:
        env.update({v: str(ca) for v in CA_VARIABLES})
    if token is not None:
        (home / "token").parent.mkdir(parents=True, exist_ok=True)
        (home / "token").write_text(token)
        env["HF_TOKEN_PATH"] = str(home / "token")  # as specdec.host.prefetch passes it
    return subprocess.run([*cli_argv(version, cli), "download", repo], env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def snapshot(home: Path, repo: str) -> Path:
    return home / "hf" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / \
        revision_of(repo)


@pytest.mark.parametrize(("version", "cli"), CLIENTS)
def test_real_client_downloads_a_snapshot_once(hub: LabHub, tmp_path: Path, version: str,
                                               cli: str) -> None:
    run = download(version, cli, QWEN, tmp_path / "a", hub.url)
    assert run.returncode == 0, run.stderr[-800:]
    snap = snapshot(tmp_path / "a", QWEN)
    repo = hub_repo(QWEN, hub.hub.scale)
    assert repo is not None
    for f in repo.files:  # every file, byte for byte; the blob named by its ETag
        data = (snap / f.path).read_bytes()
        assert len(data) == f.size and (snap / f.path).resolve().name == f.etag
        if f.sha256:
            assert hashlib.sha256(data).hexdigest() == f.sha256
    counters = hub.hub.counters.snapshot()
    key = f"{QWEN}@{repo.revision}"
    assert counters["copies"] == {key: 1.0}
    assert counters["by_revision"][key] == repo.size
    again = download(version, cli, QWEN, tmp_path / "a", hub.url)  # cached: no file again
    assert again.returncode == 0, again.stderr[-800:]
    assert hub.hub.counters.snapshot()["copies"] == {key: 1.0}


@pytest.mark.parametrize(("version", "cli"), CLIENTS)
def test_gated_repo_needs_the_token(hub: LabHub, tmp_path: Path, version: str,
                                    cli: str) -> None:
    denied = download(version, cli, LLAMA1, tmp_path / "n", hub.url)
    assert denied.returncode != 0
    assert "GatedRepo" in denied.stderr or "requires approval" in denied.stderr, \
        denied.stderr[-600:]
    bad = download(version, cli, LLAMA1, tmp_path / "b", hub.url, token="hf_" + "x" * 34)
    assert bad.returncode != 0 and "Invalid credentials" in bad.stderr + bad.stdout or \
        "401" in bad.stderr, bad.stderr[-600:]
    ok = download(version, cli, LLAMA1, tmp_path / "t", hub.url, token=TOKEN)
    assert ok.returncode == 0, ok.stderr[-800:]
    assert (snapshot(tmp_path / "t", LLAMA1) / "config.json").is_file()
    # the metadata of a gated repo is public (as on the Hub); its files are not
    with urllib.request.urlopen(f"{hub.url}/api/models/{LLAMA1}/revision/main") as r:
        assert json.loads(r.read())["gated"] == "manual"
    for text in (denied.stdout + denied.stderr + ok.stdout + ok.stderr, hub.log.read_text()):
        assert TOKEN not in text
    logged = [json.loads(line) for line in hub.log.read_text().splitlines()]
    assert any(r["token"] for r in logged) and all("Authorization" not in r for r in logged)


def test_no_xet_and_the_headers_the_client_reads(hub: LabHub) -> None:
    repo = hub_repo(QWEN, hub.hub.scale)
    assert repo is not None
    with urllib.request.urlopen(f"{hub.url}/api/models/{QWEN}/tree/{repo.revision}") as r:
        tree = json.loads(r.read())
    assert {e["path"] for e in tree} == {f.path for f in repo.files}
    assert not any("xetHash" in e for e in tree)
    lfs = next(e for e in tree if e["path"] == WEIGHTS)["lfs"]
    assert lfs["oid"] == repo.file(WEIGHTS).sha256  # type: ignore[union-attr]

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: object, **k: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(f"{hub.url}/{QWEN}/resolve/main/{WEIGHTS}", method="HEAD")
    with pytest.raises(urllib.error.HTTPError) as got:
        opener.open(req)
    h = got.value.headers
    assert got.value.code == 302 and h["X-Repo-Commit"] == repo.revision
    assert h["X-Linked-Size"] == str(repo.file(WEIGHTS).size)  # type: ignore[union-attr]
    assert not [k for k in h if k.lower().startswith("x-xet")] and "Link" not in h
    # the CDN URL is signed: without its signature, 403 (as from the Hub's CDN)
    unsigned = h["Location"].split("?")[0]
    with pytest.raises(urllib.error.HTTPError) as cdn:
        urllib.request.urlopen(unsigned)
    assert cdn.value.code == 403
    with urllib.request.urlopen(urllib.request.Request(
            f"{hub.url}/{QWEN}/resolve/{repo.revision}/config.json", method="HEAD")) as r:
        assert r.headers["ETag"].strip('"') == repo.file("config.json").oid  # type: ignore


@pytest.mark.parametrize(("version", "cli", "runs"), [
    # up to 1.17 the next run appends to blobs/<etag>.incomplete (0.36 file_download.py)
    ("0.36.2", "hf", 2),
    # from 1.18 a new process starts over, but the process retries in place with a Range
    # (2.4.0 file_download.py http_get: RemoteProtocolError -> resume)
    ("2.4.0", "hf", 1),
])
def test_a_cut_download_resumes_with_a_range(hub: LabHub, tmp_path: Path, version: str,
                                             cli: str, runs: int) -> None:
    repo = hub_repo(LLAMA8, hub.hub.scale)
    assert repo is not None and repo.file(WEIGHTS).size > MIB10 + (1 << 20)  # type: ignore
    hub.post("/_lab/fault", {"match": WEIGHTS, "cut_after": MIB10 + 512 * 1024, "times": 1})
    results = [download(version, cli, LLAMA8, tmp_path / "r", hub.url, TOKEN)
               for _ in range(runs)]
    assert results[-1].returncode == 0, results[-1].stderr[-800:]
    if runs == 2:
        assert results[0].returncode != 0  # the cut ended the first process
    ranges = hub.hub.counters.snapshot()["ranges"]
    assert [r["start"] for r in ranges if r["path"].endswith(WEIGHTS)] == [MIB10]
    data = (snapshot(tmp_path / "r", LLAMA8) / WEIGHTS).read_bytes()
    assert hashlib.sha256(data).hexdigest() == repo.file(WEIGHTS).sha256  # type: ignore
    sent = hub.hub.counters.snapshot()["by_revision"][f"{LLAMA8}@{repo.revision}"]
    assert repo.size < sent < repo.size + (1 << 20)  # only the lost half chunk again


def test_control_endpoints_answer_only_the_control_node(hub: LabHub) -> None:
    hub.hub.control.discard("127.0.0.1")
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(f"{hub.url}/_lab/counters")
    assert got.value.code == 403


def test_wan_rate_limits_the_egress(hub: LabHub, tmp_path: Path) -> None:
    import time

    hub.post("/_lab/config", {"wan_mbps": 40})  # 5 MB/s
    t0 = time.monotonic()
    run = download("2.4.0", "hf", QWEN, tmp_path / "w", hub.url)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stderr[-500:]
    size = hub_repo(QWEN, hub.hub.scale).size  # type: ignore[union-attr]
    assert took >= size / 5e6 * 0.9


def test_a_real_model_folder_is_served_byte_for_byte(hub: LabHub, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the lab built (specdec_lab/realmodel.py) under its catalog id: small files in
    git, a file over 10 MB through LFS with its real sha256, read from disk."""
    from specdec_lab import realmodel

    repo = "HuggingFaceTB/SmolLM2-135M-Instruct"
    folder = tmp_path / "models" / realmodel.REPOS[repo]
    folder.mkdir(parents=True)
    files = {"config.json": b'{"model_type": "llama"}\n',
             "model.safetensors": os.urandom(MIB10 + 12345)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / realmodel.STAMP).write_text(json.dumps({"files": {
        n: hashlib.sha256(d).hexdigest() for n, d in files.items()}}))
    monkeypatch.setattr(realmodel, "MODELS_DIR", tmp_path / "models")
    realmodel.local_files.cache_clear()
    hub_repo.cache_clear()
    try:
        served = hub_repo(repo, hub.hub.scale)
        assert served is not None
        assert [(f.path, f.lfs) for f in served.files] == [("config.json", False),
                                                           ("model.safetensors", True)]
        run = download("2.4.0", "hf", repo, tmp_path / "a", hub.url)
        assert run.returncode == 0, run.stderr[-800:]
        snap = snapshot(tmp_path / "a", repo).with_name(served.revision)
        for name, data in files.items():
            assert (snap / name).read_bytes() == data
    finally:
        realmodel.local_files.cache_clear()
        hub_repo.cache_clear()
