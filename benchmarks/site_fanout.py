"""Weights once per site: what an N-host rollout costs the Hub through the site mirror, and how
long a model takes to reach every host, straight from the Hub against through the mirror.

Run as root, under the machine's heavy lock (it boots a lab instance of N hosts and tears it
down):

    flock /run/specdec-heavy.lock python3 benchmarks/site_fanout.py --hosts 8

1. **Rollout.** ``specdec lab up`` (``inventories/lab.py``, the first N rows, Dynamo group off)
   as one site whose mirror is the first host (`specdec_lab.sites`), then a provisioning deploy
   (``pyinfra -y inventories/lab.py deploys/specdec.py --data specdec_verify=false``): every host
   downloads its model and draft through the mirror with its image's own huggingface_hub. The
   lab's Hub counts the bytes it sent per revision: the target is one copy per revision, not one
   per host.
2. **Fan-out.** One model (``--repo``) to every host at once, into a scratch cache, three times:
   straight from the Hub (every host at its gateway), through the mirror with its cache emptied
   (cold), and through it again (warm). The Hub's egress is the site's WAN (``--wan-mbps`` of
   lab bytes: the lab serves weights at ``--scale`` of their real size, so a lab second at
   ``--wan-mbps`` is a device second at ``wan-mbps / scale``); the mirror's side is the lab's LAN
   (veths through the control node, unthrottled). Printed: wall seconds, Hub bytes and copies,
   side by side, and the ratios.

``--hosts`` takes any size the lab inventory has rows for (8 today; 32 with the fleet work's
32-host lab): the command is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's specdec

from specdec.host.layout import SITE_CA_FILE  # noqa: E402
from specdec.plan.sites import HUB_PORT  # noqa: E402
from specdec_lab import hubsvc  # noqa: E402
from specdec_lab.fleet import ssh_argv  # noqa: E402
from specdec_lab.hubrepo import hub_repo  # noqa: E402
from specdec_lab.instance import Instance  # noqa: E402
from specdec_lab.sites import host_download  # noqa: E402
from specdec_lab.spec import LabHost, lab_hosts  # noqa: E402

HUB_CA_SCRATCH = "/var/tmp/specdec-fanout-hub-ca.crt"  # the lab Hub's CA on each host

INVENTORY = "inventories/lab.py"
SCRATCH = "/tmp/specdec-fanout"
MIB = 1 << 20


def _run(argv: list[str], env: dict[str, str], timeout: float = 3600) -> tuple[int, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def _ssh(h: LabHost, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ssh_argv(h, command), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _plan(h: LabHost) -> dict[str, Any]:
    out = _ssh(h, "cat /var/lib/specdec/releases/$(basename $(readlink "
                  "/var/lib/specdec/current))/plan.json")
    return json.loads(out.stdout)


def _fanout(hosts: list[LabHost], plans: dict[str, dict[str, Any]], repo: str,
            endpoint: dict[str, str], ca: str) -> tuple[float, list[str]]:
    """Every host downloads ``repo`` at once (scratch cache), trusting the host's CA file
    ``ca``; wall seconds, failures."""
    for h in hosts:
        _ssh(h, f"rm -rf {SCRATCH}")

    def one(h: LabHost) -> str | None:
        out = _ssh(h, host_download(plans[h.name], repo, endpoint[h.name], SCRATCH, True, ca))
        return None if out.returncode == 0 else f"{h.name}: {(out.stdout + out.stderr)[-200:]}"

    t0 = time.monotonic()
    with ThreadPoolExecutor(len(hosts)) as pool:
        failed = [f for f in pool.map(one, hosts) if f]
    took = time.monotonic() - t0
    for h in hosts:
        _ssh(h, f"rm -rf {SCRATCH}")
    return took, failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=8, help="lab hosts (inventory rows; default 8)")
    p.add_argument("--instance", default="fanout", help="lab instance name (default fanout)")
    p.add_argument("--repo", default="Qwen/Qwen3-8B", help="the model fanned out")
    p.add_argument("--wan-mbps", type=float, default=80.0,
                   help="the Hub's egress in lab Mbit/s (default 80)")
    p.add_argument("--scale", type=float, default=1e-3,
                   help="served weights per byte of real weights (default 1e-3)")
    p.add_argument("--keep", action="store_true", help="leave the lab up")
    args = p.parse_args()
    inst = Instance(args.instance)
    env = {**os.environ, "SPECDEC_LAB_INSTANCE": inst.name, "SPECDEC_LAB_HOSTS": str(args.hosts),
           "SPECDEC_LAB_DYNAMO": "0", "SPECDEC_LAB_HUB_SCALE": repr(args.scale),
           "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("SPECDEC_LAB_MIRROR", None)
    specdec = [sys.executable, "-m", "specdec"]
    rc, out, up_s = _run([*specdec, "lab", "up", INVENTORY], env)
    if rc != 0:
        print(f"lab up failed: {out[-600:]}", file=sys.stderr)
        return 1
    try:
        return _measure(args, inst, env, specdec, up_s)
    finally:
        if not args.keep:
            _run([*specdec, "lab", "down", INVENTORY], env)


def _measure(args: argparse.Namespace, inst: Instance, env: dict[str, str],
             specdec: list[str], up_s: float) -> int:
    os.environ["SPECDEC_LAB_INSTANCE"] = inst.name
    os.environ["SPECDEC_LAB_HOSTS"] = str(args.hosts)
    os.environ["SPECDEC_LAB_DYNAMO"] = "0"
    hosts = lab_hosts(INVENTORY, instance=inst)
    lab_state = json.loads(inst.state_file.read_text())
    rec = lab_state["hub"]
    mirror = hosts[0]
    print(f"lab: {len(hosts)} hosts up in {up_s:.0f}s; site mirror on {mirror.name} "
          f"({mirror.address}); Hub weights at scale {rec['scale']:g}")

    # 1. a provisioning rollout through the mirror
    hubsvc.control(rec, "/_lab/reset", {})
    rc, out, deploy_s = _run([sys.executable, "-m", "pyinfra", "-y", INVENTORY,
                              "deploys/specdec.py", "--data", "specdec_verify=false"],
                             {**env, "SPECDEC_TUNE_CACHE": f"/tmp/specdec-fanout-tune-{inst.name}"})
    if rc != 0:
        print(f"deploy failed (rc {rc}): {out[-1500:]}", file=sys.stderr)
        return 1
    snap = hubsvc.counters(rec)
    plans = {h.name: _plan(h) for h in hosts}
    users: dict[str, int] = {}
    for pl in plans.values():
        for r in (pl["model"], pl["draft"]):
            if r:
                users[r] = users.get(r, 0) + 1
    print(f"\n### Rollout of {len(hosts)} hosts through the site mirror "
          f"(provisioning deploy, {deploy_s:.0f}s wall)\n")
    print("| revision | hosts | one copy (MiB) | Hub sent (MiB) | copies | without a mirror |")
    print("|---|---|---|---|---|---|")
    total_one = total_sent = total_direct = 0
    for key, sent in sorted(snap["by_revision"].items()):
        repo = key.split("@")[0]
        size = snap["revision_size"][key]
        n = users.get(repo, 0)
        total_one += size
        total_sent += sent
        total_direct += n * size
        print(f"| `{key[:48]}` | {n} | {size / MIB:.2f} | {sent / MIB:.2f} | "
              f"{sent / size:.2f} | {n} |")
    print(f"| **all** | {len(hosts)} | {total_one / MIB:.2f} | {total_sent / MIB:.2f} | "
          f"**{total_sent / total_one:.2f}** | {total_direct / total_one:.2f} |")

    # 2. fan-out of one model: straight from the Hub, then through the mirror (cold, warm)
    repo = hub_repo(args.repo, rec["scale"])
    if repo is None:
        print(f"--repo {args.repo!r}: not a catalog model", file=sys.stderr)
        return 1
    hubsvc.control(rec, "/_lab/config", {"wan_mbps": args.wan_mbps})
    direct = {h.name: hubsvc.endpoint(h.gateway) for h in hosts}
    roots = lab_state["hosts"]
    for h in hosts:  # a site's hosts trust only the site's CA: the Hub's too, for this run
        ca = Path(roots[h.name]["root"]) / HUB_CA_SCRATCH.lstrip("/")
        ca.write_bytes(hubsvc.ca_file(inst).read_bytes())
    via = {h.name: f"https://{mirror.address}:{HUB_PORT}" for h in hosts}
    rows = []
    for mode, endpoint, ca in (("straight from the Hub", direct, HUB_CA_SCRATCH),
                               ("through the mirror, cold", via, SITE_CA_FILE),
                               ("through the mirror, warm", via, SITE_CA_FILE)):
        if mode.endswith("cold"):
            _ssh(mirror, "rm -rf /var/cache/specdec-mirror/hub/* /var/cache/specdec-mirror/"
                         "lfs/* && systemctl restart nginx.service")
        hubsvc.control(rec, "/_lab/reset", {})
        took, failed = _fanout(hosts, plans, args.repo, endpoint, ca)
        if failed:
            print(f"{mode}: {len(failed)} host(s) failed: {failed[0]}", file=sys.stderr)
            return 1
        sent = hubsvc.counters(rec)["bytes"]
        rows.append((mode, took, sent))
    hubsvc.control(rec, "/_lab/config", {"wan_mbps": None})
    base_t, base_b = rows[0][1], rows[0][2]
    dev_rate = args.wan_mbps / rec["scale"]
    print(f"\n### Fan-out of {args.repo} ({repo.size / MIB:.1f} MiB served = "
          f"{repo.size / rec['scale'] / 1e9:.1f} GB real) to {len(hosts)} hosts, Hub egress "
          f"{args.wan_mbps:g} Mbit/s (lab) = {dev_rate / 1000:g} Gbit/s of real weights\n")
    print("| mode | wall s | Hub MiB | copies | time vs straight | Hub bytes vs straight |")
    print("|---|---|---|---|---|---|")
    for mode, took, sent in rows:
        print(f"| {mode} | {took:.1f} | {sent / MIB:.1f} | {sent / repo.size:.2f} | "
              f"{took / base_t:.2f} | {sent / base_b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
