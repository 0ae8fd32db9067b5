"""``specdec plan`` and ``specdec render`` (both offline)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specdec.config.inventory import load_inventory
from specdec.config.rawinput import check_options_given
from specdec.engines.registry import engine_of
from specdec.errors import ConfigError
from specdec.plan import sites, sockets
from specdec.plan.groups import check_plans, groups_of, plans_by_group
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import plan_host_settings
from specdec.plan.types import Plan
from specdec.render.files import render
from specdec.tune.cache import apply_cached
from specdec.tune.store import location, open_store

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan", help="show each host's plan (offline; hosts must declare specdec_device)"
    )
    p.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    p.add_argument("--limit", metavar="HOST", help="host names, globs or groups (comma-separated)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tune-cache", metavar="DIR|URL",
                   help="the tune cache (default: $SPECDEC_TUNE_CACHE, else specdec_tune_cache "
                        "in host data, else tune-cache/ beside the inventory)")
    p.set_defaults(func=cmd_plan)

    r = subparsers.add_parser("render", help="write one host's release files under a directory")
    r.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    r.add_argument("--host", required=True, metavar="HOST", help="inventory host name")
    r.add_argument("--out", required=True, metavar="DIR", help="output root (files keep paths)")
    r.set_defaults(func=cmd_render)



def _plans(inventory: str, limit: str | None, tune_cache: str | None = None) -> list[Plan]:
    """Plans as the deploy makes them: through the site's mirror, with the tuned values of the
    tune cache (the same location the deploy uses), if any."""
    chosen = load_inventory(inventory, limit)
    # groups and sites span the whole inventory
    every = sites.resolve(parse_hosts(load_inventory(inventory) if limit else chosen))
    names = {name for name, _ in chosen}
    groups = groups_of(every)
    plans = [apply_cached(plan_host_settings(s, None, group=groups.get(s.host)),
                          open_store(location(tune_cache, inventory, s.tune_cache,
                                                       host=s.host)), s.reverify)
             for s in every if s.host in names]
    check_plans(plans)
    return plans


def _k(p: Plan) -> str:
    if not p.speculative:
        return "0"
    sched = ("/" + ",".join(f"{a}-{b}:{k}" for a, b, k in p.k_by_batch)) if p.k_by_batch else ""
    return f"{p.num_speculative_tokens}{sched}" + (
        " (tuned)" if p.tuned else " (auto)" if p.k_auto else "")


def plan_record(plan: Plan) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "host": plan.host,
        "device": plan.device,
        "engine": plan.engine,
        "engine_version": plan.engine_version,
        "runtime": plan.runtime,
        "model": plan.model,
        "method": plan.method,
        "draft": plan.draft,
        "num_speculative_tokens": plan.num_speculative_tokens,
        "image": plan.image,
    }
    rec.update(plan.to_dict())
    rec["release_id"] = plan.release_id()
    return rec


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _short(text: str | None, n: int = 40) -> str:
    if not text:
        return "-"
    return text if len(text) <= n else "…" + text[-(n - 1):]


def cmd_plan(args: argparse.Namespace) -> int:
    check_options_given(args, ("limit",))
    plans = _plans(args.inventory, args.limit, args.tune_cache)
    if args.json:
        print(json.dumps([plan_record(p) for p in plans], indent=2, sort_keys=True))
        return 0
    rows = [["HOST", "DEVICE", "ENGINE", "RUNTIME", "MODEL", "METHOD", "DRAFT", "K", "MEM",
             "LEN", "SEQS", "KV GiB", "RELEASE"]]
    for p in plans:
        rows.append([
            p.host, p.device, f"{p.engine} {p.engine_version}", p.runtime, _short(p.model, 34),
            p.method, _short(p.draft, 34), _k(p), f"{p.gpu_memory_utilization:g}",
            str(p.max_model_len), str(p.max_num_seqs),
            f"{p.fit.kv_gib:.1f}/{p.fit.kv_needed_gib:.2f}", p.release_id(),
        ])
    print(_table(rows))
    for p in plans:
        for note in p.notes:
            print(f"  {p.host}: {note}")
    _print_groups(plans)
    _print_sockets(plans)
    return 0


def _print_sockets(plans: list[Plan]) -> None:
    """Every socket each host opens: its unit, where, what, and who may reach it."""
    rows = [["HOST", "UNIT", "LISTENS ON", "WHAT", "REACHED BY"], *map(list, sockets.table(plans))]
    print("\nsockets (the release's firewall admits only the networks shown):")
    print(_table(rows))


def _print_groups(plans: list[Plan]) -> None:
    """Each serving group: its endpoint, its engine's setup, its members and their roles."""
    for name, ps in plans_by_group(plans).items():
        seats = [engine_of(p).group_seat(p) for p in ps]
        members = ", ".join(f"{p.host} ({seat.role})" for p, seat in zip(ps, seats, strict=True)
                            if seat is not None)
        print(f"group {name}: {engine_of(ps[0]).describe_group(ps[0])}; members: {members}")


def cmd_render(args: argparse.Namespace) -> int:
    plans = [p for p in _plans(args.inventory, None) if p.host == args.host]
    if not plans:
        raise ConfigError(f"--host={args.host!r}: not in {args.inventory}")
    rendered = render(plans[0])
    out = Path(args.out)
    for f in rendered.files:
        dest = out / f.path.lstrip("/")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.content)
            dest.chmod(int(f.mode, 8))
        except OSError as exc:
            raise ConfigError(f"--out={args.out!r}: cannot write {dest}: {exc.strerror}") from None
        print(dest)
    return 0
