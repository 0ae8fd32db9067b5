"""Run deploys/specdec.py through pyinfra's API against @fake hosts whose facts come from a
`World` (a model of the host). An unknown fact raises LookupError instead of returning junk.

Commands sent are the fake connector's ``executed_commands`` (facts never reach it: they are
served from the world); uploads are recorded with their content.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import runpy
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyinfra import context
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.api.util import get_file_io
from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts import files as ffacts
from pyinfra.facts import server as sfacts
from pyinfra.facts import systemd as sdfacts

from specdec.catalog import load_catalog
from specdec.config import apikey
from specdec.engines.trtllm.facts import TIKTOKEN_FILES
from specdec.host import guard, layout, power, release
from specdec.render import firewall
from specdec.roles import facts as rfacts
from specdec.roles.common import HostPlan, read_host_secrets
from specdec.roles.docker_access import merged_daemon_json
from specdec.roles.factcache import FactBatch
from specdec.roles.facts import DAEMON_JSON
from specdec.roles.images import image_present  # noqa: F401  (import check)
from specdec.roles.jetson_tuning import CLOCKS_MARKER
from specdec_lab.identity import device_files
from specdec_lab.tegra import CLOCKS_STATE, Tegra

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploys" / "specdec.py"
_LAB_CONFS = ROOT / "specdec_lab" / "nvpmodel"


@dataclass
class World:
    """What the fake host looks like to facts."""

    identity: Any = None
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> content/mode/...
    dirs: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    running: dict[str, bool] = field(default_factory=dict)
    enabled: dict[str, bool] = field(default_factory=dict)
    which: set[str] = field(default_factory=lambda: {"useradd", "usermod", "groupadd"})
    hf_cached: set[str] = field(default_factory=set)  # repo, or "repo@local_dir"
    # distribution packages' binaries (PackageState): the API proxy's nginx, the firewall's nft
    packages: dict[str, str] = field(default_factory=lambda: {
        "nft": "/usr/sbin/nft", "nginx": "/usr/sbin/nginx"})
    engines: dict[str, str] = field(default_factory=dict)  # EngineVersions (native installs)
    hashes: dict[str, str] = field(default_factory=dict)  # path -> sha256 of real file bodies
    images: dict[str, str] = field(default_factory=dict)
    releases: release.ReleaseState = field(default_factory=release.ReleaseState)
    jetson: str | None = None  # root of the host's Jetson files (`with_jetson`); None: none
    boot_id: str = "boot-1"
    daemon_json_raw: bool = False  # keep daemon.json as given (not derived from files)
    firewall: str = "none"  # FirewallLive: ok / gone / none (no release firewall yet)
    facts_seen: list[str] = field(default_factory=list)
    fact_reads: list[tuple[str, bool]] = field(default_factory=list)  # (fact, while executing)
    in_batch: bool = False
    commands_answered: list[str] = field(default_factory=list)

    # -- the Jetson tools (the lab's stand-ins, on a directory) --------------------------------
    def with_jetson(self, device: str, mode_id: int | None = None,
                    conf: str | None = None) -> World:
        """Give the host ``device``'s nvpmodel.conf (or the lab copy named ``conf``) and tools,
        in mode ``mode_id`` (None: the conf's boot default, after nvpmodel.service's run)."""
        root = tempfile.mkdtemp(prefix="specdec-jetson-")
        ident = device_files(load_catalog().device(device))
        for rel, data in ident.files.items():
            if rel.startswith(("etc/nvpmodel", "usr/lib/specdec-lab")):
                (_p := _path(root, rel)).parent.mkdir(parents=True, exist_ok=True)
                _p.write_bytes(data)
        src = (_LAB_CONFS / conf) if conf else _path(root, ident.links["etc/nvpmodel.conf"])
        _path(root, "etc/nvpmodel.conf").write_bytes(src.read_bytes())
        self.jetson = root
        self.which.add("jetson_clocks")
        t = self.tegra()
        if mode_id is not None:
            t._store(t.conf.modes[mode_id])
        else:
            t.nvpmodel(["-f", "/etc/nvpmodel.conf"], io.StringIO(), io.StringIO())
        return self

    def tegra(self) -> Tegra:
        assert self.jetson is not None
        return Tegra(self.jetson, reboot=self.reboot)

    def reboot(self) -> None:
        """A boot: new boot id, /run emptied (clocks unpinned, markers gone)."""
        self.boot_id = f"boot-{uuid.uuid4().hex[:8]}"
        self.files.pop(CLOCKS_MARKER, None)
        if self.jetson is not None:
            _path(self.jetson, CLOCKS_STATE).unlink(missing_ok=True)

    def power_state(self) -> power.PowerState | None:
        if self.jetson is None:
            return None
        t = self.tegra()
        q, c = io.StringIO(), io.StringIO()
        t.nvpmodel(["-q"], io.StringIO(), q)
        t.jetson_clocks(["--show"], c)
        return power.state_from_files({
            "conf": _path(self.jetson, "etc/nvpmodel.conf").read_text(),
            "query": q.getvalue(), "clocks": c.getvalue()})

    def respond(self, command: str) -> tuple[bool, list[str]] | None:
        """What the host answers to a command of the tuning role (None: not modelled)."""
        if self.jetson is None:
            return None
        self.commands_answered.append(command)
        t = self.tegra()
        out = io.StringIO()
        if m := re.fullmatch(r"echo (\w+) \| nvpmodel -m (\d+)", command):
            rc = t.nvpmodel(["-m", m.group(2)], io.StringIO(m.group(1) + "\n"), out)
            return rc == 0, out.getvalue().splitlines()
        if command == "nvpmodel -q":
            t.nvpmodel(["-q"], io.StringIO(), out)
            return True, out.getvalue().splitlines()
        if m := re.search(r"sh -c 'sleep 1; nvpmodel -m (\d+) --force'", command):
            t.nvpmodel(["-m", m.group(1), "--force"], io.StringIO(), out)
            return True, []
        if command.startswith("jetson_clocks && "):
            t.jetson_clocks([], out)
            self.put(CLOCKS_MARKER, "")
            return True, []
        return None

    def put(self, path: str, content: str, mode: str = "0644", user: str = "root",
            group: str = "root") -> None:
        self.files[path] = {"content": content, "mode": int(mode.lstrip("0") or "0"),
                            "user": user, "group": group}

    # -- fact router -------------------------------------------------------------------------
    def fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
        if not self.in_batch:  # a batch's parts: one read, recorded as the batch
            self.facts_seen.append(cls.__name__)
            self.fact_reads.append((cls.__name__, bool(context.state.is_executing)))
        if cls is FactBatch:  # one read of many facts (roles/factcache.py)
            self.in_batch = True
            try:
                return [(True, self.fact(c, **kw)) for c, kw in kwargs["parts"]]
            finally:
                self.in_batch = False
        path = kwargs.get("path", args[0] if args else None)
        if cls is rfacts.DeviceIdentity:
            return self.identity
        if cls is rfacts.DockerDaemonConfig:
            f = self.files.get(DAEMON_JSON)
            return json.loads(f["content"]) if f else None
        if cls is rfacts.HfCached:
            key = kwargs["repo"] + (f"@{kwargs['local_dir']}" if kwargs.get("local_dir") else "")
            return key in self.hf_cached
        if cls is rfacts.EngineVersions:
            return dict(self.engines)
        if cls is rfacts.ImageDigest:
            return self.images.get(kwargs["image"])
        if cls is rfacts.SpecdecReleases:
            return self.releases
        if cls is rfacts.FirewallLive:
            return self.firewall
        if cls is rfacts.JetsonPower:
            return self.power_state()
        if cls is rfacts.BootId:
            return self.boot_id
        if cls is rfacts.PackageState:
            unit = kwargs.get("unit") or ""
            out = {"binary": self.packages.get(kwargs["binary"], "")}
            if unit:
                out["enabled"] = "enabled" if self.enabled.get(unit) else "disabled"
                out["active"] = "active" if self.running.get(unit) else "inactive"
            return out
        if cls is ffacts.File:
            if path in self.files:
                f = self.files[path]
                return {"user": f["user"], "group": f["group"], "mode": f["mode"],
                        "size": len(f["content"])}
            return False if (path in self.dirs or path in self.links) else None
        if cls is ffacts.Directory:
            if path in self.dirs:
                return dict(self.dirs[path])
            return False if (path in self.files or path in self.links) else None
        if cls is ffacts.Link:
            if path in self.links:
                return {"link_target": self.links[path], "user": "root", "group": "root"}
            return False if (path in self.files or path in self.dirs) else None
        if cls in (ffacts.Sha1File, ffacts.Sha256File, ffacts.Md5File):
            algo = {ffacts.Sha1File: "sha1", ffacts.Sha256File: "sha256",
                    ffacts.Md5File: "md5"}[cls]
            f = self.files.get(path)
            if f and algo == "sha256" and path in self.hashes:
                return self.hashes[path]
            return hashlib.new(algo, f["content"].encode()).hexdigest() if f else None
        if cls is ffacts.FileContents:
            f = self.files.get(path)
            return f["content"].splitlines() if f else None
        if cls is rfacts.UserAccount:
            return {u: copy.deepcopy(v) for u, v in self.users.items() if u == kwargs["user"]}
        if cls is sfacts.Users:
            return copy.deepcopy(self.users)
        if cls is sfacts.Groups:
            return list(self.groups)
        if cls is sfacts.Os:
            return "Linux"
        if cls is sfacts.TmpDir:
            return "/tmp"
        if cls is sfacts.LinuxName:
            return "Ubuntu"
        if cls is sfacts.Which:
            cmd = kwargs["command"]
            return f"/usr/bin/{cmd}" if cmd in self.which else None
        if cls is sdfacts.SystemdEnabled:
            return dict(self.enabled)
        if cls is sdfacts.SystemdStatus:
            return dict(self.running)
        raise LookupError(f"fact {cls.__module__}.{cls.__name__}({kwargs}) is not modelled")


@dataclass
class Result:
    state: State
    commands: list[str]
    uploads: list[tuple[str, bytes]]
    output: str  # everything pyinfra logged/printed

    @property
    def failed(self) -> bool:
        return bool(self.state.failed_hosts)


def _record_put(self: FakeConnector, filename_or_io: Any, remote_filename: str,
                *args: Any, **kwargs: Any) -> bool:
    with get_file_io(filename_or_io) as f:
        data = f.read()
    self.host._uploads.append((remote_filename, data))  # type: ignore[attr-defined]
    return True


def run_deploy(monkeypatch: Any, world: World, data: dict[str, Any], *,
               name: str = "@fake/orin-1", execute: bool = True,
               verbose: bool = False, state_out: list[State] | None = None,
               others: list[tuple[str, dict[str, Any]]] = (),
               all_may_fail: bool = False, check_for_changes: bool = True) -> Result:
    """Prepare (and execute) deploys/specdec.py for one fake host modelled by ``world``;
    ``check_for_changes=False`` as ``pyinfra -y``: operations read facts only while executing."""
    import logging

    records: list[str] = []

    class _Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = _Capture(level=logging.DEBUG)
    logger = logging.getLogger("pyinfra")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)

    monkeypatch.setattr(
        "pyinfra.api.host.Host.get_fact",
        lambda self, cls, *a, **kw: world.fact(cls, *a, **kw),
    )
    monkeypatch.setattr(FakeConnector, "put_file", _record_put)
    fake_lookup = FakeConnector._lookup_response

    def lookup(self: FakeConnector, command: str) -> Any:
        if command.endswith(">&2; exit 1"):  # specdec.roles.lock.fail_command: fails, as in a shell
            return False, CommandOutput([OutputLine("stderr", command.split("'")[1])])
        answer = world.respond(command)
        if answer is None:
            return fake_lookup(self, command)
        ok, lines = answer
        return ok, CommandOutput([OutputLine("stdout", ln) for ln in lines])

    monkeypatch.setattr(FakeConnector, "_lookup_response", lookup)
    monkeypatch.setattr(sys.modules["specdec.roles.jetson_tuning"], "REBOOT_DELAY_S", 0.0)
    fast = {"fake_delay": 0, "fake_delay_jitter": 0}
    inv = Inventory(([(name, {**fast, **data}), *((n, {**fast, **d}) for n, d in others)], {}))
    state = State(inventory=inv, config=Config(DIFF=verbose), check_for_changes=check_for_changes)
    if state_out is not None:
        state_out.append(state)
    state.cwd = str(ROOT)
    if verbose:  # as `pyinfra -vvv --diff`: commands, outputs, facts and diffs are echoed
        monkeypatch.setattr("pyinfra.api.output._echo",
                            lambda message=None, **kw: records.append(str(message)))
        for flag in ("print_input", "print_output", "print_fact_info", "print_fact_input",
                     "print_fact_output", "print_noop_info"):
            setattr(state, flag, True)
    try:
        connect_all(state)
        for h in inv:
            h._uploads = []  # type: ignore[attr-defined]
            with ctx_state.use(state), ctx_host.use(h):
                runpy.run_path(str(DEPLOY), run_name="deploy")
        if execute:
            try:
                run_ops(state)
            except PyinfraError as exc:  # every host failed: the result says which and why
                if not all_may_fail or "No hosts remaining" not in str(exc):
                    raise
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    h = inv.get_host(name)
    return Result(
        state=state,
        commands=list(h.connector.executed_commands),
        uploads=list(h._uploads),  # type: ignore[attr-defined]
        output="\n".join(records),
    )


def converged(world: World, hp: HostPlan, token: str | None) -> World:
    """``world`` after a successful run of ``hp`` (what a second run should find)."""
    w = copy.deepcopy(world)
    plan = hp.plan
    user = plan.service_user
    w.groups = sorted(set(w.groups) | {"docker", user})
    w.users[user] = {"home": layout.STATE_DIR, "shell": "/usr/sbin/nologin", "group": user,
                     "groups": ["docker"] if plan.runtime == "docker" else [],
                     "comment": layout.ACCOUNT_MARK, "uid": 998}
    for d, owner in ((layout.STATE_DIR, "root"), (layout.CONFIG_DIR, "root"),
                     (layout.HF_HOME, user), (layout.RELEASES_DIR, "root"),
                     (hp.rendered.release_dir, "root")):
        w.dirs[d] = {"user": owner, "group": owner, "mode": 755}
    for f in hp.rendered.files:
        w.put(f.path, f.content, f.mode, f.owner, f.group)
    w.links[layout.UNIT_PATH] = f"{layout.CURRENT}/{layout.SERVICE_NAME}.service"
    w.put(guard.SCRIPT_PATH, guard.script(), "0755")
    w.put(guard.BOOT_UNIT_PATH, guard.boot_unit())
    w.links[guard.BOOT_UNIT_WANTS] = guard.BOOT_UNIT_PATH
    rid = hp.rendered.release_id
    w.releases = release.ReleaseState(current=rid, last_good=w.releases.last_good,
                                      releases=(rid,) + tuple(r for r in w.releases.releases
                                                               if r != rid),
                                      decisions=w.releases.decisions)
    w.running[f"{layout.SERVICE_NAME}.service"] = True
    w.enabled[f"{layout.SERVICE_NAME}.service"] = True
    w.put(layout.HF_TOKEN_FILE, (token + "\n") if token else "", "0600")
    # the API's keys (the inventory's, generated in this test's control state; none being
    # retired) and certificate, and the release's other units (firewall, API proxy), linked,
    # running and enabled, the live table the one they loaded
    secrets = read_host_secrets(hp.settings, apikey.inventory_dir(None, [hp.settings.host]))
    w.put(layout.API_KEY_FILE, secrets.api_key.unmask() + "\n", "0600")
    w.put(layout.API_KEY_OLD_FILE, "", "0600")
    if secrets.tls is not None:
        for name, value in zip(("api.crt", "api.key"), secrets.tls, strict=True):
            text = value.unmask()
            w.put(f"{layout.PROXY_TLS_DIR}/{name}", text if text.endswith("\n") else text + "\n",
                  "0600")
        w.dirs[layout.PROXY_TLS_DIR] = {"user": "root", "group": "root", "mode": 700}
        w.dirs[layout.PROXY_TLS_DIR.rsplit("/", 1)[0]] = {"user": "root", "group": "root",
                                                          "mode": 700}
    if secrets.api_ca is not None:
        w.put(layout.API_CA_FILE, secrets.api_ca)
    w.put(firewall.NFTABLES_DROPIN, firewall.dropin())
    for u in hp.rendered.other_units:
        w.links[f"/etc/systemd/system/{u}"] = f"{layout.CURRENT}/{u}"
        w.running[u] = w.enabled[u] = True
    w.firewall = "ok"
    if plan.runtime == "docker":
        cur = json.loads(w.files[DAEMON_JSON]["content"]) if DAEMON_JSON in w.files else None
        w.put(DAEMON_JSON, json.dumps(merged_daemon_json(cur, plan.memlock, hp.is_jetson)))
        assert plan.image
        digest = w.images.get(plan.image) or f"{plan.image.split(':')[0]}@sha256:{'a' * 64}"
        w.images[plan.image] = digest
        w.put(layout.IMAGE_DIGEST_FILE, digest + "\n")
        w.running["docker.service"] = True
    for repo in (plan.model, plan.draft):
        if repo:
            w.hf_cached.add(repo)
    if plan.draft and plan.draft_dir:
        w.hf_cached.add(f"{plan.draft}@{plan.draft_dir}")
    if plan.tiktoken_dir:
        for name, digest in TIKTOKEN_FILES.items():
            path = f"{plan.tiktoken_dir}/{name}"
            w.put(path, "(encoding)")
            w.hashes[path] = digest
    if w.jetson is not None:  # a copy: the converged host must not share the first one's
        root = tempfile.mkdtemp(prefix="specdec-jetson-")
        shutil.copytree(w.jetson, root, dirs_exist_ok=True)
        w.jetson = root
        t = w.tegra()
        if plan.jetson_tuning:
            target = power.choose_target(t.conf)
            if target is not None:
                t._store(target)  # the fastest mode BY NAME, at the conf's own id
            t.jetson_clocks([], io.StringIO())
    if "jetson_clocks" in w.which:
        w.put(CLOCKS_MARKER, "")
    for path in [*w.files, *w.links]:  # parents exist on a converged host
        parent = path.rsplit("/", 1)[0]
        w.dirs.setdefault(parent, {"user": "root", "group": "root", "mode": 755})
    return w


# -- shared test data ----------------------------------------------------------------------------

HOST = "@fake/orin-1"
AGX = {"specdec_device": "agx-orin-64gb", "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}
AGX_NATIVE = {**AGX, "specdec_runtime": "native"}
AGX_UNGATED = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}
SPARK = {
    "specdec_device": "dgx-spark",
    "specdec_engine": "trtllm",
    "specdec_model": "openai/gpt-oss-120b",
    "specdec_method": "eagle3",
}


def _path(root: str, rel: str) -> Path:
    return Path(root) / rel.lstrip("/")


def host_plan(world: World, data: dict[str, Any]) -> HostPlan:
    from specdec.plan.hostdata import parse_host_settings
    from specdec.roles.common import plan_host

    native = data.get("specdec_runtime") == "native"
    return plan_host(parse_host_settings(HOST, data), world.identity,
                     dict(world.engines) if native else None)


def identity_output(files: dict[str, str | None]) -> list[str]:
    """What the DeviceIdentity command prints for these identity files."""
    lines: list[str] = []
    for name, content in files.items():
        if content is None:
            lines.append(f"@@specdec-file {name} missing")
        else:
            lines.append(f"@@specdec-file {name}")
            lines.extend(content.replace("\0", "\n").splitlines())
    return lines
