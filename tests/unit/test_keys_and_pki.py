"""The fleet's API key and the serving groups' CA on the control node (`specdec.config.apikey`,
`specdec.config.pki`), and vLLM's own key check as each release does it (`api_key_rule`)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from specdec.config import apikey, pki
from specdec.engines.vllm.facts import api_key_rule
from specdec.errors import ConfigError, redact


def test_a_generated_key_is_made_once_private_and_redacted(tmp_path: Path) -> None:
    key = apikey.ensure_key()
    path = apikey.default_key_file()
    assert path.parent == apikey.state_dir() and path.read_text() == key + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert apikey.KEY.fullmatch(key) and len(key) == 44
    assert apikey.ensure_key() == key  # reused
    assert redact(f"key {key} here") == "key <redacted> here"


def test_a_named_key_file_must_exist_and_be_private(tmp_path: Path) -> None:
    f = tmp_path / "k"
    with pytest.raises(ConfigError, match="cannot read"):
        apikey.ensure_key(f)  # the operator's file: never made by specdec
    f.write_text("sdk_" + "A" * 30 + "\n")
    f.chmod(0o640)
    with pytest.raises(ConfigError, match="readable by others"):
        apikey.read_key(f)
    f.chmod(0o600)
    assert apikey.read_key(f) == "sdk_" + "A" * 30
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(ConfigError, match="cannot read"):
        apikey.read_key(link)
    for bad in ("password", "sdk_short", "sdk_" + "A" * 30 + " x", "hf_" + "A" * 30):
        f.write_text(bad)
        with pytest.raises(ConfigError, match="does not hold a specdec API key"):
            apikey.read_key(f)


def test_group_ca_issues_member_certificates_etcd_accepts(tmp_path: Path) -> None:
    ca = pki.authority(tmp_path / "pki" / "g", "group g")
    assert stat.S_IMODE((tmp_path / "pki" / "g").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "pki" / "g" / "ca.key").stat().st_mode) == 0o600
    a = pki.issue(ca, "m1", ["192.0.2.1", "127.0.0.1", "localhost"])
    assert pki.issue(ca, "m1", ["192.0.2.1", "127.0.0.1", "localhost"]) == a  # reused
    b = pki.issue(ca, "m1", ["192.0.2.9", "127.0.0.1", "localhost"])  # moved: reissued
    assert b.cert_pem != a.cert_pem and b.key_pem != a.key_pem
    # the same CA again (a later run): it verifies what it issued
    again = pki.authority(tmp_path / "pki" / "g", "group g")
    for name, data in (("ca.crt", again.cert_pem), ("m1.crt", b.cert_pem)):
        (tmp_path / name).write_bytes(data)
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"),
                         "-purpose", "sslclient", str(tmp_path / "m1.crt")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(tmp_path / "m1.crt")],
                          capture_output=True, text=True).stdout
    assert "IP Address:192.0.2.9" in text and "TLS Web Server Authentication" in text


def test_a_ca_directory_others_can_read_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    with pytest.raises(ConfigError, match="chmod 700"):
        pki.authority(d, "x")


def test_the_operators_pem_files(tmp_path: Path) -> None:
    pem = tmp_path / "c.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n")
    assert pki.read_pem(str(pem), "specdec_tls.cert").startswith("-----BEGIN")
    (tmp_path / "x").write_text("not pem")
    with pytest.raises(ConfigError, match="specdec_tls.key='.*': is not a PEM file"):
        pki.read_pem(str(tmp_path / "x"), "specdec_tls.key")


@pytest.mark.parametrize(("version", "guards", "any_case"), [
    ("0.9.2", ("/v1",), False), ("0.11.0", ("/v1",), True), ("0.19.0", ("/v1",), True),
    ("0.31.0", ("/v1", "/v2", "/inference", "/cohere"), True),
])
def test_vllm_key_guards_per_release(version: str, guards: tuple[str, ...],
                                     any_case: bool) -> None:
    """vLLM's own key never covers /invocations, /metrics or /health: why the proxy exists."""
    assert api_key_rule(version) == (guards, any_case)
    assert not any(p.startswith(guards) for p in ("/invocations", "/metrics", "/health"))
