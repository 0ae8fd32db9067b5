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

from pyinfra import host
from pyinfra.api import HiddenValue, StringCommand, deploy, operation
from pyinfra.facts.files import File

from specdec.host import layout
from specdec.roles.common import HostPlan
from specdec.roles.secrets import converge_secret

__all__ = ["hf_token", "token_file"]

_PATH = layout.HF_TOKEN_FILE


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

    yield from converge_secret(_PATH, (token.unmask() + "\n").encode())


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

