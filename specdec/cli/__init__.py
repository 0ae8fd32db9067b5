"""The `specdec` command line: one module per command group (`plan`, `bench`, `rollout`,
`watch`), and the groups other packages register (the lab's `specdec lab`).

May import every other package of specdec (it is the top layer); nothing imports it but
``specdec.__main__`` and the ``specdec`` script."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from specdec.errors import SpecdecError

__all__ = ["main"]

# Each module defines register(subparsers) which adds its commands and sets
# `func(args) -> int` on the parser via set_defaults(func=...).
COMMAND_MODULES = (
    "specdec.cli.plan",  # plan, render, identify
    "specdec.cli.bench",  # bench, gate
    "specdec.cli.rollout",  # rollout, report
    "specdec.cli.watch",  # watch
)
# Other packages add command groups through this entry-point group (the lab: `specdec lab`).
PLUGIN_GROUP = "specdec.commands"


def _plugins() -> list[Callable[[Any], None]]:
    """The ``register`` of every installed command plugin. A plugin whose package is not
    installed (a product-only install has no ``specdec_lab``) is left out; any other import
    error is a broken install and is raised."""
    out = []
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            out.append(ep.load())
        except ModuleNotFoundError as exc:
            if exc.name != ep.module.split(".")[0]:
                raise
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec", description="Speculative decoding rollout for Jetson Orin and DGX Spark."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for register in _plugins():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecdecError as exc:
        print(f"specdec: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
