"""A small certificate authority on the control node: one CA per purpose (a serving group's
etcd and planes, a fleet's shared state) and the member certificates it issues.

A directory holds ``ca.crt`` and ``ca.key`` (made here on first use, or put there by the operator
to use their own CA) and one ``<name>.crt`` / ``<name>.key`` per member. A member certificate is
issued once and reused while it still names the same addresses and has more than
`RENEW_BEFORE_DAYS` to run, so a second deploy uploads nothing new. Keys are EC P-256, written
0600 in a 0700 directory; every certificate is serverAuth + clientAuth (a member is both an etcd
client and, on the group's frontend, its server) with the member's addresses as
subjectAltNames, and the member's name as CN (etcd takes the CN as the user with
``--client-cert-auth``: etcd Documentation/op-guide/authentication.md, "Using TLS Common Name").

The commands that worked against etcd 3.4.23 (Debian 12) are in docs/research/security.md (Q4);
this module makes the same certificates with the ``cryptography`` package.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specdec.errors import ConfigError

__all__ = ["API_CA", "CA_DAYS", "CERT_DAYS", "SITE_CA", "api_authority", "fleet_root",
           "read_ca", "site_authority", "RENEW_BEFORE_DAYS", "Authority", "Issued", "authority",
           "issue", "read_pem"]

PEM_MAX = 65536
CA_DAYS = 3650
CERT_DAYS = 825
RENEW_BEFORE_DAYS = 30
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Issued:
    """A member's certificate and key (PEM), and the CA certificate that signed it."""

    name: str
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes


@dataclass(frozen=True)
class Authority:
    directory: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey  # the operator's CA may be RSA

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def read_pem(path: str, key: str, host: str | None = None) -> str:
    """A PEM file of the operator's (a certificate or a key) on the control node, as text;
    `ConfigError` naming ``key`` when it cannot be read or is not PEM."""
    try:
        data = Path(path).expanduser().read_bytes()[: PEM_MAX + 1]
    except OSError as exc:
        raise ConfigError(f"{key}={path!r}: cannot read ({exc.strerror or type(exc).__name__})",
                          host=host) from None
    text = data.decode("ascii", "replace")
    if len(data) > PEM_MAX or "-----BEGIN " not in text:
        raise ConfigError(f"{key}={path!r}: is not a PEM file", host=host)
    return text


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` 0600 (created so, then renamed into place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _private_dir(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = directory.lstat()
    if directory.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(f"{directory}: the CA directory must be a directory of this user, "
                          "not readable by others (chmod 700)")
    return directory


def authority(directory: Path, name: str) -> Authority:
    """The CA in ``directory`` (made there, named ``name``, when it has none)."""
    d = _private_dir(directory)
    crt, key_path = d / "ca.crt", d / "ca.key"
    if crt.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"{d}: cannot read its CA (ca.crt, ca.key): {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ConfigError(f"{key_path}: not an EC or RSA private key")
        return Authority(d, cert, key)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"specdec {name} CA")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(key_path, _key_pem(key))
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(d, cert, key)


def _sans(addresses: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for a in addresses:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(a)))
        except ValueError:
            out.append(x509.DNSName(a))
    return out


def _reusable(cert: x509.Certificate, ca: Authority, addresses: Sequence[str]) -> bool:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    left = cert.not_valid_after_utc - _now()
    return (cert.issuer == ca.cert.subject and set(names) == set(_sans(addresses))
            and left > datetime.timedelta(days=RENEW_BEFORE_DAYS))


def issue(ca: Authority, name: str, addresses: Sequence[str]) -> Issued:
    """``name``'s certificate for ``addresses`` (IPs or DNS names), reused when it still
    fits; issued (and stored beside the CA) otherwise."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"certificate name {name!r}: letters, digits, '.', '_', '-'")
    crt, key_path = ca.directory / f"{name}.crt", ca.directory / f"{name}.key"
    if crt.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
            if _reusable(cert, ca, addresses):
                return Issued(name, crt.read_bytes(), key_path.read_bytes(), ca.cert_pem)
        except (OSError, ValueError):
            pass
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_sans(addresses)), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(ca.key, hashes.SHA256()))
    key_pem = _key_pem(key)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    _write_private(key_path, key_pem)
    crt.write_bytes(cert_pem)
    return Issued(name, cert_pem, key_pem, ca.cert_pem)


# -- the network's CAs (issue 29) -------------------------------------------------------------
# Directories under a fleet's CA root (``specdec_pki_dir``, else the inventory's own), named so
# no serving group (lowercase letters, digits, '-') can take them.
API_CA = "_api"  # the CA of every host's API certificate (its ca.crt is what clients trust)
SITE_CA = "_sites"  # <site>/: a site's CA, its mirror's certificate


def fleet_root(pki_dir: str | None, inv_dir: Path) -> Path:
    """Where an inventory's CAs live: ``specdec_pki_dir``, else the inventory's own state
    directory (`specdec.config.apikey.inventory_dir`)."""
    return Path(pki_dir).expanduser() if pki_dir else inv_dir / "pki"


def read_ca(path: str, key: str, host: str | None = None) -> str:
    """The CA certificates in the operator's PEM file ``path`` (``key`` names it in an error):
    every block a certificate, at least one a CA's; as PEM text."""
    text = read_pem(path, key, host)
    try:
        certs = x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        raise ConfigError(f"{key}={path!r}: holds something else than certificates",
                          host=host) from None
    def is_ca(c: x509.Certificate) -> bool:
        try:
            return bool(c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        except x509.ExtensionNotFound:
            return False
    if not any(is_ca(c) for c in certs) or "PRIVATE KEY" in text:
        raise ConfigError(f"{key}={path!r}: holds no CA certificate", host=host)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def api_authority(pki_dir: str | None, inv_dir: Path) -> Authority:
    """The inventory's CA for its hosts' API certificates (made on first use)."""
    return authority(fleet_root(pki_dir, inv_dir) / API_CA, f"API {inv_dir.name}")


def site_authority(pki_dir: str | None, inv_dir: Path, site: str) -> Authority:
    """Site ``site``'s CA (its mirror's certificate; its hosts trust it for the mirror)."""
    return authority(fleet_root(pki_dir, inv_dir) / SITE_CA / site, f"site {site}")
