"""`specdec` command line: dispatches to one module per command group."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from specdec.errors import SpecdecError

__all__ = ["main"]

# Each module defines register(subparsers) which adds its commands and sets
# `func(args) -> int` on the parser via set_defaults(func=...).
COMMAND_MODULES = (
    "specdec.commands.plan",  # plan, render, identify
    "specdec.commands.lab",  # lab up|down|status|engine
    "specdec.commands.bench",  # bench, gate
    "specdec.commands.rollout",  # rollout, report
    "specdec.commands.watch",  # watch
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec", description="Speculative decoding rollout for Jetson Orin and DGX Spark."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command group not built yet
                continue
            raise
        module.register(sub)
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
