"""The fleet's API key and the serving groups' CA on the control node (`specdec.config.apikey`,
`specdec.config.pki`), and vLLM's own key check as each release does it (`api_key_rule`)."""

from __future__ import annotations

import datetime
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from specdec.config import apikey, hftoken, pki
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
    assert "IP Address:192.0.2.9" in text and "TLS Web Server Authentication" not in text


def _verify(ca: pki.Authority, got: pki.Issued, tmp: Path, purpose: str) -> bool:
    (tmp / "v-ca.crt").write_bytes(ca.cert_pem)
    (tmp / "v.crt").write_bytes(got.cert_pem)
    out = subprocess.run(["openssl", "verify", "-CAfile", str(tmp / "v-ca.crt"), "-purpose",
                          purpose, str(tmp / "v.crt")], capture_output=True, text=True)
    return out.returncode == 0


ADDRS = ["192.0.2.1", "127.0.0.1", "localhost"]


def test_a_rotated_ca_reissues_every_member(tmp_path: Path) -> None:
    """The old check compared issuer names only: a new CA of the same name (a rotation) kept
    every member's old certificate, which the new CA's etcd refuses (issue 29, medium 8)."""
    d = tmp_path / "g"
    ca = pki.authority(d, "group g")
    old = {m: pki.issue(ca, m, ADDRS, server=m == "front") for m in ("front", "w1", "w2")}
    (d / "ca.crt").unlink()
    (d / "ca.key").unlink()
    new_ca = pki.authority(d, "group g")  # same subject, new key
    assert new_ca.cert.subject == ca.cert.subject
    for m, before in old.items():
        after = pki.issue(new_ca, m, ADDRS, server=m == "front")
        assert after.cert_pem != before.cert_pem and after.key_pem != before.key_pem, m
        assert _verify(new_ca, after, tmp_path, "sslclient"), m
        assert pki.issue(new_ca, m, ADDRS, server=m == "front") == after  # then reused


def test_a_certificate_is_reused_only_while_it_fits(tmp_path: Path) -> None:
    ca = pki.authority(tmp_path / "g", "group g")
    a = pki.issue(ca, "m1", ADDRS)
    # its key file replaced (not the certificate's key): issued again
    (tmp_path / "g" / "m1.key").write_bytes(pki.issue(ca, "m2", ADDRS).key_pem)
    b = pki.issue(ca, "m1", ADDRS)
    assert b.cert_pem != a.cert_pem
    # a client's certificate is not a server's: becoming the frontend re-issues it
    assert not _verify(ca, b, tmp_path, "sslserver") and _verify(ca, b, tmp_path, "sslclient")
    c = pki.issue(ca, "m1", ADDRS, server=True)
    assert c.cert_pem != b.cert_pem and _verify(ca, c, tmp_path, "sslserver")
    assert pki.issue(ca, "m1", ADDRS, server=False).cert_pem != c.cert_pem


def test_member_certificates_are_short_lived_and_renewed(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ca = pki.authority(tmp_path / "g", "group g")
    a = pki.issue(ca, "m1", ADDRS)
    cert = x509.load_pem_x509_certificate(a.cert_pem)
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=89) < life <= datetime.timedelta(days=91)
    now = pki._now()
    for days, reused in ((pki.CERT_DAYS - pki.RENEW_BEFORE_DAYS - 1, True),
                         (pki.CERT_DAYS - pki.RENEW_BEFORE_DAYS + 1, False)):
        later = now + datetime.timedelta(days=days)
        monkeypatch.setattr(pki, "_now", lambda t=later: t)
        assert (pki.issue(ca, "m1", ADDRS) == a) is reused, days


def test_each_inventory_has_its_own_group_ca(tmp_path: Path) -> None:
    """Two inventories with a group named "pair" shared one CA (issue 29, medium 7)."""
    root = tmp_path / "pki"
    one = pki.group_ca_dir(root, "pair", "/srv/a/fleet.py", ["s1", "s2"], explicit=False)
    two = pki.group_ca_dir(root, "pair", "/srv/b/fleet.py", ["s1", "s2"], explicit=False)
    bare = pki.group_ca_dir(root, "pair", None, ["s1", "s2"], explicit=False)
    assert len({one, two, bare}) == 3 and one.name == two.name == "pair"
    assert pki.group_ca_dir(root, "pair", "/srv/a/fleet.py", ["x"], explicit=False) == one
    ca_one, ca_two = pki.authority(one, "group pair"), pki.authority(two, "group pair")
    assert ca_one.cert_pem != ca_two.cert_pem
    # the operator's directory is one inventory's
    mine = tmp_path / "mine"
    d = pki.group_ca_dir(mine, "pair", "/srv/a/fleet.py", ["s1"], explicit=True)
    assert d == mine / "pair"
    assert pki.group_ca_dir(mine, "pair", "/srv/a/fleet.py", ["s1"], explicit=True) == d
    assert pki.group_ca_dir(mine, "pair", None, ["s1"], explicit=True) == d
    with pytest.raises(ConfigError, match="holds the CA of group 'pair' of inventory "
                       "/srv/a/fleet.py, not of inventory /srv/b/fleet.py"):
        pki.group_ca_dir(mine, "pair", "/srv/b/fleet.py", ["s1"], explicit=True)


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


def test_the_operators_tls_pair_is_a_certificate_and_its_key(tmp_path: Path) -> None:
    """`specdec_tls` took any file holding ``-----BEGIN`` (an SSH private key as the certificate
    reached the proxy; issue 29): both files are parsed and the key must be the certificate's."""
    ca = pki.authority(tmp_path / "ca", "t")
    a, b = pki.issue(ca, "a", ["10.0.0.1"], server=True), pki.issue(ca, "b", ["10.0.0.2"])

    def put(name: str, data: bytes) -> str:
        p = tmp_path / name
        p.write_bytes(data)
        return str(p)

    cert, key = put("a.crt", a.cert_pem), put("a.key", a.key_pem)
    assert pki.read_tls_pair(cert, key) == (a.cert_pem.decode(), a.key_pem.decode())
    ssh = (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n"
           b"-----END OPENSSH PRIVATE KEY-----\n")
    for c, k, why in (
            (put("ssh.crt", ssh), key, r"specdec_tls.cert='.*ssh.crt': holds a private key"),
            (put("both.crt", a.cert_pem + a.key_pem), key, "holds a private key"),
            (put("csr.crt", b"-----BEGIN X-----\nAAAA\n-----END X-----\n"), key,
             "holds no PEM certificate"),
            (cert, put("ssh.key", ssh), r"specdec_tls.key='.*ssh.key': holds no PEM private key"),
            (cert, put("b.key", b.key_pem), "is not the key of the certificate in"),
            (cert, put("enc.key", _encrypted(a.key_pem)), "is encrypted")):
        with pytest.raises(ConfigError, match=why):
            pki.read_tls_pair(c, k)


def _encrypted(key_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(key_pem, None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(b"pass"))


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_operator_file_that_is_no_regular_file_is_refused_at_once(tmp_path: Path,
                                                                     kind: str) -> None:
    """A FIFO as specdec_api_key_file hung rollout and bench (issue 29); /dev/zero never ends.
    The key, token and PEM readers open without blocking and refuse what is no regular file."""
    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path = Path("/dev/zero")
    reads = (lambda: apikey.read_key(path, "h"),
             lambda: hftoken.read_token("h", str(path), {}),
             lambda: pki.read_pem(str(path), "specdec_tls.cert", "h"))
    for read in reads:
        with pytest.raises(ConfigError, match=r"cannot read \(not a regular file\)$"):
            read()
