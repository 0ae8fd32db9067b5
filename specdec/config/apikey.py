"""The fleet's API key on the control node: given (``specdec_api_key_file``) or generated once.

Every host's API (`specdec.render.proxy`) requires ``Authorization: Bearer <key>``. The key is
``sdk_`` followed by 20-200 letters and digits, so `specdec.errors.redact` catches it in any
text, like an HF token. Without ``specdec_api_key_file`` the key is generated on first use
(40 letters and digits from `secrets`: 238 bits) into `default_key_file`, 0600 in a 0700
directory of this user, and reused by every later run, `specdec lab` and `specdec bench`: one
key per control node account unless a fleet names its own file. On a host it lives where the HF
token does (``/etc/specdec/api_key``, root 0600) and reaches units only as a systemd credential.
"""

from __future__ import annotations

import os
import re
import secrets
import string
from pathlib import Path

from specdec.config import state
from specdec.config.hygiene import show
from specdec.config.rawinput import read_file_head
from specdec.errors import ConfigError

__all__ = ["KEY", "KEY_ENV_FILE", "check_key", "default_key_file", "ensure_key", "read_key",
           "state_dir"]

KEY = re.compile(r"sdk_[A-Za-z0-9]{20,200}")
MAX_FILE_BYTES = 4096
KEY_ENV_FILE = "SPECDEC_API_KEY_FILE"  # the key file, for tools outside a deploy
STATE_ENV = state.STATE_ENV
_ALPHABET = string.ascii_letters + string.digits


def state_dir() -> Path:
    """The control node's own state (generated keys, serving groups' CAs): `state.root`."""
    return state.root()


def default_key_file() -> Path:
    env = os.environ.get(KEY_ENV_FILE)
    return Path(env) if env else state_dir() / "api_key"


def check_key(raw: str, where: str, host: str | None = None) -> str:
    text = raw.strip()
    if not KEY.fullmatch(text):
        raise ConfigError(f"{where}: does not hold a specdec API key (sdk_ followed by 20-200 "
                          "letters and digits)", host=host)
    return text


def read_key(path: str | Path, host: str | None = None) -> str:
    """The key in ``path`` (refused: unreadable, larger than a key file, readable by others)."""
    p = Path(path).expanduser()
    where = f"specdec_api_key_file={show(str(path))}"
    try:
        data, st = read_file_head(p, MAX_FILE_BYTES, follow=False)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})",
                          host=host) from None
    if st.st_mode & 0o077:
        raise ConfigError(f"{where}: is readable by others (chmod 600)", host=host)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: is larger than {MAX_FILE_BYTES} bytes (not a key file)",
                          host=host)
    return check_key(data.decode("utf-8", "replace"), where, host)


def ensure_key(path: str | Path | None = None, host: str | None = None,
               create: bool | None = None) -> str:
    """The key in ``path`` (default `default_key_file`); generated there when it does not
    exist yet and ``create`` (default: only the default file; a named file must exist: it is
    the operator's)."""
    p = Path(path).expanduser() if path is not None else default_key_file()
    make = (path is None) if create is None else create
    if not make or p.exists() or p.is_symlink():
        return read_key(p, host)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = "sdk_" + "".join(secrets.choice(_ALPHABET) for _ in range(40))
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another run made it meanwhile
        return read_key(p, host)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key
