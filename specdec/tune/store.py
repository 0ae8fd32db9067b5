"""Where the tune cache lives: one stated location for every entry point, and the store there.

The tune cache is the inventory's state: ``specdec rollout``, a plain ``pyinfra`` run and
``specdec plan`` read and write the same location, whichever directory they run from.
The location is, first found:

1. ``--tune-cache`` (``specdec rollout`` / ``specdec plan``; passed on to pyinfra as the
   variable below);
2. ``$SPECDEC_TUNE_CACHE``;
3. ``specdec_tune_cache`` in the host's data (relative paths: from the inventory file's
   directory, like the inventory's own files);
4. ``tune-cache/`` in the inventory's state directory (`specdec.config.state`), unless a
   ``tune-cache/`` beside the inventory file holds one already (where it lived before).

A location is a directory (`DirStore`), or a URL whose scheme a store was registered for
(`register_scheme`: the shard work backs one with etcd). A store holds one JSON text per entry
id; what an entry means is `specdec.tune.cache`'s.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from specdec.config import state
from specdec.errors import ConfigError

__all__ = ["DEFAULT_NAME", "ENV", "KEY", "MAX_ENTRY_BYTES", "DirStore", "TuneStore", "as_store",
           "check_location", "location", "open_store", "register_scheme"]

ENV = "SPECDEC_TUNE_CACHE"
KEY = "specdec_tune_cache"
DEFAULT_NAME = "tune-cache"
MAX_ENTRY_BYTES = 2**20  # an entry is a few KiB; anything larger is not one
_ENTRY = re.compile(r"[0-9a-f]{6,64}")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://")


class TuneStore(Protocol):
    """Entries by id (hex): read one, write one (whole, atomically), say where."""

    @property
    def location(self) -> str: ...

    def read(self, entry: str) -> str | None: ...

    def write(self, entry: str, text: str) -> str: ...


def _check_entry(entry: str) -> str:
    if not _ENTRY.fullmatch(entry):
        raise ValueError(f"tune cache entry id {entry!r}: not a hex id")
    return entry


class DirStore:
    """A directory of ``<entry>.json`` files, each replaced atomically (rename), so readers on
    other control nodes sharing the directory (NFS, a synced folder) see whole entries only."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def location(self) -> str:
        return str(self.root)

    def path(self, entry: str) -> Path:
        return self.root / f"{_check_entry(entry)}.json"

    def read(self, entry: str) -> str | None:
        """The entry's text; None when absent. An entry is input anyone with access to the
        directory could have written: a symlink, a non-regular file or more than
        `MAX_ENTRY_BYTES` raises ValueError (OSError when unreadable)."""
        path = self.path(entry)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            raise ValueError("not a regular file of at most 1 MiB")
        with open(path, "rb") as fh:
            return fh.read(MAX_ENTRY_BYTES + 1).decode("utf-8", errors="replace")

    def write(self, entry: str, text: str) -> str:
        path = self.path(entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{entry}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return str(path)

    def __repr__(self) -> str:
        return f"DirStore({str(self.root)!r})"


_OPENERS: dict[str, Callable[[str], TuneStore]] = {}


def register_scheme(scheme: str, opener: Callable[[str], TuneStore]) -> None:
    """Let locations ``<scheme>://…`` open with ``opener`` (e.g. an etcd-backed store)."""
    _OPENERS[scheme] = opener


def open_store(where: str) -> TuneStore:
    """The store at a location: a registered URL scheme, else a directory."""
    m = _SCHEME.match(where)
    if m is None:
        return DirStore(Path(where))
    opener = _OPENERS.get(m.group(1))
    if opener is None:
        raise ConfigError(f"tune cache {where!r}: {_no_store(m.group(1))}")
    return opener(where)


def _no_store(scheme: str) -> str:
    known = ", ".join(sorted(_OPENERS)) or "none registered"
    return f"no store for {scheme}:// (known: {known}); use a directory"


def as_store(where: TuneStore | str | Path) -> TuneStore:
    """A store, a location string, or a directory path, as a store."""
    if isinstance(where, Path):
        return DirStore(where)
    if isinstance(where, str):
        return open_store(where)
    return where


def check_location(source: str, value: str, host: str | None = None) -> str:
    """A tune cache location as given (``source``: where from): one line, a directory or a URL
    of a registered scheme."""
    if not value or "\n" in value or "\0" in value or len(value) > 4096:
        raise ConfigError(f"{source}={value[:60]!r}: a tune cache location is a directory or a "
                          "URL (one line)", host=host)
    m = _SCHEME.match(value)
    if m is not None and m.group(1) not in _OPENERS:
        raise ConfigError(f"{source}={value[:60]!r}: {_no_store(m.group(1))}", host=host)
    return value


def location(explicit: str | None = None, inventory: str | Path | None = None,
             data_value: str | None = None, env: Mapping[str, str] | None = None,
             host: str | None = None) -> str:
    """The tune cache location by the rules of the module doc (directories absolute);
    ``host``: whose data it comes from (named in an error)."""
    env = os.environ if env is None else env
    inv = Path(inventory) if inventory is not None else None
    inv_dir = inv.resolve().parent if inv is not None and inv.is_file() else None
    for source, value, base in (("--tune-cache", explicit, None),
                                (ENV, env.get(ENV, "").strip() or None, None),
                                (KEY, data_value, inv_dir)):
        if value is None:
            continue
        check_location(source, value, host)
        if _SCHEME.match(value):
            return value
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return str(Path(os.path.normpath(path)))
    if inv_dir is not None and (inv_dir / DEFAULT_NAME).is_dir():
        return str(inv_dir / DEFAULT_NAME)
    return str(state.for_inventory(inv if inv_dir is not None else None, env=env) / DEFAULT_NAME)
