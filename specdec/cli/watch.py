"""``specdec watch INVENTORY``: is speculation still paying on each host's own traffic?"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

from specdec.config import state
from specdec.config.apikey import read_private
from specdec.config.hygiene import is_loopback, show
from specdec.config.inventory import load_inventory
from specdec.config.rawinput import ascii_int, check_options_given
from specdec.errors import ConfigError
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.report.fleet import reports_root
from specdec.watch import expose
from specdec.watch.run import Options, Target, Watch, rows_json
from specdec.watch.ssh import connection
from specdec.watch.table import table

__all__ = ["parse_address", "register", "targets"]


def register(subparsers: Any) -> None:
    w = subparsers.add_parser(
        "watch", help="live acceptance, batch sizes and estimated speed-up per host, "
                      "against what the gate measured; verdicts, exposition")
    w.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    w.add_argument("--limit", metavar="HOST", help="host names, globs or groups (comma-separated)")
    w.add_argument("--once", action="store_true",
                   help="one window per host (merged with the watch file's), one look, exit")
    w.add_argument("--interval", default="10", metavar="S",
                   help="seconds per reading window and look (default 10)")
    w.add_argument("--window", default="600", metavar="S",
                   help="sliding window in device seconds (default 600)")
    w.add_argument("--min-drafted", default="2000", metavar="N",
                   help="draft tokens in the window before any verdict (default 2000)")
    w.add_argument("--json", action="store_true", help="JSON (one document per look)")
    w.add_argument("--serve", metavar="ADDR",
                   help="serve the Prometheus exposition at ADDR (host:port; :port is "
                        "127.0.0.1) on this node; another address needs --serve-token-file")
    w.add_argument("--serve-token-file", metavar="FILE",
                   help="a bearer token (a 0600 file) every scrape of --serve must send")
    w.add_argument("--textfile", metavar="FILE",
                   help="write the exposition to FILE (a node_exporter textfile collector's "
                        "*.prom) at every look")
    w.add_argument("--duration", metavar="S", help="stop after S seconds (default: never)")
    w.add_argument("--reports", metavar="DIR", help="reports root (default: ./reports)")
    w.add_argument("--state", metavar="DIR", help="the inventory's state, where reverify marks "
                   "go (default: one directory per inventory, see specdec rollout --help)")
    w.set_defaults(func=cmd_watch)


def _number(flag: str, text: str, lo: float, hi: float) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"{flag}={show(text)}: not a number") from None
    if not math.isfinite(v) or not lo <= v <= hi:
        raise ConfigError(f"{flag}={show(text)}: must be in {lo:g}..{hi:g}")
    return v


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``; no host is loopback (the exposition names the fleet's hosts)."""
    host, sep, port_text = text.rpartition(":")
    port = ascii_int(port_text, 5)
    if not sep or port is None or not 0 <= port <= 65535:
        raise ConfigError(f"--serve={show(text)}: expected HOST:PORT (e.g. 127.0.0.1:9464)")
    return host.strip("[]") or "127.0.0.1", port


_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]{16,512}=*")  # RFC 6750 b64token, 16 and more


def serve_token(address: tuple[str, int], path: str | None) -> str | None:
    """The exposition's bearer token (``--serve-token-file``: a 0600 regular file holding one
    RFC 6750 token); required for any address but loopback."""
    if path is None:
        if not is_loopback(address[0]):
            raise ConfigError(f"--serve={address[0]}:{address[1]}: not loopback, so anyone "
                              "on that network could read the fleet's figures; give "
                              "--serve-token-file (every scrape must send the token)")
        return None
    text = read_private(path, "--serve-token-file").strip()
    if not _TOKEN.fullmatch(text):
        raise ConfigError("--serve-token-file: does not hold one bearer token (16-512 of "
                          "letters, digits and -._~+/)")
    return text


def targets(inventory: str, limit: str | None) -> list[Any]:
    """The watched hosts: every targeted host's data checked (specdec_* keys and SSH data),
    one line naming the first bad one, before any host is reached."""
    every = load_inventory(inventory)
    chosen = load_inventory(inventory, limit) if limit else every
    settings = {s.host: s for s in parse_hosts(every)}
    groups = groups_of(settings.values())
    out = []
    for name, data in chosen:
        s = settings[name]
        out.append(Target(name, connection(name, data), s.gate, s.watch_action,
                          groups.get(name)))
    return out


def cmd_watch(args: argparse.Namespace) -> int:
    check_options_given(args, ("limit", "interval", "window", "min_drafted", "serve", "textfile",
                               "duration", "reports"))
    interval = _number("--interval", args.interval, 0.5, 3600)
    window = _number("--window", args.window, 10, 7 * 86400)
    min_drafted = _number("--min-drafted", args.min_drafted, 1, 1e9)
    duration = _number("--duration", args.duration, 1, 1e7) if args.duration else None
    address = parse_address(args.serve) if args.serve else None
    token = serve_token(address, args.serve_token_file) if address is not None else None
    textfile = Path(args.textfile) if args.textfile else None
    if textfile is not None and not textfile.parent.is_dir():
        raise ConfigError(f"--textfile={args.textfile!r}: no such directory "
                          f"{str(textfile.parent)!r}")
    if not Path(args.inventory).is_file():
        raise ConfigError(f"inventory {args.inventory!r}: no such file")
    found = targets(args.inventory, args.limit)
    opts = Options(interval_s=interval, window_s=window, min_draft_tokens=min_drafted,
                   once=args.once, reports=reports_root(args.reports),
                   state=state.use(args.inventory, args.state))
    server = None
    if address is not None:
        try:
            server = expose.Exposition(address, token)
        except OSError as exc:
            raise ConfigError(f"--serve={args.serve!r}: cannot listen "
                              f"({exc.strerror or exc})") from None
        print(f"specdec watch: exposition at http://{args.serve}/metrics", file=sys.stderr)

    def emit(rows: list[dict[str, Any]]) -> None:
        text = expose.render(rows)
        if server is not None:
            server.update(text)
        if textfile is not None:
            expose.write_textfile(textfile, text)
        sys.stdout.write(rows_json(rows) + "\n" if args.json else table(rows) + "\n")
        sys.stdout.flush()

    try:
        Watch(found, opts, emit).run(duration)
    finally:
        if server is not None:
            server.close()
    return 0
