"""The `specdec` command line: one module per command group (`plan`, `identify`, `bench`,
`rollout`, `watch`, `keys`), and the commands other packages register (the lab's `specdec lab`).

May import every other package of specdec (it is the top layer); nothing imports it but
``specdec.__main__`` and the ``specdec`` script."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any, NoReturn

from specdec.errors import SpecdecError

__all__ = ["main"]

# Each command's module: register(subparsers) adds its commands and sets `func(args) -> int`
# on each parser via set_defaults(func=...). Only the module of the command given is imported,
# so `specdec identify` stays light (it runs on devices) and `--help` fast.
COMMANDS = {
    "plan": ("specdec.cli.plan", "show each host's plan (offline)"),
    "render": ("specdec.cli.plan", "write one host's release files under a directory"),
    "identify": ("specdec.cli.identify", "identify this machine (or a root) as a device"),
    "bench": ("specdec.cli.bench", "benchmark an OpenAI-compatible server"),
    "gate": ("specdec.cli.bench", "keep / disable / inconclusive from two bench results"),
    "rollout": ("specdec.cli.rollout", "deploy batch by batch (canary first), stop on failures, "
                                       "report"),
    "report": ("specdec.cli.rollout", "print a rollout's fleet summary (Markdown)"),
    "watch": ("specdec.cli.watch", "live acceptance and estimated speed-up per host, against "
                                   "what the gate measured"),
    "keys": ("specdec.cli.keys", "an inventory's API keys (show, rotate, retire) and its CA"),
}
EXIT_STATUS = """exit status:
  0  done (gate: keep speculation)
  1  a failure (a host failed, a server or a device misbehaved)
  2  bad input (inventory, host data, flags, files): refused before any host changed
  3  rollout: only unreachable hosts left (--resume finishes them); gate: disable speculation
  4  gate: inconclusive (measure more)"""

# Other packages add commands through this entry-point group, one command per entry point of
# that name (the lab: `specdec lab`).
PLUGIN_GROUP = "specdec.commands"


def _plugin(name: str) -> Callable[[Any], None] | None:
    """The ``register`` of the installed plugin ``name``. None when its package is not
    installed (a product-only install has no ``specdec_lab``); any other import error is a
    broken install and is raised."""
    for ep in entry_points(group=PLUGIN_GROUP, name=name):
        try:
            register: Callable[[Any], None] = ep.load()
        except ModuleNotFoundError as exc:
            if exc.name != ep.module.split(".")[0]:
                raise
            return None
        return register
    return None


def _plugin_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=PLUGIN_GROUP) if ep.name not in COMMANDS)


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def _version() -> str:
    try:
        return version("specdec")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse with a bad argument as one line, as every other error (exit 2): no usage
    block, the value cut as `show` cuts it (argparse quotes a bad value whole)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        if len(text) > 200:
            text = text[:200] + "…"
        self.exit(2, f"specdec: error: {self.prog.removeprefix('specdec ')}: {text} "
                     f"(see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser, with the full arguments of the command ``argv`` names (every command's,
    when it names none: the help lists them all, the plugins' apart, after the product's)."""
    parser = _Parser(
        prog="specdec", description="Speculative decoding rollout for Jetson Orin and DGX Spark.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specdec {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _command_of(argv)
    if chosen in COMMANDS:
        importlib.import_module(COMMANDS[chosen][0]).register(sub)
    for name, (_, help_) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_)
    product = len(sub._choices_actions)
    for name in _plugin_names():
        if chosen in (name, None) and (register := _plugin(name)) is not None:
            register(sub)
    extra = sub._choices_actions[product:]  # listed apart: not part of the product
    del sub._choices_actions[product:]
    parser.epilog = EXIT_STATUS + ("\n\ntest infrastructure (installed plugins):\n" + "\n".join(
        f"  {a.dest:<10}  {a.help}" for a in extra) if extra else "")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    try:
        return int(args.func(args) or 0)
    except SpecdecError as exc:
        for line in str(exc).splitlines():  # `Problems`: one line each
            print(f"specdec: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `specdec plan … | head`: the reader is gone, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
