"""Accounts and devices on real systemd, in the lab, after the first deploy (issue 29: high 4,
medium 9, medium 10).

A probe runs under a unit's own [Service] settings, read from the unit file the deploy installed
(a transient unit: ``systemd-run -p`` for each; the state, runtime and cache directories left
out, so the running service keeps its own):

* the service user is in the docker group on a docker host, and ``PrivateUsers=yes`` does not
  take that away (reproduced); the API proxy, etcd and the Dynamo frontend run under accounts of
  their own, without the group, and reach no Docker socket (nginx has no AF_UNIX socket at all,
  and serves);
* every GPU node NVIDIA lists passes the native engine unit's device filter (the nodes made with
  mknod, majors from the sources `specdec.render.devicenodes` cites; a Spark's /proc/devices
  names bound over the lab host's), and a node it does not list does not;
* a containerised Dynamo frontend runs as its unit's own account and enters its 0700 HOME.
"""

from __future__ import annotations

import base64
import re
import shlex

import pytest

from specdec.engines.dynamo import units
from specdec.host import layout
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import plan_host_settings
from tests.e2e.conftest import LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e

DOCKER_HOST, JETSON, SPARK = "lab-agx", "lab-nano", "lab-dyn1"
# what a transient copy of a unit must not take over from the running one
_SKIP = re.compile(r"(Type|Exec\w*|Restart\w*|Timeout\w*|\w+Directory(Mode)?|WorkingDirectory)=")
DOCKER_PROBE = """import errno, socket
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("/run/docker.sock")
    s.sendall(b"GET /_ping HTTP/1.0\\r\\n\\r\\n")
    print("docker", s.recv(64).split(b"\\r\\n")[0].decode())
except OSError as e:
    print("refused", errno.errorcode.get(e.errno, e.errno))
"""
OPEN_PROBE = """import errno, os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY))
        print(p, "opened")
    except OSError as e:
        print(p, errno.errorcode.get(e.errno, e.errno))
"""


def _props(lab: LabFleet, host: str, unit: str) -> list[str]:
    text = lab.ssh(host, f"cat {layout.CURRENT}/{unit}").stdout
    body = text.split("[Service]", 1)[1].split("[Install]", 1)[0]
    # a transient unit's IPAddressAllow= takes no "localhost" (systemd-run 252): its networks
    return [ln.replace("=localhost", "=127.0.0.0/8 ::1/128") for ln in body.splitlines()
            if ln and not ln.startswith("#") and not _SKIP.match(ln)]


def _under(lab: LabFleet, host: str, props: list[str], code: str, *args: str) -> str:
    """``code`` run by python3 under ``props`` (a transient unit); its output."""
    argv = ["systemd-run", "--quiet", "--wait", "--pipe", *(a for p in props for a in ("-p", p)),
            "python3", "-c", code, *args]
    return lab.ssh(host, " ".join(map(shlex.quote, argv)), timeout=120).stdout.strip()


def _put(lab: LabFleet, host: str, path: str, text: str, mode: str = "0600") -> None:
    data = base64.b64encode(text.encode()).decode()
    lab.ssh(host, f"umask 077; echo {data} | base64 -d > {path} && chmod {mode} {path}")


def _status(lab: LabFleet, host: str, unit: str) -> dict[str, str]:
    pid = lab.ssh(host, f"systemctl show -p MainPID --value {unit}").stdout.strip()
    assert pid.isdigit() and pid != "0", (host, unit)
    lines = lab.ssh(host, f"cat /proc/{pid}/status").stdout.splitlines()
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines)}


def test_private_users_keeps_the_docker_group(lab: LabFleet, deployed: PyinfraRun) -> None:
    """The finding: a unit of the service user reaches dockerd (root) through the docker group,
    with PrivateUsers=yes too (the kernel keeps the group; the namespace only hides its id)."""
    assert deployed.rc == 0, deployed.summary()
    for props in (["User=specdec"], ["User=specdec", "PrivateUsers=yes"]):
        assert _under(lab, DOCKER_HOST, props, DOCKER_PROBE) == "docker HTTP/1.0 200 OK", props


@pytest.mark.parametrize(("host", "unit", "refused"), [
    (DOCKER_HOST, layout.PROXY_SERVICE, "EAFNOSUPPORT"),  # nginx: no AF_UNIX socket at all
    (SPARK, layout.PROXY_SERVICE, "EAFNOSUPPORT"),
    (SPARK, layout.FRONTEND_SERVICE, "EAFNOSUPPORT"),
    (SPARK, layout.ETCD_SERVICE, "EACCES"),  # AF_UNIX for sd_notify; the socket hidden
])
def test_network_services_have_their_own_account_and_no_docker(
        lab: LabFleet, deployed: PyinfraRun, host: str, unit: str, refused: str) -> None:
    assert deployed.rc == 0, deployed.summary()
    if host not in {h.name for h in lab.hosts}:
        pytest.skip(f"the lab has no {host}")
    docker_gid = lab.ssh(host, "getent group docker | cut -d: -f3").stdout.strip()
    specdec_uid = lab.ssh(host, "id -u specdec").stdout.strip()
    st = _status(lab, host, f"{unit}.service")
    assert st["Uid"].split()[0] != specdec_uid and st["Uid"].split()[0] != "0", st["Uid"]
    assert docker_gid not in st["Groups"].split(), st["Groups"]
    props = _props(lab, host, f"{unit}.service")
    assert _under(lab, host, props, DOCKER_PROBE) == f"refused {refused}", (host, unit)
    if unit == layout.PROXY_SERVICE:  # and nginx serves under those settings
        h = lab.host(host)
        assert lab.http(f"{lab.api(h)}/v1/models", key=False)[0] == 401


def test_the_service_user_is_marked_as_specdecs(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    for h in lab.hosts:
        entry = lab.ssh(h.name, "getent passwd specdec").stdout.strip().split(":")
        assert entry[4] == layout.ACCOUNT_MARK and entry[5] == layout.STATE_DIR, (h.name, entry)
        assert 100 <= int(entry[2]) <= 999, entry


# -- GPU nodes ---------------------------------------------------------------------------------

# Majors the sources fix (`specdec.render.devicenodes`; linux include/uapi/linux/major.h: FB 29,
# VIDEO (v4l2) 81, DRM 226 with render minors from 128; NVIDIA's 195 with nvidiactl 255 and
# nvidia-modeset 254). The rest are dynamic (nvgpu and nvidia-uvm: alloc_chrdev_region; nvmap:
# misc_register with MISC_DYNAMIC_MINOR, NVIDIA's nvmap driver): a major the host does not use.
_FIXED = {"/dev/dri/card0": (226, 0), "/dev/dri/renderD128": (226, 128), "/dev/fb0": (29, 0),
          "/dev/fb1": (29, 1), "/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255),
          "/dev/nvidia-modeset": (195, 254), "/dev/v4l2-nvdec": (81, 0),
          "/dev/v4l2-nvenc": (81, 1)}
DENIED = "/dev/specdec-not-listed"


def _free_majors(lab: LabFleet, host: str, n: int) -> list[int]:
    text = lab.ssh(host, "sed -n '/^Character/,/^$/p' /proc/devices").stdout
    used = {int(w.split()[0]) for w in text.splitlines()[1:] if w.split()}
    return [m for m in range(234, 255) if m not in used][:n]


def _misc_minor(lab: LabFleet, host: str) -> int:
    used = {int(ln.split()[0]) for ln in lab.ssh(host, "cat /proc/misc").stdout.splitlines()}
    return next(m for m in range(64, 128) if m not in used)


def _mknod(lab: LabFleet, host: str, nodes: dict[str, tuple[int, int]],
           mode: str = "0660", group: str = "video") -> None:
    """The nodes as their driver makes them: L4T's udev rules give the Tegra nodes 0660 group
    video; the desktop/server driver makes /dev/nvidia* 0666 root (NVreg_DeviceFileMode's
    default), so only the device filter stands between a unit and them."""
    cmds = [f"mkdir -p {shlex.quote(p.rsplit('/', 1)[0])} && mknod -m {mode} {shlex.quote(p)} c "
            f"{ma} {mi} && chgrp {group} {shlex.quote(p)}" for p, (ma, mi) in nodes.items()]
    lab.ssh(host, " && ".join(cmds))


def _jetson_nodes(lab: LabFleet, props: list[str]) -> dict[str, tuple[int, int]]:
    dynamic, denied = _free_majors(lab, JETSON, 2)
    nodes = {DENIED: (denied, 0), "/dev/dri/card0": _FIXED["/dev/dri/card0"],
             "/dev/dri/renderD128": _FIXED["/dev/dri/renderD128"],
             "/dev/nvmap": (10, _misc_minor(lab, JETSON))}
    paths = [p.split("=", 1)[1].split()[0] for p in props if p.startswith("DeviceAllow=/")]
    for i, p in enumerate(x for x in paths if x not in nodes):
        nodes[p] = _FIXED.get(p, (dynamic, i))
    return nodes


def _open_all(lab: LabFleet, host: str, nodes: dict[str, tuple[int, int]],
              groups: dict[str, int], mode: tuple[str, str] = ("0660", "video")
              ) -> dict[str, str]:
    """Every node of ``nodes`` made, opened under the host's engine unit, removed: the errno
    name (or "opened") per node. ``groups``: the drivers' /proc/devices names (name -> major),
    bound over the lab host's for the while (systemd resolves a char- group there when the unit
    starts)."""
    names = "".join(f"{major} {name}\\n" for name, major in groups.items())
    lab.ssh(host, "{ sed -n '/^Character/,/^$/p' /proc/devices | sed '/^$/d'; "
            f"printf '{names}\\n'; sed -n '/^Block/,$p' /proc/devices; }} > /run/sd-devices "
            "&& mount --bind /run/sd-devices /proc/devices")
    made = sorted({p if p.count("/") == 2 else "/".join(p.split("/")[:3]) for p in nodes})
    try:
        _mknod(lab, host, nodes, *mode)
        props = _props(lab, host, f"{layout.SERVICE_NAME}.service")
        out = _under(lab, host, props, OPEN_PROBE, *nodes)
    finally:
        lab.ssh(host, "umount /proc/devices; rm -rf /run/sd-devices "
                + " ".join(map(shlex.quote, made)), check=False)
    return dict(ln.rsplit(" ", 1) for ln in out.splitlines())


def test_a_jetson_engine_unit_opens_every_node_nvidia_lists(lab: LabFleet,
                                                            deployed: PyinfraRun) -> None:
    """What opens a node the filter lets through fails in the driver (ENXIO / ENODEV: there is
    no nvgpu here), what it refuses fails with EPERM before any driver."""
    assert deployed.rc == 0, deployed.summary()
    props = _props(lab, JETSON, f"{layout.SERVICE_NAME}.service")
    assert "DevicePolicy=closed" in props and "SupplementaryGroups=video" in props
    nodes = _jetson_nodes(lab, props)
    assert len(nodes) == 40  # devices.csv's 37 paths, two DRM nodes, the unlisted one
    got = _open_all(lab, JETSON, nodes, {"drm": 226})
    assert got.pop(DENIED) == "EPERM"
    assert set(got) == set(nodes) - {DENIED}
    assert not {p: e for p, e in got.items() if e == "EPERM"}, got


def test_a_spark_engine_unit_opens_the_drivers_nodes(lab: LabFleet,
                                                     deployed: PyinfraRun) -> None:
    """The 580 driver's /proc/devices names and its nodes at their majors."""
    assert deployed.rc == 0, deployed.summary()
    if SPARK not in {h.name for h in lab.hosts}:
        pytest.skip(f"the lab has no {SPARK}")
    uvm, caps, denied = _free_majors(lab, SPARK, 3)
    nodes = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255),
             "/dev/nvidia-modeset": (195, 254), "/dev/nvidia-uvm": (uvm, 0),
             "/dev/nvidia-uvm-tools": (uvm, 1), "/dev/nvidia-caps/nvidia-cap1": (caps, 1),
             DENIED: (denied, 0)}
    got = _open_all(lab, SPARK, nodes, {"nvidia": 195, "nvidiactl": 195, "nvidia-modeset": 195,
                                        "nvidia-uvm": uvm, "nvidia-caps": caps},
                    mode=("0666", "root"))
    assert got.pop(DENIED) == "EPERM", got
    assert set(got.values()) == {"ENXIO"}, got


# -- the containerised Dynamo frontend -----------------------------------------------------------

# one line: nothing a unit renders may add a line
FRONTEND_PROBE = (
    "import os; open(os.path.join(os.environ['HOME'], 'probe'), 'w').write('x'); "
    "key = 'readable' if os.access('/run/secrets/group-member.key', os.R_OK) else 'unreadable'; "
    "print('probe', os.getuid(), os.getgid(), os.getgroups(), key, "
    "os.environ['ETCD_AUTH_CLIENT_KEY'].startswith('-----BEGIN'), flush=True)")


def test_the_docker_frontend_runs_as_its_own_account(lab: LabFleet, deployed: PyinfraRun,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The frontend's unit, rendered for a docker group with the lab's image, its frontend
    swapped for a probe: root reads the group's secrets, then the container's process is the
    unit's own account (no root, no group), writes to its 0700 HOME and no longer reads the key
    file."""
    assert deployed.rc == 0, deployed.summary()
    image = lab.ssh(DOCKER_HOST, f"python3 -c 'import json; print(json.load(open("
                    f"\"{layout.CURRENT}/plan.json\"))[\"image\"])'").stdout.strip()
    hosts = [(f"s{i}", {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
                        "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-8B",
                        "ssh_hostname": f"192.0.2.{i}", "specdec_group": "g"}) for i in (1, 2)]
    settings = parse_hosts(hosts)
    monkeypatch.setattr(units, "frontend_argv", lambda plan: ["python3", "-c", FRONTEND_PROBE])
    plan = plan_host_settings(settings[0], group=groups_of(settings)["s1"])
    unit = dict(units.aux_units(plan))[f"{layout.FRONTEND_SERVICE}.service"]
    tls = "/run/specdec-probe-tls"
    assert plan.image is not None and plan.image in unit
    # the lab's image (python3 and sh, as Dynamo's), the probe's own secret files
    unit = unit.replace(plan.image, image).replace(f"{layout.GROUP_TLS_DIR}/", f"{tls}/")
    lab.ssh(DOCKER_HOST, f"mkdir -p -m 0700 {tls}")
    for name in ("ca.crt", "member.crt", "member.key"):
        _put(lab, DOCKER_HOST, f"{tls}/{name}", "-----BEGIN PROBE-----\n")
    _put(lab, DOCKER_HOST, f"/run/systemd/system/{layout.FRONTEND_SERVICE}.service", unit, "0644")
    try:
        lab.ssh(DOCKER_HOST, f"systemctl daemon-reload && systemctl start "
                f"{layout.FRONTEND_SERVICE} && for i in $(seq 60); do systemctl is-active -q "
                f"{layout.FRONTEND_SERVICE} || break; sleep 1; done", timeout=180)
        log = lab.ssh(DOCKER_HOST, f"journalctl -u {layout.FRONTEND_SERVICE} -o cat "
                      "--no-pager").stdout
        uid = lab.ssh(DOCKER_HOST, f"stat -c %u /var/lib/private/{layout.FRONTEND_SERVICE}"
                      ).stdout.strip()
    finally:
        lab.ssh(DOCKER_HOST, f"systemctl stop {layout.FRONTEND_SERVICE}; rm -rf "
                f"/run/systemd/system/{layout.FRONTEND_SERVICE}.service {tls} "
                f"/var/lib/private/{layout.FRONTEND_SERVICE} "
                f"/var/lib/{layout.FRONTEND_SERVICE}; systemctl daemon-reload", check=False)
    line = next((ln for ln in log.splitlines() if ln.startswith("probe ")), None)
    assert line is not None, log[-1500:]
    _, puid, pgid, groups, key, env_key = line.split(" ", 5)
    assert puid == uid and int(puid) > 0 and pgid != "0" and groups == "[]", line
    assert key == "unreadable" and env_key == "True", line
