"""``specdec keys``: an inventory's API keys and the CA its APIs' certificates come from.

    specdec keys show INVENTORY      # each key file, its hosts, whether a key is being retired
    specdec keys rotate INVENTORY    # a new key; the current one still accepted (overlap)
    specdec keys retire INVENTORY    # the rotated-out key no longer accepted (after a deploy)
    specdec keys ca INVENTORY        # the CA certificate (PEM) clients trust for the API

A rotation takes two deploys: after ``rotate`` a deploy gives every host both keys (its API
proxy accepts either: clients move to the new one meanwhile); after ``retire`` the next deploy
gives it the new one only. No key is ever printed (``show`` prints a fingerprint).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from specdec.config import apikey, pki
from specdec.config.inventory import load_inventory
from specdec.config.settings import HostSettings
from specdec.errors import ConfigError
from specdec.plan.hostdata import parse_hosts

__all__ = ["register"]


def register(subparsers: Any) -> None:
    k = subparsers.add_parser("keys", help="an inventory's API keys (rotate, retire) and CA",
                              description=__doc__.splitlines()[0])
    k.add_argument("action", choices=("show", "rotate", "retire", "ca"))
    k.add_argument("inventory", help="the pyinfra inventory file")
    k.set_defaults(func=cmd_keys)


def _hosts(inventory: str) -> tuple[list[HostSettings], Path]:
    if not Path(inventory).is_file():
        raise ConfigError(f"{inventory!r}: not an inventory file")
    settings = parse_hosts(load_inventory(inventory))
    return settings, apikey.inventory_dir(inventory)


def _key_files(settings: list[HostSettings], inv_dir: Path) -> dict[Path, tuple[bool, list[str]]]:
    """Each key file of the inventory: whether specdec makes it, and the hosts using it."""
    out: dict[Path, tuple[bool, list[str]]] = {}
    for s in settings:
        path, make = apikey.host_key_file(s.api_key_file, s.api_key_scope, s.host, inv_dir)
        out.setdefault(path, (make, []))[1].append(s.host)
    return out


def _fingerprint(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def cmd_keys(args: argparse.Namespace) -> int:
    settings, inv_dir = _hosts(args.inventory)
    if args.action == "ca":
        dirs = dict.fromkeys(s.pki_dir for s in settings if s.tls and not s.tls_cert_file)
        if not dirs:
            raise ConfigError(f"{args.inventory}: no host serves its API with the fleet's CA "
                              "(specdec_tls: false, or the operator's own certificate)")
        for d in dirs:
            sys.stdout.write(pki.api_authority(d, inv_dir).cert_pem.decode())
        return 0
    files = _key_files(settings, inv_dir)
    for path, (make, hosts) in files.items():
        who = ", ".join(hosts)
        if args.action == "rotate":
            apikey.ensure_key(path, create=make)
            apikey.rotate(path)
            print(f"{path}: rotated (hosts {who}); the old key is accepted until "
                  "`specdec keys retire` and the deploy after it; deploy now")
        elif args.action == "retire":
            done = apikey.retire(path)
            print(f"{path}: {'retired the rotated-out key' if done else 'no rotated-out key'} "
                  f"(hosts {who}); deploy to stop accepting it")
        else:
            current = apikey.ensure_key(path, create=make)
            old = apikey.old_key(path)
            print(f"{path}: {_fingerprint(current)}; rotated-out: "
                  f"{_fingerprint(old) if old else 'none'}; hosts {who}")
    return 0
