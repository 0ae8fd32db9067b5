"""Facts read once per host per run: a no-op re-run costs a round trip per host, not per fact.

pyinfra 3.10 caches no fact (``Host.get_fact`` runs the fact's command every time) and runs
operations in lockstep (every host finishes operation k before k+1 starts,
``api/operations.py`` ``_run_single_op``), so each operation that reads a fact costs every host
an SSH round trip, and a run takes the slowest link's round trips times the operations.
`install` wraps each host's ``get_fact``:

* prepare (read-only): each distinct fact (class, arguments, escalation) is read once and kept;
  `prefetch` first reads, in one command, the facts the last run on this control node asked
  of the host (``reports/cache/<host>/facts.json``, written by `save` when the lock is
  released: fact classes of pyinfra and `specdec.roles.facts`, their arguments, escalation without
  passwords or environment). With ``pyinfra -y`` (and `specdec rollout`) pyinfra skips change
  detection, so operations read their facts only while executing: the list is what makes
  the next run read them all in one command;
* `refresh`, run by the deploy lock once it is held: every kept fact is read again in **one**
  command (`FactBatch`), so what the operations see is the host under the lock;
* execution: a kept fact is answered from that read until this run changes the host (a fact
  not kept is read live, and kept while the host is unchanged): the first
  command of an operation, an upload, a Python callback's command (anything but the lock's own
  commands, `lock_only`) makes the host *dirty*, and every read after that is live again.

A fact not kept, a part that failed or printed nothing it could parse, and every read on a
host whose lock was not taken (pyinfra's ``@fake`` hosts by default) are read live, as pyinfra
does; ``SPECDEC_FACT_CACHE=off`` (on the control node) reads every fact live.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase, StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.context import ContextObject
from typing_extensions import override

from specdec.config.rawinput import ascii_int

__all__ = ["FACTS_MANIFEST", "OFF_ENV", "FactBatch", "install", "lock_only", "prefetch",
           "refresh", "save", "stats"]

OFF_ENV = "SPECDEC_FACT_CACHE"
_PART = "@@specdec-fact"
_MISSING = "##PYINFRA_NOCMD##"  # pyinfra 3.10 api/facts.py: the absent requires_command mark
# what a manifest may name (anything else in it is ignored), and the escalation it records
_MODULES = ("specdec.roles.facts", "pyinfra.facts.files", "pyinfra.facts.server",
"pyinfra.facts.systemd")
_SAFE_CONN = ("_sudo", "_sudo_user", "_use_sudo_login", "_preserve_sudo_env", "_su_user",
              "_use_su_login", "_preserve_su_env", "_su_shell", "_doas", "_doas_user", "_dzdo",
              "_dzdo_user", "_shell_executable", "_chdir")
_MANIFEST_MAX = 256 * 1024
FACTS_MANIFEST = "facts.json"
# escalation and shell: a fact read with other ones is another fact
_CONN_KEYS = tuple(k for k in CONNECTOR_ARGUMENT_KEYS
                   if k not in ("_timeout", "_get_pty", "_stdin", "_success_exit_codes"))


@dataclass
class _Cache:
    kept: dict[tuple, tuple[type, dict[str, Any], dict[str, Any], Any]] = field(
        default_factory=dict)  # key -> (class, fact kwargs, connector kwargs, value)
    fresh: bool = False  # refreshed under the lock: execution may be answered from it
    dirty: bool = False  # this run changed the host since
    quiet: int = 0  # inside the lock's own commands (not a change of the host)
    reading: int = 0  # inside a fact read
    live_reads: int = 0
    served: int = 0
    # asked for in this run: key -> (class, fact kwargs, connector kwargs), for the manifest;
    # `prepared`: of them, those asked for in prepare
    used: dict[tuple, tuple[type, dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    prepared: set[tuple] = field(default_factory=set)
    # what the last run's operations read (the manifest's "execute" entries): read by `refresh`
    wanted: dict[tuple, tuple[type, dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    resolved: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # `_resolved`
    manifest: Path | None = None


class FactBatch(FactBase[list]):
    """Many facts in one command: each part's output between markers, with its exit status.

    ``parts``: (fact class, its keyword arguments); the value is one ``(ok, value)`` per part,
    ``ok`` False when the part failed, needed an absent command or could not be processed."""

    @override
    def command(self, parts: tuple[tuple[type, dict[str, Any]], ...]) -> StringCommand:
        # markers with a nonce of this read: no file or output on the host can forge one
        self._mark = f"{_PART}-{secrets.token_hex(8)}"
        self._facts: list[FactBase] = []
        bits: list[Any] = []
        for n, (cls, kwargs) in enumerate(parts):
            fact = cls()
            self._facts.append(fact)
            cmd = _call(fact.command, kwargs)
            needs = _call(fact.requires_command, kwargs)
            if needs:
                cmd = StringCommand("if", "command", "-v", needs, ">/dev/null", "2>&1;", "then",
                                    "(", cmd, ");", "else", "echo", f"'{_MISSING}';", "fi")
            bits += ["echo", f"'{self._mark} {n}';", "(", cmd, ")", "2>/dev/null;", "echo",
                     f"\"{self._mark}-rc {n} $?\";"]
        return StringCommand(*bits, "true")

    @override
    def process(self, output: list[str]) -> list:
        mark = getattr(self, "_mark", _PART)
        chunks: dict[int, list[str]] = {}
        status: dict[int, int] = {}
        cur: list[str] | None = None
        for line in output:
            words = line.split()
            nums = [ascii_int(w) for w in words[1:]]
            if len(words) == 2 and words[0] == mark and nums[0] is not None:
                cur = chunks.setdefault(nums[0], [])
            elif len(words) == 3 and words[0] == mark + "-rc" and None not in nums:
                status[nums[0]] = nums[1]  # type: ignore[index]
                cur = None
            elif cur is not None:
                cur.append(line)
        out: list = []
        for n, fact in enumerate(getattr(self, "_facts", [])):
            lines = chunks.get(n)
            if lines is None or status.get(n) != 0 or lines == [_MISSING]:
                out.append((False, None))
                continue
            try:
                out.append((True, fact.process(lines) if lines else fact.default()))
            except Exception:  # noqa: BLE001 - read it live: pyinfra reports it there
                out.append((False, None))
        return out


def _call(attr: Any, kwargs: dict[str, Any]) -> Any:
    return attr(**kwargs) if callable(attr) else attr


def _real(host: Any) -> Any:
    """The `Host` itself, also when given pyinfra's context proxy (``from pyinfra import host``)."""
    return host._get_module() if isinstance(host, ContextObject) else host


def _cache(host: Any) -> _Cache:
    host = _real(host)
    c = host.__dict__.get("_specdec_facts")
    if c is None:
        c = host._specdec_facts = _Cache()
    return c


def _key(host: Any, cls: type, args: tuple, kwargs: dict[str, Any]
         ) -> tuple[tuple, dict[str, Any], dict[str, Any]] | None:
    if not (isinstance(cls, type) and issubclass(cls, FactBase)) or cls is FactBatch \
            or getattr(cls, "shell_executable", None) \
            or cls.check_preconditions is not FactBase.check_preconditions:
        return None  # read as pyinfra reads it: its own shell, its own preconditions
    # the arguments the read runs with, resolved as pyinfra resolves them (api/facts.py
    # _handle_fact_kwargs): the operation's, the deploy's, the host's data, the config
    ctx = dict(host.current_op_global_arguments or {})
    ctx.update({k: v for k, v in kwargs.items() if k.startswith("_")})
    conn = _resolved(host, ctx)
    if conn is None:
        return None
    fkw = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    try:
        if args or fkw:
            fkw = inspect.getcallargs(cls().command, *args, **fkw)
            fkw.pop("self", None)
        key = (cls, repr(sorted(fkw.items())), repr(sorted(conn.items())))
        hash(key)
    except (TypeError, ValueError):
        return None
    return key, fkw, conn


def _resolved(host: Any, ctx: dict[str, Any]) -> dict[str, Any] | None:
    """The connector arguments of a read with ``ctx``, as ``pop_global_arguments`` resolves
    them; remembered per host for the same context (it evaluates every argument's type hints
    on each call: about 1 ms, which every fact read of every host paid)."""
    cache = _cache(host)
    # the connector arguments depend only on ctx's own connector keys (and the deploy's)
    memo = (repr(sorted((k, v) for k, v in ctx.items() if k in _CONN_KEYS)),
            repr(sorted((host.current_deploy_kwargs or {}).items())))
    if memo in cache.resolved:
        return dict(cache.resolved[memo])
    try:
        resolved, _ = pop_global_arguments(host.state, host, dict(ctx))
    except Exception:  # noqa: BLE001 - pyinfra says what is wrong when it reads the fact
        return None
    ga: dict[str, Any] = dict(resolved)
    cache.resolved[memo] = {k: ga[k] for k in _CONN_KEYS if k in ga}
    return dict(cache.resolved[memo])


def install(host: Any, manifest: Path | None = None) -> None:
    """Answer ``host``'s facts as the module says (once per host; idempotent); ``manifest``:
    where the facts this run asks for are listed for the next run's `prefetch`."""
    host = _real(host)
    if "_specdec_facts" in host.__dict__ or os.environ.get(OFF_ENV, "").lower() in (
            "off", "0", "false", "no"):
        return
    cache = _cache(host)
    cache.manifest = manifest
    live_fact = type(host).get_fact  # late-bound: a test's replacement is honoured
    live_run = host.run_shell_command
    live_put = host.put_file

    def get_fact(cls: Any, *args: Any, **kwargs: Any) -> Any:
        found = _key(host, cls, args, kwargs)
        if found is None:
            return _live(cls, args, kwargs)
        key, fkw, conn = found
        cache.used.setdefault(key, (cls, fkw, conn))
        executing = bool(host.state.is_executing)
        if not executing:
            cache.prepared.add(key)
        current = not executing or (cache.fresh and not cache.dirty)
        if key in cache.kept and current:
            cache.served += 1
            return copy.deepcopy(cache.kept[key][3])
        value = _live(cls, args, kwargs)
        if current:  # the host as this run found it: later reads are answered from this one
            cache.kept[key] = (cls, fkw, conn, copy.deepcopy(value))
        return value

    def _live(cls: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        cache.reading += 1
        cache.live_reads += 1
        try:
            return live_fact(host, cls, *args, **kwargs)
        finally:
            cache.reading -= 1

    def run_shell_command(*args: Any, **kwargs: Any) -> Any:
        if not cache.reading and not cache.quiet and host.state.is_executing:
            cache.dirty = True
        return live_run(*args, **kwargs)

    def put_file(*args: Any, **kwargs: Any) -> Any:
        if host.state.is_executing:
            cache.dirty = True
        return live_put(*args, **kwargs)

    host.get_fact = get_fact
    host.run_shell_command = run_shell_command
    host.put_file = put_file


@contextlib.contextmanager
def lock_only(host: Any) -> Iterator[None]:
    """Commands that touch only the deploy lock: not a change of what the facts describe."""
    cache = _real(host).__dict__.get("_specdec_facts")
    if cache is None:  # not installed (e.g. deploys/recover.py): every read is live anyway
        yield
        return
    cache.quiet += 1
    try:
        yield
    finally:
        cache.quiet -= 1


def refresh(host: Any) -> int:
    """Read every kept fact again in one command per escalation (under the deploy lock) and
    answer execution from that; returns how many parts were read. A part that failed is
    dropped (read live later)."""
    host = _real(host)
    if "_specdec_facts" not in host.__dict__:
        return 0
    cache = _cache(host)
    if cache.dirty:
        return 0
    read = {k: (cls, fkw, conn) for k, (cls, fkw, conn, _) in cache.kept.items()}
    read.update((k, v) for k, v in cache.wanted.items() if k not in read)
    groups: dict[str, list[tuple]] = {}
    for key, (_, _, conn) in read.items():
        groups.setdefault(repr(sorted(conn.items())), []).append(key)
    n = 0
    for keys in groups.values():
        conn = read[keys[0]][2]
        parts = tuple((read[k][0], read[k][1]) for k in keys)
        cache.reading += 1
        try:
            got = type(host).get_fact(host, FactBatch, parts=parts, **conn)
        finally:
            cache.reading -= 1
        if not isinstance(got, list) or len(got) != len(keys):
            got = [(False, None)] * len(keys)
        for k, (ok, value) in zip(keys, got, strict=True):
            if ok:
                cls, fkw, c = read[k]
                cache.kept[k] = (cls, fkw, c, value)
                n += 1
            else:
                cache.kept.pop(k, None)
    cache.fresh = True
    return n


def save(host: Any) -> None:
    """Write the manifest of the facts this run asked of ``host`` (at the lock's release, so
    it lists what the operations read too, for the next run's `prefetch` and `refresh`)."""
    cache = _real(host).__dict__.get("_specdec_facts")
    if cache is not None and cache.used:
        _write_manifest(cache)


def prefetch(host: Any) -> int:
    """In prepare: read the facts the manifest lists as read in prepare, in one command per
    escalation, and keep them; those it lists as read by the operations are left to `refresh`
    (read once, under the lock). A missing, unreadable or foreign manifest: nothing. Returns
    how many were kept."""
    host = _real(host)
    cache = host.__dict__.get("_specdec_facts")
    if cache is None or cache.manifest is None or host.state.is_executing:
        return 0
    groups: dict[str, list[tuple[tuple, type, dict[str, Any], dict[str, Any]]]] = {}
    for cls, fkw, conn, when in _read_manifest(cache.manifest):
        found = _key(host, cls, (), {**fkw, **conn})
        if found is not None and when == "execute":
            cache.wanted[found[0]] = (cls, found[1], found[2])
        elif found is not None and found[0] not in cache.kept:
            groups.setdefault(repr(sorted(conn.items())), []).append((found[0], cls, found[1],
                                                                       found[2]))
    n = 0
    for entries in groups.values():
        parts = tuple((cls, fkw) for _, cls, fkw, _ in entries)
        conn = {k: v for k, v in entries[0][3].items() if k in _SAFE_CONN}
        cache.reading += 1
        try:
            got = type(host).get_fact(host, FactBatch, parts=parts, **conn)
        except Exception:  # noqa: BLE001 - each fact is then read on its own, as pyinfra does
            continue
        finally:
            cache.reading -= 1
        if not isinstance(got, list) or len(got) != len(entries):
            continue
        for (key, cls, fkw, c), (ok, value) in zip(entries, got, strict=True):
            if ok:
                cache.kept[key] = (cls, fkw, c, value)
                n += 1
    return n


def _read_manifest(path: Path) -> list[tuple[type, dict[str, Any], dict[str, Any], str]]:
    try:
        if path.stat().st_size > _MANIFEST_MAX:
            return []
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out = []
    for entry in doc if isinstance(doc, list) else []:
        if not isinstance(entry, dict):
            continue
        name, fkw, conn = entry.get("fact"), entry.get("kwargs"), entry.get("conn")
        mod, _, attr = name.partition(":") if isinstance(name, str) else ("", "", "")
        if mod not in _MODULES or not isinstance(fkw, dict) or not isinstance(conn, dict):
            continue
        cls = getattr(importlib.import_module(mod), attr, None)
        if not (isinstance(cls, type) and issubclass(cls, FactBase)) or cls is FactBatch:
            continue
        if any(k not in _SAFE_CONN or not isinstance(v, str | bool | None)
               for k, v in conn.items()):
            continue
        if not all(isinstance(k, str) and _plain(v) for k, v in fkw.items()):
            continue
        when = entry.get("when", "prepare")
        out.append((cls, fkw, conn, when if when in ("prepare", "execute") else "prepare"))
    return out


def _plain(v: Any) -> bool:
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    return isinstance(v, str | int | float | bool | None)


def _write_manifest(cache: _Cache) -> None:
    if cache.manifest is None:
        return
    entries = []
    for key, (cls, fkw, conn) in cache.used.items():
        if cls.__module__ not in _MODULES or not all(_plain(v) for v in fkw.values()):
            continue
        entries.append({"fact": f"{cls.__module__}:{cls.__name__}", "kwargs": fkw,
                        "conn": {k: v for k, v in conn.items()
                                 if k in _SAFE_CONN and isinstance(v, str | bool | None)},
                        "when": "prepare" if key in cache.prepared else "execute"})
    entries.sort(key=lambda e: json.dumps(e, sort_keys=True))
    tmp = cache.manifest.with_name(f".{cache.manifest.name}.{os.getpid()}")
    try:
        cache.manifest.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entries, sort_keys=True) + "\n")
        tmp.replace(cache.manifest)
    except OSError:
        tmp.unlink(missing_ok=True)


def stats(host: Any) -> dict[str, int]:
    """Live reads and answers from the cache so far (tests, and ``-v`` output)."""
    c = _cache(host)
    return {"live": c.live_reads, "served": c.served, "kept": len(c.kept)}
