"""Writing systemd units and other rendered files: argv quoting for ``ExecStart=``,
``Environment=`` values, and the Jinja templates of ``templates/`` (every value one line)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2

from specdec.config.hygiene import bad_char, show
from specdec.errors import RenderError

__all__ = ["TEMPLATES_DIR", "Specified", "env_assignment", "exec_line", "secret_env_argv",
           "systemd_quote", "template", "unit_text"]

TEMPLATES_DIR = Path(str(resources.files("specdec.templates")))  # the repository's templates/
_SAFE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


class Specified(str):
    """An argv word that starts with a systemd specifier specdec writes itself (``%d/NAME``:
    the credentials directory, systemd.unit(5) "Specifiers"); never a value from host data."""

    def __new__(cls, specifier: str, rest: str) -> Specified:
        if specifier != "%d" or not _SAFE.fullmatch(rest):
            raise ValueError(f"not a specifier word: {specifier}{rest}")
        return super().__new__(cls, specifier + rest)


def systemd_quote(arg: str) -> str:
    """One argv word for ``ExecStart=``: quoted if needed, ``%`` and ``$`` escaped (but the
    leading specifier of a `Specified` word)."""
    if isinstance(arg, Specified):
        return str(arg)
    if _SAFE.fullmatch(arg):
        word = arg
    else:
        word = "'" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return word.replace("%", "%%").replace("$", "$$")


def exec_line(argv: Sequence[str]) -> str:
    """An ``ExecStart=`` value: every word quoted for systemd."""
    return " ".join(systemd_quote(a) for a in argv)


def secret_env_argv(pairs: Sequence[tuple[str, str]], directory: str,
                    argv: Sequence[str]) -> list[str]:
    """``argv`` run by ``sh`` with each variable of ``pairs`` (variable, file name) read from a
    file in ``directory`` (a systemd credentials directory, or a container's secrets mount):
    for programs that take a secret only from their environment. The values are in no argv,
    unit or ``docker inspect``; a missing or unreadable file stops the start (``set -e``)."""
    if not pairs:
        return list(argv)
    reads = "; ".join(f'{var}=$(cat "{directory}/{name}")' for var, name in pairs)
    names = " ".join(var for var, _ in pairs)
    return ["/bin/sh", "-c", f'set -e; {reads}; export {names}; exec "$@"', "sh", *argv]


def env_assignment(name: str, value: str) -> str:
    """The value of one ``Environment=`` line (``%`` escaped; ``$`` is literal there)."""
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"' if not _SAFE.fullmatch(f"{name}={value}") else text


def _one_line(value: object) -> object:
    """Every ``{{ … }}`` of every template: a value can never add a line to a rendered file
    (host data is validated long before; this is the last line of defence)."""
    if isinstance(value, str) and (c := bad_char(value)) is not None:
        raise RenderError(f"refusing to render {show(value)}: contains a line break or "
                          f"control character ({c})")
    return value


def unit_text(value: object) -> str:
    """Free text in a unit setting such as ``Description=``: systemd expands ``%`` specifiers
    there (systemd.unit(5), "Specifiers"), so a literal ``%`` is written ``%%``."""
    return str(_one_line(str(value))).replace("%", "%%")


@cache
def _env() -> jinja2.Environment:
    if not TEMPLATES_DIR.is_dir():
        raise RenderError(f"templates directory {TEMPLATES_DIR} is missing")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_one_line,
    )
    env.filters["unit_text"] = unit_text
    return env


def template(name: str, **ctx: object) -> str:
    """``templates/<name>`` rendered with ``ctx``."""
    try:
        return _env().get_template(name).render(**ctx)
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {name}: {exc}") from None
