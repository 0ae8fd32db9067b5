"""``specdec rollout`` (batched, canary-first deploy) and ``specdec report`` (fleet summary)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.config import state
from specdec.config.inventory import excluding, load_inventory
from specdec.config.rawinput import check_options_given
from specdec.config.settings import HostSettings
from specdec.errors import RolloutError
from specdec.fleet import rollout as ro
from specdec.fleet import shard as sh
from specdec.fleet.batches import Batch
from specdec.fleet.plans import plan_fleet
from specdec.fleet.resume import load_params, resume_round, to_resume
from specdec.fleet.store import TLSFiles, open_store
from specdec.plan.groups import Group, check_limit, units
from specdec.plan.sites import site_mirror_hosts
from specdec.report.fleet import (
    check_run_id,
    load_reports,
    new_run_id,
    reports_root,
    resolve_run,
    summary_markdown,
    write_fleet,
)
from specdec.report.merge import merge_runs
from specdec.tune.store import location
from specdec.watch.marks import marked

__all__ = ["PYINFRA_SWITCHES", "STATE_HELP", "register"]

# Switches passed through to pyinfra (--dry: one run over the targeted hosts, no report).
PYINFRA_SWITCHES = (
    ("--dry", "pyinfra --dry over the targeted hosts: what would change; nothing is changed "
              "and no report is written"),
    ("--diff", "pyinfra --diff: the changes of the text files pyinfra compares (secrets are "
               "uploaded by operations that show no content)"),
)
STATE_HELP = ("the inventory's state: fact cache, verified baselines, watch marks, tune cache "
              "(default: $SPECDEC_INVENTORY_STATE, else one directory per inventory under "
              "$SPECDEC_STATE_DIR or ~/.local/state/specdec)")


def register(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "rollout", help="deploy batch by batch (canary first), stop on failures, report")
    r.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    r.add_argument("--batches", default=None, metavar="SPEC",
                   help="batch sizes, Ansible-serial style (count or %%; the last repeats); "
                        "default 1,25%%,100%%")
    r.add_argument("--max-fail-percent", default=None, metavar="N",
                   help="stop when a batch's failed hosts exceed N%% (default 0)")
    r.add_argument("--max-unreachable-percent", default=None, metavar="N",
                   help="stop when a batch's unreachable hosts exceed N%% (default 100; a "
                        "batch with no host reached always stops)")
    r.add_argument("--limit", metavar="HOST", help="host names, globs or groups (comma-separated)")
    r.add_argument("--exclude", metavar="HOST",
                   help="leave out these host names, globs or groups (comma-separated)")
    for flag, help_ in PYINFRA_SWITCHES:
        r.add_argument(flag, action="store_true", help=help_)
    r.add_argument("-v", dest="verbose", action="count", default=0,
                   help="pyinfra -v (meta), -vv (input), -vvv (output)")
    r.add_argument("--marked", action="store_true",
                   help="only the hosts `specdec watch` marked for re-verification")
    r.add_argument("--run-id", metavar="ID", help="report directory name (default: timestamp)")
    r.add_argument("--resume", metavar="RUN",
                   help="finish run RUN: deploy its hosts that did not converge, same run id")
    r.add_argument("--reports", metavar="DIR", help="reports root (default: ./reports)")
    r.add_argument("--state", metavar="DIR", help=STATE_HELP)
    r.add_argument("--data", action="append", default=None, metavar="KEY=VALUE",
                   help="pass to pyinfra --data (e.g. specdec_reverify=true); repeatable")
    r.add_argument("--parallel", type=int, metavar="N",
                   help="pyinfra --parallel: hosts worked on at once (default pyinfra's: "
                        "min(20 x CPUs, inventory size, open-files limit / 3))")
    r.add_argument("--shard", metavar="I/N",
                   help="roll out shard I of N of the fleet (N control nodes, one run id; "
                        "canary, budget, claims and tune cache shared through --store)")
    r.add_argument("--store", metavar="URL",
                   help="fleet store for --shard: a directory (default REPORTS/fleet) or "
                        "etcd://HOST:PORT (etcds:// with --store-ca/--store-cert/--store-key)")
    r.add_argument("--store-ca", metavar="FILE", help="CA of the etcd server (etcds://)")
    r.add_argument("--store-cert", metavar="FILE", help="client certificate for etcd")
    r.add_argument("--store-key", metavar="FILE", help="client key for etcd")
    r.add_argument("--tune-cache", metavar="DIR|URL",
                   help="the tune cache (default: $SPECDEC_TUNE_CACHE, else specdec_tune_cache "
                        "in host data, else tune-cache/ in the inventory's state)")
    r.set_defaults(func=cmd_rollout)

    p = subparsers.add_parser("report", help="print a rollout's fleet summary (Markdown)")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (default: the latest run)")
    p.add_argument("--reports", metavar="DIR", help="reports root (default: ./reports)")
    p.add_argument("--html", action="store_true", help="print the path of index.html instead")
    p.add_argument("--merge", nargs="+", metavar="RUN_DIR",
                   help="merge these shards' run directories into REPORTS/RUN (RUN required)")
    p.set_defaults(func=cmd_report)


@dataclass(frozen=True)
class _Options:
    """The rollout's settings: as given on the command line, else as the resumed run had them."""

    spec: str
    batches: list[Batch]
    max_fail: float
    max_unreach: float
    data: list[str]
    limit: str | None
    tune: str | None


# Options whose empty value would read as not given (`--shard ''` rolled out every host)
_NOT_EMPTY = ("batches", "max_fail_percent", "max_unreachable_percent", "limit", "run_id",
              "resume", "reports", "shard", "store", "store_ca", "store_cert", "store_key",
              "tune_cache", "exclude", "state")


def cmd_rollout(args: argparse.Namespace) -> int:
    check_options_given(args, _NOT_EMPTY)
    if args.parallel is not None and args.parallel < 1:
        raise RolloutError(f"--parallel={args.parallel}: must be at least 1")
    if args.resume and args.run_id:
        raise RolloutError("--resume RUN and --run-id: give one (a resumed run keeps its id)")
    if args.dry and (args.resume or args.shard):
        raise RolloutError(f"--dry and {'--resume' if args.resume else '--shard'}: a dry run "
                           "deploys nothing, so it has nothing to resume or share")
    root = ro.check_reports_dir(reports_root(args.reports))
    run_id, params, left = _run_id(args, root)
    opts = _options(args, params)
    inventory = Path(args.inventory)
    if not inventory.is_file():
        raise RolloutError(f"inventory {args.inventory!r}: no such file")
    state_dir = state.use(inventory, args.state)
    limit = _marked(str(inventory), state_dir, opts.limit) if args.marked else opts.limit
    limit = excluding(str(inventory), limit, args.exclude)
    settings, every, groups, names = _fleet(str(inventory), limit, opts.data, opts.tune)
    if args.resume:
        names = _resumed(args, run_id, left, names, groups, limit)
        if not names:
            print(f"specdec rollout --resume {run_id}: every host converged; nothing to do")
            return 0
    order = _order(names, groups, every)
    hosts = [h for unit in order for h in unit]
    shard, coord = _sharding(args, root, run_id, order, groups, opts,
                             resume_round(root / run_id, hosts) if args.resume else 0)
    plan = ro.RolloutPlan(
        inventory=inventory.resolve(),
        hosts=hosts,
        batches=shard if shard is not None else ro.batch_units(order, opts.batches),
        max_fail_percent=opts.max_fail,
        max_unreachable_percent=opts.max_unreach,
        run_id=run_id,
        reports_root=root,
        data=tuple(opts.data),
        extra_args=_pyinfra_args(args),
        meta={s.host: ro.host_meta(s) for s in settings},
        resume=bool(args.resume) or bool(args.shard and ro.existing_run(root, run_id)),
        params=_params(args, opts, limit),
        tune_cache=opts.tune and location(explicit=opts.tune),
    )
    if args.dry:
        return ro.dry_run(plan)
    if args.resume:
        print(f"specdec rollout --resume {run_id}: {len(hosts)} host(s) to finish: "
              + ", ".join(f"{h} ({left.get(h, 'group')})" for h in hosts))
    return _finish(args, plan, ro.run_rollout(plan, coord=coord))


def _pyinfra_args(args: argparse.Namespace) -> tuple[str, ...]:
    """What is passed through to every pyinfra run: --parallel, --diff, -v."""
    out: tuple[str, ...] = ("--parallel", str(args.parallel)) if args.parallel else ()
    out += ("--diff",) if args.diff else ()
    return out + (("-" + "v" * args.verbose,) if args.verbose else ())


def _run_id(args: argparse.Namespace, root: Path) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The run id; with ``--resume`` also the run's parameters and its hosts left to finish."""
    if args.resume:
        run_id = check_run_id(args.resume)
        params = load_params(root / run_id)
        _, left = to_resume(root / run_id)
        return run_id, params, left
    run_id = check_run_id(args.run_id) if args.run_id else new_run_id()
    if ro.existing_run(root, run_id) and not args.shard:
        raise RolloutError(f"--run-id={run_id!r}: already used under {root} (pick "
                           "another, or --resume it)")
    return run_id, {}, {}


def _options(args: argparse.Namespace, params: dict[str, Any]) -> _Options:
    """Each setting from its flag, else from the resumed run's ``params``, else its default."""
    def given(name: str, default: Any) -> Any:
        value = getattr(args, name)
        return value if value is not None else params.get(name, default)

    spec = given("batches", "1,25%,100%")
    batches = ro.parse_batches(spec)
    max_fail = ro.parse_max_fail(given("max_fail_percent", "0"))
    max_unreach = ro.parse_max_fail(given("max_unreachable_percent", "100"),
                                    "--max-unreachable-percent")
    data = list(given("data", []))
    for d in data:
        if "=" not in d or not d.split("=", 1)[0].strip():
            raise RolloutError(f"--data={d!r}: expected KEY=VALUE")
    return _Options(spec, batches, max_fail, max_unreach, data,
                    limit=args.limit if args.limit is not None else params.get("limit"),
                    tune=args.tune_cache if args.tune_cache is not None
                    else params.get("tune_cache"))


def _fleet(inventory: str, limit: str | None, data: list[str], tune: str | None
           ) -> tuple[list[HostSettings], list[HostSettings], dict[str, Group], list[str]]:
    """The targeted hosts' settings (checked), every host's, the serving groups and the
    targeted names (a limit may not split a group)."""
    loaded = load_inventory(inventory, limit)
    names = [name for name, _ in loaded]
    fleet = plan_fleet(inventory, limit, data, tune, files=True)  # every problem at once
    check_limit(fleet.groups, names)
    settings = [s for s in fleet.settings if s.host in names]
    return settings, fleet.settings, fleet.groups, names


def _resumed(args: argparse.Namespace, run_id: str, left: dict[str, str], names: list[str],
             groups: dict[str, Group], limit: str | None) -> list[str]:
    """``--resume``: the targeted hosts left to finish (a serving group is resumed whole)."""
    gone = sorted(set(left) - set(names))
    if gone:
        raise RolloutError(f"--resume {run_id}: {', '.join(gone)} not in {args.inventory}"
                           f"{' --limit ' + limit if limit else ''}")
    again = {m for h in left for m in (groups[h].members if h in groups else (h,))}
    return [n for n in names if n in again]


def _order(names: list[str], groups: dict[str, Group],
           every: list[HostSettings]) -> list[list[str]]:
    """The deploy units in rollout order: site mirrors first, as their sites' hosts download
    and pull through them (one per site)."""
    order = units(names, groups)
    first = site_mirror_hosts(every)
    return [u for u in order if set(u) & first] + [u for u in order if not set(u) & first]


def _params(args: argparse.Namespace, opts: _Options, limit: str | None) -> dict[str, Any]:
    """What ``--resume`` reuses (``run.json``)."""
    return {"batches": opts.spec, "max_fail_percent": str(opts.max_fail),
            "max_unreachable_percent": str(opts.max_unreach), "data": opts.data,
            "limit": limit, "shards": args.shard.split("/")[1] if args.shard else None,
            "tune_cache": opts.tune}


def _finish(args: argparse.Namespace, plan: ro.RolloutPlan, result: ro.RolloutResult) -> int:
    """The fleet summary, where the reports are, and the exit status."""
    print()
    print((plan.run_dir / "summary.md").read_text(), end="")
    print(f"\nreports: {plan.run_dir} (index.html, summary.md, <host>.json)")
    if result.stopped_after is not None:
        print(f"specdec: rollout stopped after batch {result.stopped_after}", file=sys.stderr)
        return 2
    if result.exit_code == 3:
        print(f"specdec: unreachable hosts left; 'specdec rollout {args.inventory} --resume "
              f"{plan.run_id}' finishes them when they are back", file=sys.stderr)
    return result.exit_code


def _sharding(args: argparse.Namespace, root: Path, run_id: str, order: list[list[str]],
              groups: dict[str, Group], opts: _Options, round_no: int
              ) -> tuple[list[list[str]] | None, Any]:
    """With --shard: this shard's batches and its coordinator over the fleet store
    (``round_no``: the resume round, 0 for a new run)."""
    if not args.shard:
        if args.store:
            raise RolloutError("--store is for --shard I/N")
        return None, None
    shard = sh.parse_shard(args.shard)
    if not args.run_id and not args.resume:
        raise RolloutError("--shard: give every shard the same --run-id")
    tls = None
    if args.store_ca or args.store_cert:
        tls = TLSFiles(*(Path(x) if x else None
                         for x in (args.store_ca, args.store_cert, args.store_key)))
    store = open_store(args.store or str(root / "fleet"), tls)
    mine, runs_canary, has_canary = sh.shard_batches(order, groups, shard, opts.batches,
                                                    canary=not round_no)
    digest = hashlib.sha256(json.dumps([order, opts.spec, shard.count]).encode()).hexdigest()[:16]
    coord = sh.ShardCoordinator(
        store=store, run_id=run_id + (f"/resume{round_no}" if round_no else ""),
        shard=shard, runs_canary=runs_canary, has_canary=has_canary, digest=digest,
        tune_dir=root / "cache" / "tune", max_fail_percent=opts.max_fail,
        max_unreachable_percent=opts.max_unreach)
    coord.register()
    print(f"specdec rollout {run_id} [shard {shard.label}]: "
          f"{sum(len(b) for b in mine)} host(s) in {len(mine)} batch(es)"
          f"{', the canary' if runs_canary else ''}; fleet store {store.describe()}")
    return mine, coord


def _marked(inventory: str, root: Path, limit: str | None) -> str:
    """``--marked``: the inventory's hosts with a `specdec watch` reverify mark, as a limit."""
    if limit:
        raise RolloutError("--marked and --limit: give one of them")
    hosts = marked(root, [name for name, _ in load_inventory(inventory)])
    if not hosts:
        raise RolloutError(f"--marked: no host of {inventory} is marked for re-verification "
                           f"under {root} (specdec watch marks hosts whose data says "
                           "specdec_watch: {action: reverify})")
    print(f"specdec rollout: marked by specdec watch: {', '.join(hosts)}")
    return ",".join(hosts)


def cmd_report(args: argparse.Namespace) -> int:
    root = reports_root(args.reports)
    if args.merge:
        if not args.run:
            raise RolloutError("--merge: name the merged run (specdec report RUN --merge ...)")
        out = root / check_run_id(args.run)
        hosts = merge_runs([Path(p) for p in args.merge], out)
        print(f"merged {len(hosts)} host(s) from {len(args.merge)} shard(s) into {out}",
              file=sys.stderr)
        print(summary_markdown(load_reports(out), out.name), end="")
        return 0
    run_dir = resolve_run(root, args.run)
    if args.html:
        write_fleet(run_dir)
        print(run_dir / "index.html")
        return 0
    print(summary_markdown(load_reports(run_dir), run_dir.name), end="")
    return 0
