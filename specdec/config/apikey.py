"""The API keys on the control node: given (``specdec_api_key_file``) or generated, one per
inventory (``specdec_api_key_scope: host``: one per host), and rotated with an overlap.

Every host's API (`specdec.render.proxy`) requires ``Authorization: Bearer <key>``. A key is
``sdk_`` followed by 20-200 letters and digits, so `specdec.errors.redact` catches it in any
text, like an HF token. Without ``specdec_api_key_file`` the key is generated on first use
(40 letters and digits from `secrets`: 238 bits) into the inventory's own directory
(`inventory_dir`: ``<state>/inventories/<name>-<hash of its path>/``), 0600 in 0700
directories of this user, and reused by every later run of that inventory: two inventories
deployed from one account never share a key.

Rotation (`rotate`, ``specdec keys rotate``): the key moves to ``<file>.old`` and a new one takes
its place; the next deploy gives every host both, and its API proxy accepts either, so clients
move over at their pace; `retire` (``specdec keys retire``) deletes ``<file>.old``, and the
deploy after it leaves the new key alone. On a host a key lives where the HF token does
(``/etc/specdec/api_key`` and ``api_key.old``, root 0600) and reaches units only as a systemd
credential.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import string
from collections.abc import Sequence
from pathlib import Path

from specdec.config import state
from specdec.config.hygiene import show
from specdec.config.rawinput import read_file_head
from specdec.errors import ConfigError

__all__ = ["KEY", "KEY_ENV_FILE", "OLD", "check_key", "default_key_file", "ensure_key",
           "host_key_file", "inventory_dir", "old_key", "read_key", "read_private", "retire",
           "rotate",
           "state_dir"]

KEY = re.compile(r"sdk_[A-Za-z0-9]{20,200}")
MAX_FILE_BYTES = 4096
KEY_ENV_FILE = "SPECDEC_API_KEY_FILE"  # the key file, for tools outside a deploy
STATE_ENV = state.STATE_ENV
_ALPHABET = string.ascii_letters + string.digits
OLD = ".old"  # <key file>.old: the key being retired, accepted until `retire`
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def state_dir() -> Path:
    """The control node's own state (generated keys, serving groups' CAs): `state.root`."""
    return state.root()


def inventory_dir(inventory: str | Path | None, hosts: Sequence[str] = ()) -> Path:
    """The control node's state of one inventory (`specdec.config.state.for_inventory`:
    ``<state>/inventories/<stem>-<12 hex of its absolute path>``, or ``--state``); with no
    inventory file, of its sorted host names."""
    if inventory is not None or os.environ.get(state.INVENTORY_STATE_ENV):
        return state.for_inventory(inventory)
    stem, what = "hosts", "\n".join(sorted(hosts))
    tag = hashlib.sha256(what.encode()).hexdigest()[:12]
    return state_dir() / "inventories" / f"{_UNSAFE.sub('_', stem)[:40]}-{tag}"


def default_key_file(inv_dir: Path | None = None) -> Path:
    """``$SPECDEC_API_KEY_FILE``, else the inventory's key (``inv_dir``), else this account's
    (tools outside an inventory: `specdec bench`)."""
    env = os.environ.get(KEY_ENV_FILE)
    if env:
        return Path(env)
    return (inv_dir if inv_dir is not None else state_dir()) / "api_key"


def host_key_file(given: str | None, scope: str, host: str, inv_dir: Path
                  ) -> tuple[Path, bool]:
    """A host's key file and whether specdec makes it: the operator's (``given``, never
    made), else the inventory's, or with scope ``host`` the host's own."""
    if given:
        return Path(given).expanduser(), False
    if scope == "host":
        return inv_dir / "hosts" / _UNSAFE.sub("_", host.rsplit("/", 1)[-1]) / "api_key", True
    return default_key_file(inv_dir), True


def check_key(raw: str, where: str, host: str | None = None) -> str:
    text = raw.strip()
    if not KEY.fullmatch(text):
        raise ConfigError(f"{where}: does not hold a specdec API key (sdk_ followed by 20-200 "
                          "letters and digits)", host=host)
    return text


def read_key(path: str | Path, host: str | None = None) -> str:
    """The key in ``path`` (refused: unreadable, larger than a key file, readable by others)."""
    where = f"specdec_api_key_file={show(str(path))}"
    return check_key(read_private(path, where, host), where, host)


def read_private(path: str | Path, where: str, host: str | None = None) -> str:
    """A small secret file of this user's: a regular file (a FIFO or device is refused, never
    waited on), not readable by others, at most `MAX_FILE_BYTES`."""
    try:  # without blocking or following a link: a FIFO or device is refused, never waited on
        data, st = read_file_head(path, MAX_FILE_BYTES, follow=False)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})",
                          host=host) from None
    if st.st_mode & 0o077:
        raise ConfigError(f"{where}: is readable by others (chmod 600)", host=host)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: is larger than {MAX_FILE_BYTES} bytes (not a key file)",
                          host=host)
    return data.decode("utf-8", "replace")


def _new_key() -> str:
    return "sdk_" + "".join(secrets.choice(_ALPHABET) for _ in range(40))


def _write_new(p: Path, text: str) -> bool:
    """``text`` into ``p``, created 0600 (False: it exists already)."""
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return True


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
    key = _new_key()
    if not _write_new(p, key + "\n"):  # another run made it meanwhile
        return read_key(p, host)
    return key


def _old(path: Path) -> Path:
    return path.with_name(path.name + OLD)


def old_key(path: str | Path, host: str | None = None) -> str | None:
    """The key being retired beside ``path`` (``<path>.old``), or None."""
    old = _old(Path(path).expanduser())
    return read_key(old, host) if old.exists() or old.is_symlink() else None


def rotate(path: str | Path, host: str | None = None) -> str:
    """A new key in ``path``; the current one moves to ``<path>.old`` (accepted until
    `retire`). Refused while a retiring key is still there: two rotations would drop a key
    clients may still use without warning."""
    p = Path(path).expanduser()
    current = read_key(p, host)
    old = _old(p)
    if old.exists() or old.is_symlink():
        raise ConfigError(f"{show(str(old))}: a rotated-out key is still accepted; retire it "
                          "first (specdec keys retire)", host=host)
    if not _write_new(old, current + "\n"):
        raise ConfigError(f"{show(str(old))}: appeared meanwhile; not rotating", host=host)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.new")
    tmp.unlink(missing_ok=True)
    key = _new_key()
    _write_new(tmp, key + "\n")
    tmp.replace(p)
    return key


def retire(path: str | Path) -> bool:
    """Delete the rotated-out key beside ``path``; False when there was none."""
    old = _old(Path(path).expanduser())
    if not (old.exists() or old.is_symlink()):
        return False
    old.unlink()
    return True
