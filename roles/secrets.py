"""Secret files on a host (root:root 0600), never shown anywhere: the API key, a serving
group's CA and member certificate and key, the operator's certificate for the API.

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
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, HiddenValue, StringCommand, deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import File, Sha256File
from pyinfra.operations import files

from specdec.host import layout
from specdec.roles.common import HostPlan, HostSecrets, SecretIO

__all__ = ["converge_secret", "host_secrets", "secret_file", "upload_secret"]

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


def _dir(path: str) -> None:
    files.directory(name=f"Ensure {path} (root only)", path=path, user="root", group="root",
                    mode="0700")


@deploy("Host secrets")
def host_secrets(hp: HostPlan) -> list[OperationMeta]:
    """The API key (every host), the group's CA, member certificate and key (a serving group's
    members), the operator's certificate and key for the API (``specdec_tls``). Returns the
    operations whose change means units reading them must restart."""
    s: HostSecrets = hp.secrets
    ops = [secret_file(name=f"Upload the API key to {layout.API_KEY_FILE}",
                       path=layout.API_KEY_FILE, secret=s.api_key)]
    if s.group is not None or s.tls is not None:
        _dir(posixpath.dirname(layout.GROUP_TLS_DIR))
    if s.group is not None:
        _dir(layout.GROUP_TLS_DIR)
        for cred, value in zip(("group-ca.crt", "group-member.crt", "group-member.key"),
                               s.group, strict=True):
            path = layout.CREDENTIALS[cred]
            ops.append(secret_file(name=f"Upload the group's {cred} to {path}", path=path,
                                   secret=value))
    if s.tls is not None:
        _dir(layout.PROXY_TLS_DIR)
        for name, value in zip(("api.crt", "api.key"), s.tls, strict=True):
            path = f"{layout.PROXY_TLS_DIR}/{name}"
            ops.append(secret_file(name=f"Upload the API's {name} to {path}", path=path,
                                   secret=value))
    return ops
