"""``specdec rollout`` (batched, canary-first deploy) and ``specdec report`` (fleet summary)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specdec.errors import RolloutError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "rollout", help="deploy batch by batch (canary first), stop on failures, report")
    r.add_argument("inventory", metavar="INVENTORY", help="pyinfra inventory file")
    r.add_argument("--batches", default="1,25%,100%", metavar="SPEC",
                   help="batch sizes, Ansible-serial style (count or %%; the last repeats); "
                        "default 1,25%%,100%%")
    r.add_argument("--max-fail-percent", default="0", metavar="N",
                   help="stop when a batch's failed hosts exceed N%% (default 0)")
    r.add_argument("--limit", metavar="HOST", help="host names, globs or groups (comma-separated)")
    r.add_argument("--marked", action="store_true",
                   help="only the hosts `specdec watch` marked for re-verification")
    r.add_argument("--run-id", metavar="ID", help="report directory name (default: timestamp)")
    r.add_argument("--reports", metavar="DIR", help="reports root (default: ./reports)")
    r.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                   help="pass to pyinfra --data (e.g. specdec_reverify=true); repeatable")
    r.set_defaults(func=cmd_rollout)

    p = subparsers.add_parser("report", help="print a rollout's fleet summary (Markdown)")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (default: the latest run)")
    p.add_argument("--reports", metavar="DIR", help="reports root (default: ./reports)")
    p.add_argument("--html", action="store_true", help="print the path of index.html instead")
    p.set_defaults(func=cmd_report)


def cmd_rollout(args: argparse.Namespace) -> int:
    from specdec import rollout as ro
    from specdec.report import check_run_id, new_run_id, reports_root

    batches = ro.parse_batches(args.batches)
    max_fail = ro.parse_max_fail(args.max_fail_percent)
    for d in args.data:
        if "=" not in d or not d.split("=", 1)[0].strip():
            raise RolloutError(f"--data={d!r}: expected KEY=VALUE")
    run_id = check_run_id(args.run_id) if args.run_id else new_run_id()
    root = ro.check_reports_dir(reports_root(args.reports))
    if ro.existing_run(root, run_id):
        raise RolloutError(f"--run-id={run_id!r}: already used under {root} (pick another)")
    inventory = Path(args.inventory)
    if not inventory.is_file():
        raise RolloutError(f"inventory {args.inventory!r}: no such file")

    from specdec.groups.inventory import check_limit, groups_of, units
    from specdec.inventory import load_inventory

    if args.marked:
        args.limit = _marked(str(inventory), root, args.limit)
    loaded = load_inventory(str(inventory), args.limit)
    settings = ro.check_hosts(loaded, args.data)
    every = ro.parse_with_data(load_inventory(str(inventory)), args.data) if args.limit \
        else settings
    groups = groups_of(every)
    check_limit(groups, [name for name, _ in loaded])
    order = units([name for name, _ in loaded], groups)
    hosts = [h for unit in order for h in unit]
    plan = ro.RolloutPlan(
        inventory=inventory.resolve(),
        hosts=hosts,
        batches=ro.batch_units(order, batches),
        max_fail_percent=max_fail,
        run_id=run_id,
        reports_root=root,
        data=tuple(args.data),
        meta={s.host: ro.host_meta(s) for s in settings},
    )
    result = ro.run_rollout(plan)
    print()
    print((plan.run_dir / "summary.md").read_text(), end="")
    print(f"\nreports: {plan.run_dir} (index.html, summary.md, <host>.json)")
    if result.stopped_after is not None:
        print(f"specdec: rollout stopped after batch {result.stopped_after}", file=sys.stderr)
        return 2
    return result.exit_code


def _marked(inventory: str, root: Path, limit: str | None) -> str:
    """``--marked``: the inventory's hosts with a `specdec watch` reverify mark, as a limit."""
    from specdec.inventory import load_inventory
    from specdec.watch.marks import marked

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
    from specdec.report import (
        load_reports,
        reports_root,
        resolve_run,
        summary_markdown,
        write_fleet,
    )

    root = reports_root(args.reports)
    run_dir = resolve_run(root, args.run)
    if args.html:
        write_fleet(run_dir)
        print(run_dir / "index.html")
        return 0
    print(summary_markdown(load_reports(run_dir), run_dir.name), end="")
    return 0
