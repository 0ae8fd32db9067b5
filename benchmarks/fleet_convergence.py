"""Fleet convergence on the lab: pyinfra (deploys/specdec.py) vs an Ansible playbook.

For each fleet size (default 1, 4 and 8 lab hosts) it boots a fresh lab, times the first deploy
without the benchmark phase (``--data specdec_verify=false``) and a no-op re-run, tears the lab
down, boots it again and times the same provisioning done by benchmarks/ansible/specdec.yml
(first run and no-op re-run). Prints seconds and the ratios the issue sets goals for:

* no-op re-run of 8 hosts <= 15 s;  8 hosts <= 2x one host;  pyinfra <= 0.5x Ansible.

    python3 benchmarks/fleet_convergence.py [--sizes 1,4,8] [--skip-ansible]

Ansible comes from `pip install -e ".[bench]"`.

Needs root and the lab prerequisites (``make setup``); it owns the lab while it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # roles/ (for the daemon.json merge the playbook mirrors)
INVENTORY = "inventories/lab.py"
TOKEN = "hf_benchmarkTokenNotASecret000000"


def _run(argv: list[str], env: dict[str, str], log: Path) -> float:
    t0 = time.perf_counter()
    with log.open("ab") as out:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        sys.exit(f"{tail}\nfleet_convergence: {' '.join(argv[:4])} failed "
                 f"(exit {proc.returncode})")
    return elapsed


def _specdec(*args: str) -> list[str]:
    return [sys.executable, "-m", "specdec.cli", *args]


def _pyinfra(env: dict[str, str], log: Path) -> float:
    argv = [sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploys/specdec.py",
            "--data", "specdec_verify=false"]
    return _run(argv, env, log)


def _plans(env: dict[str, str]) -> list[dict[str, Any]]:
    out = subprocess.run(_specdec("plan", INVENTORY, "--json"), cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True).stdout
    plans: list[dict[str, Any]] = json.loads(out)
    return plans


def _ansible_inventory(env: dict[str, str], work: Path) -> Path:
    """An Ansible YAML inventory with each host's rendered files and plan-derived variables."""
    from specdec.catalog import load_catalog
    from specdec.config.inventory import load_inventory
    from specdec.roles.docker_access import merged_daemon_json  # noqa: PLC0415 (pyinfra import)

    catalog = load_catalog()
    token_file = work / "hf_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    os.environ["SPECDEC_LAB_HOSTS"] = env["SPECDEC_LAB_HOSTS"]  # the inventory reads it
    data = dict(load_inventory(INVENTORY))
    hosts: dict[str, Any] = {}
    for plan in _plans(env):
        name = plan["host"]
        rdir = work / "render" / name
        subprocess.run(_specdec("render", INVENTORY, "--host", name, "--out", str(rdir)),
                       cwd=ROOT, env=env, check=True, capture_output=True)
        release = next((rdir / "var/lib/specdec/releases").iterdir()).name
        jetson = catalog.devices[plan["device"]].platform == "l4t"
        d = data[name]
        hosts[name] = {
            "ansible_host": d["ssh_hostname"],
            "ansible_user": d.get("ssh_user", "root"),
            "ansible_ssh_private_key_file": d["ssh_key"],
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null",
            "ansible_python_interpreter": "/usr/bin/python3",
            "specdec_render_dir": str(rdir),
            "specdec_release": release,
            "specdec_runtime": plan["runtime"],
            "specdec_image": plan["image"] or "",
            "specdec_user": plan.get("service_user", "specdec"),
            "specdec_repos": [r for r in (plan["model"], plan["draft"]) if r],
            "specdec_daemon": merged_daemon_json({}, plan["memlock"], jetson),
            "specdec_token_file": str(token_file),
        }
    path = work / "hosts.json"
    path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=2))
    return path


def _ansible(inv: Path, env: dict[str, str], log: Path) -> float:
    argv = ["ansible-playbook", "-i", str(inv), "benchmarks/ansible/specdec.yml",
            "--forks", "10"]
    return _run(argv, {**env, "ANSIBLE_HOST_KEY_CHECKING": "False",
                       "ANSIBLE_PIPELINING": "True"}, log)


def _lab(action: str, env: dict[str, str], log: Path) -> float:
    return _run(_specdec("lab", action, INVENTORY), env, log)


def measure(size: int, ansible: bool, work: Path) -> dict[str, float]:
    env = {**os.environ, "SPECDEC_LAB_HOSTS": str(size), "HF_TOKEN": TOKEN}
    log = work / f"log-{size}.txt"
    row: dict[str, float] = {}
    row["lab_up_s"] = _lab("up", env, log)
    try:
        row["pyinfra_first_s"] = _pyinfra(env, log)
        row["pyinfra_noop_s"] = _pyinfra(env, log)
    finally:
        _lab("down", env, log)
    if ansible:
        _lab("up", env, log)
        try:
            inv = _ansible_inventory(env, work / f"ansible-{size}")
            row["ansible_first_s"] = _ansible(inv, env, log)
            row["ansible_noop_s"] = _ansible(inv, env, log)
        finally:
            _lab("down", env, log)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,8")
    ap.add_argument("--skip-ansible", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="specdec-conv-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        for sub in sizes:
            (work / f"ansible-{sub}").mkdir()
        rows = {}
        for n in sizes:
            rows[n] = measure(n, not args.skip_ansible, work)
            print(f"{n} host(s): " + ", ".join(f"{k} {v:.1f}" for k, v in rows[n].items()),
                  file=sys.stderr, flush=True)
    cols = ["lab_up_s", "pyinfra_first_s", "pyinfra_noop_s", "ansible_first_s", "ansible_noop_s"]
    print(f"{'hosts':>5} " + " ".join(f"{c:>16}" for c in cols))
    for n, row in rows.items():
        print(f"{n:>5} " + " ".join(f"{row.get(c, float('nan')):>16.1f}" for c in cols))
    lo, hi = rows[min(rows)], rows[max(rows)]
    print(f"\nno-op re-run, {max(rows)} hosts: {hi['pyinfra_noop_s']:.1f} s (goal <= 15 s)")
    print(f"first deploy {max(rows)} vs {min(rows)} host(s): "
          f"{hi['pyinfra_first_s'] / lo['pyinfra_first_s']:.2f}x (goal <= 2x)")
    if "ansible_first_s" in hi:
        for n, row in rows.items():
            print(f"pyinfra / Ansible, {n} host(s): first "
                  f"{row['pyinfra_first_s'] / row['ansible_first_s']:.2f}x, no-op "
                  f"{row['pyinfra_noop_s'] / row['ansible_noop_s']:.2f}x (goal <= 0.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
