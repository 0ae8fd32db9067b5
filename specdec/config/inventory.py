"""Read a pyinfra inventory file offline with pyinfra's own CLI loader.

``group_data/*.py`` next to the inventory and in the current directory apply exactly as with
``pyinfra INVENTORY ...`` (file name = group name; inventory-dir files win). This is the only
library module besides the rollout driver that imports pyinfra.

Importing ``pyinfra_cli`` monkey-patches the whole interpreter for gevent (``patch_all()``),
which would break asyncio/httpx code in the caller. So unless the caller already runs under
pyinfra's CLI, the loader runs in a child interpreter (``python -m specdec.config.inventory``) and
hands
back JSON.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from specdec.errors import ConfigError

__all__ = ["excluding", "load_inventory"]

_Host = tuple[str, list[str], dict[str, Any]]


def _one_line(exc: BaseException) -> str:
    # pyinfra's UnexpectedExternalError wraps the real error (and has no usable str()).
    inner = getattr(exc, "exception", None)
    if isinstance(inner, BaseException):
        where = getattr(exc, "filename", None)
        text = f"{type(inner).__name__}: {' '.join(str(inner).split())}"
        return f"{text} (in {where})" if where else text
    try:
        text = " ".join(str(exc).split())
    except Exception:
        text = ""
    return text or type(exc).__name__


def _load_in_process(path: str, cwd: str) -> list[_Host]:
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    if cwd not in sys.path:  # as the pyinfra CLI does, so inventories can import local modules
        sys.path.append(cwd)
    # The loader records the file being executed on the current State, as under the CLI.
    with ctx_state.use(State()):
        inventory = make_inventory(path, cwd=cwd)
    hosts: list[_Host] = []
    for host in inventory:
        groups = sorted({str(g) for g in getattr(host, "groups", ())})
        hosts.append((host.name, groups, dict(host.data.dict())))
    return hosts


def _jsonable(value: Any) -> Any:
    return repr(value)


def _load_in_child(path: str, cwd: str) -> list[_Host]:
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])  # works from a plain checkout too
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "specdec.config.inventory", path, cwd],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"inventory {path!r}: cannot run the loader: {exc}") from None
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        err = " ".join(out.stderr.strip().splitlines()[-1:]) or f"exit {out.returncode}"
        raise ConfigError(f"inventory {path!r}: loader failed: {err}")
    if "error" in result:
        raise ConfigError(f"inventory {path!r}: {result['error']}")
    return [(h[0], list(h[1]), dict(h[2])) for h in result["hosts"]]


def _matches(name: str, groups: list[str], patterns: list[str]) -> bool:
    return any(p in groups or fnmatch.fnmatchcase(name, p) for p in patterns)


def load_inventory(path: str, limit: str | None = None,
                   flag: str = "--limit") -> list[tuple[str, dict[str, Any]]]:
    """Hosts of the inventory file as ``(name, merged data)``, in inventory order.

    ``limit``: comma-separated host names, globs or group names (like ``pyinfra --limit``);
    ``flag``: its name in the error when it matches nothing.
    """
    if not Path(path).is_file():
        raise ConfigError(f"inventory {path!r}: no such file")
    cwd = os.getcwd()
    if "pyinfra_cli" in sys.modules:  # already patched: load here
        try:
            loaded = _load_in_process(path, cwd)
        except Exception as exc:
            raise ConfigError(f"inventory {path!r}: {_one_line(exc)}") from None
    else:
        loaded = _load_in_child(str(Path(path).resolve()), cwd)

    patterns = [p.strip() for p in (limit or "").split(",") if p.strip()]
    hosts = [(name, data) for name, groups, data in loaded
             if not patterns or _matches(name, groups, patterns)]
    if patterns and not hosts:
        raise ConfigError(f"{flag}={limit!r}: matches no host or group in {path}")
    if not hosts:
        raise ConfigError(f"inventory {path!r}: no hosts")
    return hosts


def excluding(path: str, limit: str | None, exclude: str | None) -> str | None:
    """The ``--limit`` that targets what ``limit`` does without what ``exclude`` matches (host
    names, globs or groups, comma-separated); ``limit`` itself when nothing is excluded."""
    if not exclude:
        return limit
    gone = {name for name, _ in load_inventory(path, exclude, "--exclude")}
    left = [name for name, _ in load_inventory(path, limit) if name not in gone]
    if not left:
        raise ConfigError(f"--exclude={exclude!r}: leaves no host of {path}"
                          + (f" --limit {limit}" if limit else ""))
    return ",".join(left)


def _main(argv: list[str]) -> int:
    path, cwd = argv[0], argv[1]
    try:
        hosts = _load_in_process(path, cwd)
        payload: dict[str, Any] = {"hosts": hosts}
    except Exception as exc:
        payload = {"error": _one_line(exc)}
    print(json.dumps(payload, default=_jsonable))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
