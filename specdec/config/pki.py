"""A small certificate authority on the control node: one CA per purpose (a serving group's
etcd, of one inventory: `group_ca_dir`) and the member certificates it issues.

A directory holds ``ca.crt`` and ``ca.key`` (made here on first use, or put there by the operator
to use their own CA) and one ``<name>.crt`` / ``<name>.key`` per member. A member certificate is
issued for `CERT_DAYS` and reused while it is signed by the CA's key (its signature checked:
a rotated CA re-issues every member), matches its key file, names the same addresses and usages
and has more than `RENEW_BEFORE_DAYS` to run, so a second deploy uploads nothing new and every
deploy in the last third of a certificate's life renews it. Keys are EC P-256, written 0600 in a
0700 directory. A certificate is clientAuth, plus serverAuth only for a member that serves (the
group's frontend member runs etcd): RFC 5280 section 4.2.1.12, a certificate is used only for
the purposes its extended key usage lists, and Go's TLS (etcd's) checks it. The member's
addresses are its subjectAltNames, its name its CN (etcd takes the CN as the user with
``--client-cert-auth``: etcd Documentation/op-guide/authentication.md, "Using TLS Common Name").

The commands that worked against etcd 3.4.23 (Debian 12) are in docs/research/security.md (Q4);
this module makes the same certificates with the ``cryptography`` package.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specdec.config.rawinput import read_file_head
from specdec.errors import ConfigError

__all__ = ["API_CA", "CA_DAYS", "CERT_DAYS", "RENEW_BEFORE_DAYS", "SITE_CA", "Authority",
           "Issued", "api_authority", "authority", "fleet_root", "group_ca_dir", "inventory_owner",
           "issue",
           "read_ca", "read_pem", "read_tls_pair", "site_authority"]

PEM_MAX = 65536
CA_DAYS = 3650
# A member certificate lives 90 days and is renewed by any deploy in its last 30 (a leaked
# member key, say of a device sent away, is useless after at most 90 days).
CERT_DAYS = 90
RENEW_BEFORE_DAYS = 30
OWNER_FILE = "owner"  # in a group's CA directory: the inventory whose group it is
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
        data = read_file_head(path, PEM_MAX)[0]
    except OSError as exc:
        raise ConfigError(f"{key}={path!r}: cannot read ({exc.strerror or type(exc).__name__})",
                          host=host) from None
    text = data.decode("ascii", "replace")
    if len(data) > PEM_MAX or "-----BEGIN " not in text:
        raise ConfigError(f"{key}={path!r}: is not a PEM file", host=host)
    return text


def read_tls_pair(cert_path: str, key_path: str, key: str = "specdec_tls",
                  host: str | None = None) -> tuple[str, str]:
    """The operator's certificate (chain) and its private key, as text: each parsed, the key
    unencrypted and the certificate's (a file that merely holds ``-----BEGIN``, an SSH key for
    one, is refused before it reaches a host), the certificate file without a private key."""
    cert_text = read_pem(cert_path, f"{key}.cert", host)
    key_text = read_pem(key_path, f"{key}.key", host)

    def bad(which: str, path: str, why: str) -> ConfigError:
        return ConfigError(f"{key}.{which}={path!r}: {why}", host=host)

    if "PRIVATE KEY-----" in cert_text:
        raise bad("cert", cert_path, "holds a private key (the key goes to specdec_tls.key)")
    try:
        chain = x509.load_pem_x509_certificates(cert_text.encode())
    except ValueError:
        raise bad("cert", cert_path, "holds no PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key_text.encode(), None)
    except TypeError:
        raise bad("key", key_path, "is encrypted (nginx would ask for its passphrase)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise bad("key", key_path, "holds no PEM private key (PKCS#8, RSA or EC)") from None
    if private.public_key() != chain[0].public_key():
        raise bad("key", key_path, f"is not the key of the certificate in {cert_path}")
    if chain[0].not_valid_after_utc <= _now():
        raise bad("cert", cert_path, f"expired on {chain[0].not_valid_after_utc:%Y-%m-%d}")
    return cert_text, key_text


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


def _usages(server: bool) -> list[x509.ObjectIdentifier]:
    return [*([ExtendedKeyUsageOID.SERVER_AUTH] if server else []),
            ExtendedKeyUsageOID.CLIENT_AUTH]


def _signed_by(cert: x509.Certificate, ca: Authority) -> bool:
    try:
        cert.verify_directly_issued_by(ca.cert)  # issuer name and the CA key's signature
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _reusable(cert: x509.Certificate, key_pem: bytes, ca: Authority,
              addresses: Sequence[str], server: bool) -> bool:
    """Still what ``issue`` would make: signed by this CA's key, for the key beside it, the same
    addresses and usages, valid now and for more than `RENEW_BEFORE_DAYS`."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        key = serialization.load_pem_private_key(key_pem, None)
    except (x509.ExtensionNotFound, ValueError, TypeError):
        return False
    now = _now()
    return (_signed_by(cert, ca) and key.public_key() == cert.public_key()
            and set(names) == set(_sans(addresses)) and list(usages) == _usages(server)
            and cert.not_valid_before_utc <= now
            and cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_BEFORE_DAYS))


def issue(ca: Authority, name: str, addresses: Sequence[str], server: bool = False) -> Issued:
    """``name``'s certificate for ``addresses`` (IPs or DNS names), a client's, also a
    server's when ``server``; reused when it still fits (`_reusable`), issued (and stored
    beside the CA) otherwise."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"certificate name {name!r}: letters, digits, '.', '_', '-'")
    crt, key_path = ca.directory / f"{name}.crt", ca.directory / f"{name}.key"
    try:
        cert_pem, key_pem = crt.read_bytes(), key_path.read_bytes()
        if _reusable(x509.load_pem_x509_certificate(cert_pem), key_pem, ca, addresses, server):
            return Issued(name, cert_pem, key_pem, ca.cert_pem)
    except (OSError, ValueError):
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(min(now + datetime.timedelta(days=CERT_DAYS),
                                 ca.cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_sans(addresses)), critical=False)
            .add_extension(x509.ExtendedKeyUsage(_usages(server)), critical=False)
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


def inventory_owner(inventory: str) -> str:
    """What `OWNER_FILE` holds for a group CA claimed by inventory file ``inventory``."""
    return f"inventory {inventory}"


def group_ca_dir(root: Path, group: str, inventory: str | None, members: Sequence[str],
                 explicit: bool) -> Path:
    """The CA directory of serving group ``group`` of one inventory (its resolved path; without
    an inventory file, the group's members stand for it). The operator's ``specdec_pki_dir``
    (``explicit``) is one inventory's: ``root/<group>``, claimed by the first inventory that
    uses it (`OWNER_FILE`) and refused to any other; the default is ``root/<digest of the
    inventory>/<group>``. Two inventories with a group of the same name never share a CA."""
    owner = inventory_owner(inventory) if inventory else \
        f"the hosts {', '.join(sorted(members))}"
    tag = hashlib.sha256(owner.encode()).hexdigest()[:16]
    d = _private_dir(root / group if explicit else root / tag / group)
    mark = d / OWNER_FILE
    try:
        have = mark.read_text().strip()
    except FileNotFoundError:
        have = None
    if have is None:
        if inventory is not None or not explicit:  # the members cannot claim a directory
            mark.write_text(owner + "\n")
        return d
    if explicit and inventory is None:
        return d
    if have != owner:
        raise ConfigError(f"{d}: holds the CA of group {group!r} of {have}, not of {owner} (an "
                          "inventory needs its own specdec_pki_dir; if the inventory moved, "
                          f"remove {mark})")
    return d


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
