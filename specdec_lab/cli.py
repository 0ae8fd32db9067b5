"""``specdec lab up|down|status INVENTORY``, ``lab net HOST down|up``, ``lab reboot HOST`` and
``specdec lab engine`` (the emulated fleet). All but ``engine`` act on one lab instance:
``--instance NAME``, else ``$SPECDEC_LAB_INSTANCE``, else ``demo``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from specdec.catalog import load_catalog
from specdec.config.apikey import ensure_key
from specdec.config.inventory import load_inventory
from specdec.errors import ConfigError
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec_lab import fleet, hubsvc
from specdec_lab.emulator import launch
from specdec_lab.errors import LabError
from specdec_lab.instance import ENV as INSTANCE_ENV
from specdec_lab.instance import Instance
from specdec_lab.spec import parse_lab_hosts
from specdec_lab.state import load_state
from specdec_lab.traffic import Traffic, parse_mix, run_traffic

__all__ = ["register"]


def _add_instance(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", metavar="NAME",
                   help="lab instance (1-6 lowercase letters; default: $SPECDEC_LAB_INSTANCE, "
                        "else demo)")


def _instance(args: argparse.Namespace) -> Instance:
    """The instance the command acts on; ``--instance`` is exported so that the inventory,
    loaded in a child interpreter, sees the same one."""
    if args.instance is not None:
        inst = Instance(args.instance)
        os.environ[INSTANCE_ENV] = inst.name
        return inst
    return Instance.from_env()


def register(subparsers: Any) -> None:
    lab = subparsers.add_parser(
        "lab", help="the emulated fleet: systemd-nspawn hosts that identify as devices"
    )
    sub = lab.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    _add_fleet(sub)
    _add_hub(sub)
    _add_traffic(sub)
    _add_engine(sub)


def _add_fleet(sub: Any) -> None:
    """``up``, ``down``, ``status``, ``net`` and ``reboot``: the instance's hosts."""
    for name, help_, func in (
        ("up", "boot the inventory's lab hosts (root)", cmd_up),
        ("down", "remove every namespace, mount and process the lab made", cmd_down),
        ("status", "per host: reachable over SSH, engine unit active, engine serving", cmd_status),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("inventory", metavar="INVENTORY", nargs="?" if name == "down" else None,
                       help="pyinfra inventory (inventories/lab.py)")
        if name != "down":
            p.add_argument("--limit", metavar="HOST", help="host names, globs or groups")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        _add_instance(p)
        p.set_defaults(func=func)

    n = sub.add_parser("net", help="cut or restore a lab host's network link (a partition)")
    n.add_argument("host", metavar="HOST", help="lab host name")
    n.add_argument("state", choices=("down", "up"), help="down: unreachable; up: back")
    _add_instance(n)
    n.set_defaults(func=cmd_net)
    r = sub.add_parser("reboot", help="reboot a lab host and wait until it has booted")
    r.add_argument("host", metavar="HOST", help="lab host name")
    r.add_argument("--no-wait", action="store_true", help="return once the reboot started")
    _add_instance(r)
    r.set_defaults(func=cmd_reboot)


def _add_hub(sub: Any) -> None:
    h = sub.add_parser("hub", help="the lab's Hub: bytes served per revision and per host")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.add_argument("--reset", action="store_true", help="zero the counters")
    h.add_argument("--wan-mbps", type=float, metavar="X",
                   help="the Hub's egress rate shared by all hosts (a site's WAN); 0: unlimited")
    _add_instance(h)
    h.set_defaults(func=cmd_hub)


def _add_traffic(sub: Any) -> None:
    t = sub.add_parser("traffic", help="user traffic with a prompt-category mix for a lab host "
                                        "(bounded in time and count)")
    t.add_argument("host", metavar="HOST", help="lab host (a serving group member: its frontend)")
    t.add_argument("--inventory", default="inventories/lab.py", metavar="INVENTORY",
                   help="lab inventory (default inventories/lab.py)")
    t.add_argument("--mix", required=True, metavar="CAT=W,…",
                   help="prompt categories and weights, e.g. code=0.8,chat=0.2")
    t.add_argument("--rate", required=True, type=float, metavar="R",
                   help="requests per device second (Poisson arrivals)")
    t.add_argument("--duration", type=float, metavar="S", help="device seconds")
    t.add_argument("--requests", type=int, metavar="N", help="at most N requests")
    t.add_argument("--max-tokens", type=int, default=128, metavar="N")
    t.add_argument("--max-inflight", type=int, default=64, metavar="N")
    t.add_argument("--seed", type=int, default=0, metavar="N")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    _add_instance(t)
    t.set_defaults(func=cmd_traffic)


def _add_engine(sub: Any) -> None:
    e = sub.add_parser(
        "engine", help="run the engine emulator here: lab engine --device ID -- vllm serve MODEL …"
    )
    e.add_argument("--device", required=True, metavar="ID", help="catalog device id")
    e.add_argument("--time-scale", type=float, metavar="X",
                   help="wall seconds per emulated second (e.g. 0.1 = 10x faster)")
    e.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- ENGINE ARGS",
                   help="vllm serve MODEL [flags] or trtllm-serve MODEL [flags]")
    e.set_defaults(func=cmd_engine)


def _say(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    inst = _instance(args)
    t0 = time.monotonic()
    state = fleet.up(args.inventory, limit=args.limit, log=_say, instance=inst)
    hosts = [h["spec"] for h in state["hosts"].values()]
    if args.json:
        print(json.dumps({"instance": inst.name, "hosts": hosts,
                          "seconds": round(time.monotonic() - t0, 1)}, indent=2, sort_keys=True))
        return 0
    for h in hosts:
        print(f"{h['name']:<14} {h['device']:<15} {h['address']:<12} "
              f"ssh -i {inst.key_file} root@{h['address']}")
    rootfs = "cached" if state.get("rootfs_cached") else "built"
    print(f"lab up: instance {inst.name}, {len(hosts)} host(s) in "
          f"{time.monotonic() - t0:.1f}s (rootfs {rootfs})")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    inst = _instance(args)
    fleet.down(args.inventory, log=_say, instance=inst)
    if args.json:
        print(json.dumps({"instance": inst.name, "down": True}))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    rows = fleet.status(args.inventory, args.limit, instance=_instance(args))
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    cols = ["host", "device", "address", "reachable", "service_active", "serving",
            "memory_mib", "boot_s"]
    table = [[c.upper() for c in cols]]
    table += [[str(r.get(c, "-")).lower() if isinstance(r.get(c), bool) else
               str(r.get(c, "-")) for c in cols] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    mem = sorted(r["memory_mib"] for r in rows if isinstance(r.get("memory_mib"), float))
    boot = sorted(r["boot_s"] for r in rows if isinstance(r.get("boot_s"), int | float))
    if mem:
        print(f"{len(mem)} host(s) up: memory (PSS) per host median {mem[len(mem) // 2]:.0f} "
              f"MiB, {mem[0]:.0f}-{mem[-1]:.0f}, total {sum(mem):.0f} MiB"
              + (f"; boot median {boot[len(boot) // 2]:.1f} s, max {boot[-1]:.1f} s"
                 if boot else ""))
    with contextlib.suppress(LabError):  # the lab's Hub: what it served (specdec lab hub)
        print(hubsvc.summary(hubsvc.counters(_hub_record(_instance(args))))[0])
    return 0


def _hub_record(inst: Instance) -> dict[str, Any]:
    state = load_state(inst) or {}
    rec = state.get("hub")
    if not isinstance(rec, dict):
        raise LabError(f"lab instance {inst.name!r} has no Hub running (specdec lab up first)")
    return rec


def cmd_hub(args: argparse.Namespace) -> int:
    rec = _hub_record(_instance(args))
    if args.wan_mbps is not None:
        if not args.wan_mbps >= 0:
            raise ConfigError(f"--wan-mbps={args.wan_mbps!r}: must be >= 0")
        hubsvc.control(rec, "/_lab/config", {"wan_mbps": args.wan_mbps or None})
    if args.reset:
        hubsvc.control(rec, "/_lab/reset", {})
    snap = hubsvc.counters(rec)
    if args.json:
        print(json.dumps(snap, indent=2, sort_keys=True))
    else:
        print("\n".join(hubsvc.summary(snap)))
    return 0


def cmd_net(args: argparse.Namespace) -> int:
    fleet.set_link(args.host, args.state == "up", instance=_instance(args))
    _say(f"{args.host}: network {args.state}")
    return 0


def cmd_reboot(args: argparse.Namespace) -> int:
    fleet.reboot(args.host, wait=not args.no_wait, log=_say, instance=_instance(args))
    return 0


def traffic_url(inventory: str, host: str, inst: Instance) -> tuple[str, str | None]:
    """Where a lab host's users send requests (its API, or its serving group's frontend's), and
    the key its API proxy wants (the fleet's, `specdec.config.apikey`)."""
    loaded = load_inventory(inventory)
    hosts = {h.name: h for h in parse_lab_hosts(loaded, inst)}
    if host not in hosts:
        raise ConfigError(f"{host!r}: not a host of {inventory} (hosts: {', '.join(hosts)})")
    settings = {s.host: s for s in parse_hosts(loaded)}
    group = groups_of(list(settings.values())).get(host)
    h = hosts[group.frontend] if group is not None else hosts[host]
    key = ensure_key(settings[h.name].api_key_file, h.name)
    return f"https://{h.address}:{h.port}", key


def cmd_traffic(args: argparse.Namespace) -> int:
    mix = parse_mix(args.mix)
    inst = _instance(args)
    url, key = traffic_url(args.inventory, args.host, inst)
    t = Traffic(url, mix, args.rate, args.duration, args.requests, args.max_tokens,
                args.max_inflight, args.seed, api_key=key, ca_file=str(inst.api_ca_file))
    t.check()
    res = run_traffic(t)
    if args.json:
        print(json.dumps({"host": args.host, "mix": mix, **res.to_dict()}, sort_keys=True))
    else:
        cats = ", ".join(f"{c} {n}" for c, n in sorted(res.by_category.items()))
        print(f"{args.host}: {res.sent} sent ({cats}), {res.completed} completed, "
              f"{res.failed} failed, {res.shed} shed, {res.tokens} tokens in "
              f"{res.device_s:.0f} device s (time scale {res.time_scale:g})")
    return 1 if res.failed else 0


def cmd_engine(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("lab engine: missing engine command (-- vllm serve MODEL …)")
    if args.time_scale is not None and not args.time_scale > 0:
        raise ConfigError(f"--time-scale={args.time_scale!r}: must be > 0")
    devices = load_catalog().devices
    if args.device not in devices and args.device != "h100-sxm":
        raise ConfigError(f"--device={args.device!r}: unknown device; known: "
                          f"{', '.join(sorted(devices))}")
    return launch.run(argv, device=args.device, time_scale=args.time_scale)
