"""The Hugging Face token in /etc/specdec/hf_token (root:root 0600), never shown anywhere.

The token is read on the control node and only travels as a `pyinfra.api.HiddenValue`. It is
uploaded from an in-memory buffer by a `FileUploadCommand` (files.put would print it in
``--diff``); the operation has an explicit name, so pyinfra never attaches its arguments to the
output, and the upload's repr is ``<secret>``. Change detection compares sha256 digests only.

The file is replaced atomically: the upload goes to ``/etc/specdec/.hf_token.new``, created
root 0600 before any content lands, and is renamed over ``hf_token`` only once complete, so a
failed upload leaves the previous token in place.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, HiddenValue, StringCommand, deploy, operation
from pyinfra.facts.files import File, Sha256File

from roles.common import HostPlan, SecretIO
from specdec import layout

__all__ = ["hf_token", "token_file"]

_PATH = layout.HF_TOKEN_FILE
_NEW = f"{layout.CONFIG_DIR}/.hf_token.new"  # same directory (file system) as _PATH
_ESCALATION = ("_sudo", "_doas", "_dzdo", "_su_user")


def _escalated() -> bool:
    args: dict[str, Any] = dict(host.current_op_global_arguments or {})
    return any(args.get(k) for k in _ESCALATION)


def _mode_owner_ok(info: object) -> bool:
    return (
        isinstance(info, dict)
        and info.get("mode") == 600
        and info.get("user") == "root"
        and info.get("group") == "root"
    )


@operation()
def token_file(token: HiddenValue | None):
    """Converge /etc/specdec/hf_token to ``token`` (an empty file when None).

    + token: the token as a HiddenValue, or None (ungated models only)
    """
    info = host.get_fact(File, path=_PATH)
    if token is None:
        if info:
            host.noop(f"no HF token given (all models ungated); {_PATH} left as is")
            return
        # An empty file keeps the unit's LoadCredential= / bind mount valid.
        yield StringCommand("install", "-m", "0600", "-o", "root", "-g", "root", "/dev/null", _PATH)
        return

    body = (token.unmask() + "\n").encode()
    if info and host.get_fact(Sha256File, path=_PATH) == hashlib.sha256(body).hexdigest():
        if _mode_owner_ok(info):
            host.noop(f"{_PATH} is up to date")
            return
        yield StringCommand("chown", "root:root", _PATH)
        yield StringCommand("chmod", "0600", _PATH)
        return

    # Create the new file (and, with sudo, the upload's temporary file) 0600 *before* any
    # content lands: an SFTP write or cp into an existing file keeps its mode. A leftover of a
    # failed upload is replaced.
    yield StringCommand("rm", "-f", _NEW)
    yield StringCommand("install", "-m", "0600", "-o", "root", "-g", "root", "/dev/null", _NEW)
    temp = None
    if _escalated():
        temp = host.get_temp_filename(_PATH)
        # As the login user (who uploads the temp file), not the escalated one.
        yield StringCommand(f"(umask 077 && rm -f {temp} && : > {temp})",
                            _sudo=False, _su_user="", _doas=False, _dzdo=False)
    yield FileUploadCommand(SecretIO(body), _NEW, remote_temp_filename=temp)
    yield StringCommand("chmod", "0600", _NEW)
    yield StringCommand("mv", "-f", _NEW, _PATH)  # rename(2): the old token until this point


@deploy("HF token")
def hf_token(hp: HostPlan, token: HiddenValue | None) -> None:
    """Write the HF token (read on the control node) to /etc/specdec/hf_token.

    + token: from `roles.read_hf_token`; None is accepted only when no model is gated
      (`deploys/specdec.py` refuses gated models without a token before any change)
    """
    if token is None:
        token_file(name=f"Ensure {_PATH} (no HF token given, models ungated)", token=None)
        return
    token_file(name=f"Upload HF token to {_PATH}", token=token)

