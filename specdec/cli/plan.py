"""``specdec plan`` and ``specdec render`` (both offline)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specdec.config import apikey, state
from specdec.config.inventory import excluding
from specdec.config.rawinput import check_options_given
from specdec.config.settings import HostSettings
from specdec.engines.registry import engine_of
from specdec.errors import ConfigError
from specdec.fleet.plans import Fleet, plan_fleet
from specdec.plan import sockets
from specdec.plan.effects import effects, first_deploy
from specdec.plan.groups import plans_by_group
from specdec.plan.sites import site_mirror_hosts
from specdec.plan.types import Plan
from specdec.render.files import render

__all__ = ["register"]

COLUMNS = """columns:
  HOST     the inventory's name
  DEVICE   the catalog device (specdec_device)
  ENGINE   the engine and its release
  RUNTIME  docker (the image) or native (a venv on the host)
  MODEL    the target model (a Hugging Face id)
  METHOD   the speculative method; none: speculation off
  DRAFT    the draft model or EAGLE head (-: none)
  K        num_speculative_tokens; (auto): tuned on the host at the first deploy, (tuned): from
           the tune cache; a/b-c:k per batch size where the engine schedules it
  MEM      the fraction of device memory the engine may take (gpu_memory_utilization)
  LEN      max_model_len: tokens of context per sequence
  SEQS     max_num_seqs: sequences served at once
  KV GiB   the KV cache left / what one sequence of LEN needs (target and draft)
  RELEASE  the release's content id: the same id on a host means nothing to change"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan", help="show each host's plan (offline; hosts must declare specdec_device)",
        description="Each host's plan as the deploy will make it, offline: every problem of "
                    "the inventory at once (one line each, exit 2), then the plans, the serving "
                    "groups, the sockets and what a first deploy changes and costs.",
        epilog=COLUMNS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    p.add_argument("--limit", metavar="HOST", help="host names, globs or groups (comma-separated)")
    p.add_argument("--exclude", metavar="HOST",
                   help="leave out these host names, globs or groups (comma-separated)")
    p.add_argument("--state", metavar="DIR", help="the inventory's state (its tune cache "
                   "among it; default: one directory per inventory, see specdec rollout --help)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tune-cache", metavar="DIR|URL",
                   help="the tune cache (default: $SPECDEC_TUNE_CACHE, else specdec_tune_cache "
                        "in host data, else tune-cache/ in the inventory's state)")
    p.add_argument("--data", action="append", default=None, metavar="KEY=VALUE",
                   help="a host-data value over every host's (as pyinfra's and rollout's "
                        "--data); repeatable")
    p.set_defaults(func=cmd_plan)

    r = subparsers.add_parser("render", help="write one host's release files under a directory")
    r.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    r.add_argument("--host", required=True, metavar="HOST", help="inventory host name")
    r.add_argument("--out", required=True, metavar="DIR", help="output root (files keep paths)")
    r.set_defaults(func=cmd_render)



def _key_file(inventory: str, s: HostSettings) -> Path:
    """Where the deploy makes (or reads) this host's API key (`specdec.config.apikey`)."""
    return apikey.host_key_file(s.api_key_file, s.api_key_scope, s.host,
                                apikey.inventory_dir(inventory))[0]


def _effects(fleet: Fleet, inventory: str) -> dict[str, list[str]]:
    """Each planned host's first-deploy effects (`specdec.plan.effects`), settings and site
    mirrors looked up once for the fleet."""
    by_host = {s.host: s for s in fleet.settings}
    mirrors = site_mirror_hosts(fleet.settings)
    return {p.host: effects(p, by_host[p.host], p.host in mirrors,
                            _key_file(inventory, by_host[p.host])) for p in fleet.plans}


def _print_effects(fleet: Fleet, inventory: str) -> None:
    """Each host's first-deploy effects and duration estimate; the fleet's one API key line
    once, at the end."""
    print("\nfirst deploy (what changes beyond the release, how long):")
    keys: set[str] = set()
    for p, lines in zip(fleet.plans, _effects(fleet, inventory).values(), strict=True):
        keys |= {line for line in lines if line.startswith("api key:")}
        for line in (*(x for x in lines if x not in keys), first_deploy(p).text()):
            print(f"  {p.host}: {line}")
    for line in sorted(keys):
        print(f"  {line}")


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
    check_options_given(args, ("limit", "exclude"))
    for d in args.data or ():
        if "=" not in d or not d.split("=", 1)[0].strip():
            raise ConfigError(f"--data={d!r}: expected KEY=VALUE")
    state.use(args.inventory, args.state)
    limit = excluding(args.inventory, args.limit, args.exclude)
    fleet = plan_fleet(args.inventory, limit, args.data or (), args.tune_cache)
    plans = fleet.plans
    if args.json:
        print(json.dumps(_json_records(fleet, args.inventory), indent=2, sort_keys=True))
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
    _print_effects(fleet, args.inventory)
    return 0


def _json_records(fleet: Fleet, inventory: str) -> list[dict[str, Any]]:
    """`plan_record` of each plan with its first deploy's effects and estimate."""
    out = []
    for p, lines in zip(fleet.plans, _effects(fleet, inventory).values(), strict=True):
        est = first_deploy(p)
        out.append({**plan_record(p), "effects": lines, "first_deploy": {
            "low_s": round(est.low_s), "high_s": round(est.high_s),
            "engine_starts": list(est.restarts), "download_gib": round(est.download_gib, 2)}})
    return out


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
    plans = [p for p in plan_fleet(args.inventory).plans if p.host == args.host]
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
