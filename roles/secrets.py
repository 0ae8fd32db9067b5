"""Secret files on a host (root:root 0600), never shown anywhere: the API keys, a serving
group's CA and member certificate and key, the API's certificate; and the public CA
certificates beside them.

Each value is read (or made) on the control node and travels only as a
`pyinfra.api.HiddenValue`. As for the HF token (`specdec.roles.hf_token`): uploaded from an
in-memory
buffer whose repr is ``<secret>``, to a new 0600 file in the same directory, renamed over the
old one once complete; change detection compares sha256 digests only; the operation has an
explicit name, so pyinfra never prints its arguments. The directories are root:root 0700.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, HiddenValue, StringCommand, deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import File, Sha256File
from pyinfra.operations import files

from specdec.host import layout
from specdec.roles.common import HostPlan, HostSecrets, SecretIO

__all__ = ["SecretOps", "converge_secret", "host_secrets", "public_file", "secret_file",
           "upload_secret"]

_ESCALATION = ("_sudo", "_doas", "_dzdo", "_su_user")


def _escalated() -> bool:
    args: dict[str, Any] = dict(host.current_op_global_arguments or {})
    return any(args.get(k) for k in _ESCALATION)


def upload_secret(path: str, body: bytes):
    """Commands that replace ``path`` with ``body`` atomically (a generator of commands)."""
    new = posixpath.join(posixpath.dirname(path), "." + posixpath.basename(path) + ".new")
    # Create the new file (and, with sudo, the upload's temporary file) 0600 *before* any
    # content lands: an SFTP write or cp into an existing file keeps its mode.
    yield StringCommand("rm", "-f", new)
    yield StringCommand("install", "-m", "0600", "-o", "root", "-g", "root", "/dev/null", new)
    temp = None
    if _escalated():
        temp = host.get_temp_filename(path)
        yield StringCommand(f"(umask 077 && rm -f {temp} && : > {temp})",
                            _sudo=False, _su_user="", _doas=False, _dzdo=False)
    yield FileUploadCommand(SecretIO(body), new, remote_temp_filename=temp)
    yield StringCommand("chmod", "0600", new)
    yield StringCommand("mv", "-f", new, path)  # rename(2): the old content until this point


def converge_secret(path: str, body: bytes):
    """Commands that make ``path`` root:root 0600 holding ``body``, when it does not (compared
    by sha256 only)."""
    info = host.get_fact(File, path=path)
    if info and host.get_fact(Sha256File, path=path) == hashlib.sha256(body).hexdigest():
        if isinstance(info, dict) and info.get("mode") == 600 and info.get("user") == "root" \
                and info.get("group") == "root":
            host.noop(f"{path} is up to date")
            return
        yield StringCommand("chown", "root:root", path)
        yield StringCommand("chmod", "0600", path)
        return
    yield from upload_secret(path, body)


@operation()
def secret_file(path: str, secret: HiddenValue):
    """Converge ``path`` (root:root 0600) to ``secret`` (a line of text, or PEM).

    + path: where on the host
    + secret: the content, masked
    """
    text = secret.unmask()
    yield from converge_secret(path, (text if text.endswith("\n") else text + "\n").encode())


@operation()
def empty_secret(path: str):
    """``path`` root:root 0600 and empty (a credential a unit loads when there is none).

    + path: where on the host
    """
    yield from converge_secret(path, b"")


def _dir(path: str) -> None:
    files.directory(name=f"Ensure {path} (root only)", path=path, user="root", group="root",
                    mode="0700")


def public_file(path: str, text: str) -> OperationMeta:
    """A CA certificate anyone on the host may read (0644 in a 0755 directory)."""
    files.directory(name=f"Ensure {posixpath.dirname(path)}", path=posixpath.dirname(path),
                    user="root", group="root", mode="0755")
    return files.put(name=f"Upload {path}", src=StringIO(text), dest=path, user="root",
                     group="root", mode="0644")


@dataclass(frozen=True)
class SecretOps:
    """The secret files' operations, by who reads them at start: the engine's units (a
    serving group's certificates) and the API proxy (its keys and certificate)."""

    engine: tuple[OperationMeta, ...]
    proxy: tuple[OperationMeta, ...]


def _api_secrets(s: HostSecrets) -> list[OperationMeta]:
    """The API key and the one being retired (empty without), the API's certificate, key and
    (public) CA."""
    ops = [secret_file(name=f"Upload the API key to {layout.API_KEY_FILE}",
                       path=layout.API_KEY_FILE, secret=s.api_key)]
    old = layout.API_KEY_OLD_FILE
    ops.append(secret_file(name=f"Upload the rotated-out API key to {old}", path=old,
                           secret=s.api_key_old) if s.api_key_old is not None else
               empty_secret(name=f"Ensure {old} (no rotated-out API key)", path=old))
    if s.tls is not None:
        _dir(layout.PROXY_TLS_DIR)
        for name, value in zip(("api.crt", "api.key"), s.tls, strict=True):
            path = f"{layout.PROXY_TLS_DIR}/{name}"
            ops.append(secret_file(name=f"Upload the API's {name} to {path}", path=path,
                                   secret=value))
    if s.api_ca is not None:
        public_file(layout.API_CA_FILE, s.api_ca)
    return ops


@deploy("Host secrets")
def host_secrets(hp: HostPlan) -> SecretOps:
    """The API's keys and certificate (every host), the group's CA, member certificate and
    key (a serving group's members). Returns the operations whose change means units reading
    them must restart."""
    s: HostSecrets = hp.secrets
    if s.group is not None or s.tls is not None:
        _dir(posixpath.dirname(layout.GROUP_TLS_DIR))
    proxy = _api_secrets(s)
    engine = []
    if s.group is not None:
        _dir(layout.GROUP_TLS_DIR)
        for cred, value in zip(("group-ca.crt", "group-member.crt", "group-member.key"),
                               s.group, strict=True):
            path = layout.CREDENTIALS[cred]
            engine.append(secret_file(name=f"Upload the group's {cred} to {path}", path=path,
                                      secret=value))
    return SecretOps(tuple(engine), tuple(proxy))
