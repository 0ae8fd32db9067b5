"""The lab fleet as a pytest fixture: booted once per session, always torn down.

    def test_something(lab):            # lab: LabFleet (hosts booted, nothing deployed yet)
        run = lab.pyinfra()             # pyinfra -y inventories/lab.py deploys/specdec.py
        assert run.rc == 0 and not run.changed
        lab.ssh("lab-agx", "systemctl is-active specdec-engine")

    def test_after_deploy(deployed):    # deployed: the first deploy's PyinfraRun (run once)

The tests boot their own lab instance, ``test`` (`specdec_lab.instance`: its own state,
names, subnet 10.214.0.0/16 and teardown), so they run beside a lab that is already up (the
``demo`` instance of ``make demo``) and never touch it. The lab needs root and
systemd-nspawn; without them the tests fail (never skip silently). Knobs for the whole session
come from the environment as for `inventories/lab.py` (SPECDEC_LAB_HOSTS,
SPECDEC_LAB_TIME_SCALE); per-run ones (SPECDEC_LAB_FAULTS, bench knobs) go to
`LabFleet.pyinfra(env=...)`. Session teardown runs `specdec lab down` and fails the session if
any namespace, veth, mount or process of the test instance remains, or if another instance
that was up lost anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import ssl
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = "inventories/lab.py"
DEPLOY = "deploys/specdec.py"

from specdec_lab.fleet import ssh_argv  # noqa: E402
from specdec_lab.instance import ENV, Instance  # noqa: E402
from specdec_lab.spec import LabHost, lab_hosts  # noqa: E402
from specdec_lab.teardown import NSPAWN_TMPFS  # noqa: E402

# the tests' own lab, beside any other; SPECDEC_E2E_INSTANCE names another (several engineers'
# end-to-end runs on one machine, each its own)
INSTANCE = Instance(os.environ.get("SPECDEC_E2E_INSTANCE", "").strip() or "test")

_OP = re.compile(r"^--> Starting operation: (.*?)\s*$")
_RESULT = re.compile(r"^\s+\[([\w.-]+)\]\s+(Success|No changes|Skipped|Error.*)\s*$")
_TOTAL = re.compile(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


@dataclass
class PyinfraRun:
    """One ``pyinfra`` run: exit status, output, and what changed per host."""

    argv: list[str]
    rc: int
    output: str
    seconds: float
    # (host, operation) for every operation that reported Success (= changed something)
    changed: list[tuple[str, str]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    total: dict[str, str] | None = None  # the "Grand total" row: hosts/success/error/no_change
    reports: Path | None = None  # reports/<run-id>/ of this run, when the fixture chose it

    def summary(self) -> str:
        tail = "\n".join(self.output.strip().splitlines()[-25:])
        return f"rc={self.rc} changed={self.changed[:12]} errors={self.errors[:6]}\n{tail}"


def _state_beside(env: dict[str, str], reports: str | None = None) -> dict[str, str]:
    """A run's inventory state (fact cache, baselines, marks) beside its reports, as it was
    before the state moved to a directory per inventory: each test's runs stay independent."""
    where = reports or env.get("SPECDEC_REPORTS_DIR")
    if where and "SPECDEC_INVENTORY_STATE" not in env:
        env["SPECDEC_INVENTORY_STATE"] = str(Path(where).resolve())
    return env


def parse_pyinfra(argv: list[str], rc: int, output: str, seconds: float) -> PyinfraRun:
    run = PyinfraRun(argv, rc, output, seconds)
    op = "?"
    for line in output.splitlines():
        if m := _OP.match(line):
            op = m.group(1)
        elif m := _RESULT.match(line):
            host, what = m.groups()
            if what == "Success":
                run.changed.append((host, op))
            elif what.startswith("Error"):
                run.errors.append((host, op))
        elif m := _TOTAL.search(line):
            run.total = dict(zip(("hosts", "success", "error", "no_change"), m.groups(),
                                 strict=True))
    return run


@dataclass
class LabFleet:
    inventory: str
    hosts: list[LabHost]
    hf_token: str  # the marker token exported as HF_TOKEN for this session
    up_seconds: float
    env: dict[str, str]
    runs: list[PyinfraRun] = field(default_factory=list)
    instance: Instance = INSTANCE

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    def ssh(self, name: str, command: str, *, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(ssh_argv(self.host(name), command), capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{name}: {command!r} failed ({proc.returncode}): "
                                 f"{proc.stderr.strip()[-400:]}")
        return proc

    def specdec(self, *args: str, env: Mapping[str, str] | None = None,
                timeout: float = 900) -> subprocess.CompletedProcess[str]:
        reports = args[args.index("--reports") + 1] if "--reports" in args else None
        return subprocess.run([sys.executable, "-m", "specdec", *args], cwd=ROOT,
                              env=_state_beside({**self.env, **(env or {})}, reports),
                              capture_output=True, text=True, timeout=timeout, check=False)

    def pyinfra(self, *extra: str, deploy: str = DEPLOY, env: Mapping[str, str] | None = None,
                timeout: float = 1800) -> PyinfraRun:
        """``pyinfra -y [extra] inventories/lab.py DEPLOY`` from the checkout."""
        pyinfra = shutil.which("pyinfra") or "pyinfra"
        argv = [pyinfra, "-y", *extra, self.inventory, deploy]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, env=_state_beside({**self.env, **(env or {})}),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False)
        run = parse_pyinfra(argv, proc.returncode, proc.stdout, time.monotonic() - t0)
        self.runs.append(run)
        return run

    @property
    def api_key_file(self) -> Path:
        """The instance's API key: every lab host's API requires it."""
        return self.instance.api_key_file

    def api(self, h: LabHost) -> str:
        """A lab host's API: HTTPS, its certificate from the instance's API CA."""
        return f"https://{h.address}:{h.port}"

    def http(self, url: str, body: Any = None, *, key: bool | str = True,
             timeout: float = 30) -> tuple[int, Any]:
        """GET (or POST ``body`` as JSON) ``url`` from this machine, with the instance's API key
        unless ``key`` is False (a string: that key), trusting the instance's API CA: (status,
        decoded JSON or None); status 0 when nothing answered."""
        headers = {"Content-Type": "application/json"}
        if key:
            given = key if isinstance(key, str) else self.api_key_file.read_text().strip()
            headers["Authorization"] = "Bearer " + given
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers=headers)
        ctx = ssl.create_default_context(cafile=str(self.instance.api_ca_file)) \
            if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:  # noqa: S310
                raw = r.read()
                try:
                    return r.status, json.loads(raw or b"null")
                except ValueError:
                    return r.status, None
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except OSError:
            return 0, None

    def host_path(self, name: str, path: str) -> Path:
        """A file of a lab host, seen from the control node (its root is a local mount): for
        watching a host while it is cut off."""
        state = json.loads(self.instance.state_file.read_text())
        return Path(state["hosts"][name]["root"]) / path.lstrip("/")

    def status(self) -> list[dict[str, object]]:
        proc = self.specdec("lab", "status", self.inventory, "--json", timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def leftovers(inst: Instance = INSTANCE) -> list[str]:
    """Anything of lab instance ``inst`` on this machine: namespaces, veths, mounts, processes,
    state; and the lab's shared nspawn tmpfs when no other lab is up."""
    found: list[str] = []
    netns = Path("/run/netns")
    if netns.is_dir():
        found += [f"netns {p.name}" for p in netns.iterdir() if p.name.startswith(inst.prefix)]
    found += [f"link {p.name}" for p in Path("/sys/class/net").iterdir()
              if inst.is_veth(p.name.removesuffix("h"))]
    own = str(inst.dir) + "/"
    others = bool(inst.others_up() or inst.legacy_state())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and (fields[4].startswith(own) or inst.prefix in line or (
                NSPAWN_TMPFS in line and not others)):
            found.append(f"mount {fields[4]}")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("systemd-nspawn" in cmd or "docker-registry" in cmd) and (
                own in cmd or inst.prefix in cmd):
            found.append(f"process {proc.name}: {cmd[:80]}")
        if "specdec_lab.hub" in cmd and str(inst.dir / "hub") in cmd:  # the lab's Hub
            found.append(f"process {proc.name}: {cmd[:80]}")
    if inst.state_file.exists():
        found.append(f"state file {inst.state_file}")
    return found


def _others_up(inst: Instance = INSTANCE) -> dict[str, list[str]]:
    """The other lab instances that are up, with their namespaces."""
    out: dict[str, list[str]] = {}
    for other in inst.others_up():
        ns = Path("/run/netns")
        out[other.name] = sorted(p.name for p in ns.iterdir()
                                 if p.name.startswith(other.prefix)) if ns.is_dir() else []
    return out


def _untouched(before: dict[str, list[str]]) -> list[str]:
    """What the other instances that were up before the session lost (an instance taken down
    by its own owner meanwhile, state file and all, is not counted)."""
    lost: list[str] = []
    for name, namespaces in before.items():
        other = Instance(name)
        if not other.state_file.exists():
            continue
        lost += [f"{name}: netns {n}" for n in namespaces if not Path("/run/netns", n).exists()]
    return lost


def _marker_token() -> str:
    return "hf_MARKER" + "".join(secrets.choice(string.ascii_letters + string.digits)
                                 for _ in range(24))


@contextlib.contextmanager
def lab_instance(inst: Instance, knobs: Mapping[str, str] | None = None) -> Iterator[LabFleet]:
    """``specdec lab up inventories/lab.py`` as instance ``inst`` (with the inventory ``knobs``
    in its environment); ``lab down`` of that instance afterwards, always, failing if anything
    of it, or of another instance that was up, is left or lost."""
    if os.geteuid() != 0:
        pytest.fail("the lab end-to-end tests need root (systemd-nspawn, network namespaces)")
    for tool in ("systemd-nspawn", "pyinfra"):
        if shutil.which(tool) is None:
            pytest.fail(f"the lab end-to-end tests need {tool} ('make setup' installs it)")
    if inst.state_file.exists():
        pytest.fail(f"the tests' lab instance is already up ({inst.state_file}): another "
                    f"test session runs, or one was killed; 'specdec lab down --instance "
                    f"{inst.name}' removes it")
    others = _others_up(inst)
    token = _marker_token()
    env = {**os.environ, "HF_TOKEN": token, "PYTHONUNBUFFERED": "1", ENV: inst.name,
           # the session's own tune cache (not inventories/tune-cache of the checkout)
           "SPECDEC_TUNE_CACHE": tempfile.mkdtemp(prefix="specdec-e2e-tune-"),
           # the session's own control-node state (never the account's ~/.local/state)
           "SPECDEC_STATE_DIR": tempfile.mkdtemp(prefix="specdec-e2e-state-"), **(knobs or {})}
    env.pop("SPECDEC_LAB_FAULTS", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specdec", "lab", "up", INVENTORY], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1800, check=False)
    up_seconds = time.monotonic() - t0
    try:
        if proc.returncode != 0:
            pytest.fail(f"specdec lab up failed: {proc.stderr.strip()[-600:]}")
        hosts = _load_hosts(inst, env)
        fleet = LabFleet(INVENTORY, hosts, token, up_seconds, env, instance=inst)
        sys.stderr.write(f"\n[lab] instance {inst.name} up in {up_seconds:.1f}s: "
                         f"{', '.join(h.name for h in hosts)}"
                         f"{' (beside ' + ', '.join(others) + ')' if others else ''}\n")
        yield fleet
        for run in fleet.runs:
            sys.stderr.write(f"[lab] {' '.join(run.argv[1:])}: rc={run.rc} "
                             f"{run.seconds:.1f}s, {len(run.changed)} changed op(s)\n")
    finally:
        down = subprocess.run([sys.executable, "-m", "specdec", "lab", "down", INVENTORY],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                              check=False)
        for scratch in ("SPECDEC_TUNE_CACHE", "SPECDEC_STATE_DIR"):
            shutil.rmtree(env[scratch], ignore_errors=True)
        left, lost = leftovers(inst), _untouched(others)
        if down.returncode != 0 or left or lost:
            pytest.fail(f"lab down: rc={down.returncode} {down.stderr.strip()[-300:]}; "
                        f"left behind: {left}; removed from other instances: {lost}")


@pytest.fixture(scope="session")
def lab() -> Iterator[LabFleet]:
    """The session's lab: instance ``test`` (or ``$SPECDEC_E2E_INSTANCE``) for the session."""
    with lab_instance(INSTANCE) as fleet:
        yield fleet


def _load_hosts(inst: Instance, env: Mapping[str, str]) -> list[LabHost]:
    """The inventory's hosts as the instance's (the inventory reads the instance and its knobs
    from the environment)."""
    cwd, saved = os.getcwd(), dict(os.environ)
    os.chdir(ROOT)
    os.environ.update({k: v for k, v in env.items() if k.startswith("SPECDEC_LAB_")})
    os.environ[ENV] = inst.name
    try:
        return lab_hosts(INVENTORY, instance=inst)
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def deployed(lab: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> PyinfraRun:
    """The first deploy to the lab, at -vvv (its output is checked for the token too); its
    reports go to ``run.reports``."""
    reports = tmp_path_factory.mktemp("reports")
    run = lab.pyinfra("-vvv", env={"SPECDEC_REPORTS_DIR": str(reports),
                                   "SPECDEC_RUN_ID": "first-deploy"})
    run.reports = reports / "first-deploy"
    return run


class WatchRows:
    """``specdec watch --json`` read as it prints: (wall time, {host: row}) per look."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.looks: list[tuple[float, dict[str, dict[str, Any]]]] = []
        self.proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            self.looks.append((time.time(), {r["host"]: r for r in doc["hosts"]}))

    def wait(self, pred: Any, timeout: float) -> tuple[float, dict[str, Any]] | None:
        end = time.time() + timeout
        seen = 0
        while time.time() < end:
            for t, rows in self.looks[seen:]:
                if pred(rows):
                    return t, rows
            seen = len(self.looks)
            time.sleep(0.2)
        return None

    def verdicts(self, host: str, t0: float, t1: float) -> list[str]:
        return [rows[host]["verdict"] for t, rows in self.looks if t0 <= t <= t1
                and host in rows]
