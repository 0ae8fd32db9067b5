"""``specdec identify``: which catalog device this machine (or a root) is. Light on purpose:
it runs on devices too, with nothing but the catalog and the identity parser."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specdec.errors import ConfigError
from specdec.host.identify import parse_identity, read_identity_root

__all__ = ["register"]


def register(subparsers: Any) -> None:
    i = subparsers.add_parser("identify", help="identify this machine (or a root) as a device")
    i.add_argument("--root", default="/", metavar="DIR", help="root to read identity files from")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=cmd_identify)


def cmd_identify(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not root.is_dir():
        raise ConfigError(f"--root={args.root!r}: not a directory")
    ident = parse_identity(read_identity_root(root))
    if args.json:
        print(json.dumps(ident.to_dict(), sort_keys=True))
    else:
        head, _, rest = ident.describe().partition(", ")
        print(f"{head}: {rest}")
    sys.stdout.flush()
    return 0
