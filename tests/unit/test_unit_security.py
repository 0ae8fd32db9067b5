"""Every unit the deploy writes scores at most 4.0 ("OK" or better) in ``systemd-analyze security
--offline=yes`` (systemd's own exposure score of a unit file, 0 safe .. 10 unsafe), natively and
under docker, on a Jetson and on a DGX Spark; the guard's units too. The scores print with
``-s`` (the README's table comes from them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specdec.host import guard
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import make_plan, plan_host_settings
from specdec.render import devicenodes
from specdec.render.files import render

LIMIT = 4.0
_SCORE = re.compile(r"Overall exposure level for \S+: (\d+\.\d)")
DYNAMO = [(f"spark-0{i}", {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
                           "specdec_model": "Qwen/Qwen3-8B", "ssh_hostname": f"192.0.2.4{i}",
                           "specdec_group": "pair"}) for i in (1, 2)]


def _units() -> dict[str, str]:
    """(kind -> unit file) for every kind of unit the deploy writes."""
    out: dict[str, str] = {}
    cases = {
        "vllm native, Jetson": ("agx-orin-64gb", {"specdec_runtime": "native",
                                                  "specdec_model": "Qwen/Qwen3-0.6B"}),
        "vllm docker, Jetson": ("agx-orin-64gb", {"specdec_model": "Qwen/Qwen3-0.6B"}),
        "trtllm native, Spark": ("dgx-spark", {"specdec_engine": "trtllm",
                                               "specdec_runtime": "native",
                                               "specdec_model": "Qwen/Qwen3-8B"}),
        "vllm docker, Spark": ("dgx-spark", {"specdec_model": "Qwen/Qwen3-8B",
                                             "specdec_allow_from": ["10.0.0.0/8"],
                                             "specdec_tls": {"cert": "/c", "key": "/k"}}),
    }
    for kind, (device, data) in cases.items():
        r = render(make_plan("h", {"specdec_device": device, **data}))
        for f in r.release_files:
            name = f.path.rsplit("/", 1)[1]
            if name.endswith(".service"):
                out[f"{name} ({kind})"] = f.content
    for runtime in ("native", "docker"):
        hosts = [(n, {**d, "specdec_runtime": runtime}) for n, d in DYNAMO]
        settings = parse_hosts(hosts)
        groups = groups_of(settings)
        for s in settings:
            r = render(plan_host_settings(s, group=groups[s.host]))
            for f in r.release_files:
                name = f.path.rsplit("/", 1)[1]
                if name.endswith(".service"):
                    role = "frontend member" if s.host == "spark-01" else "worker member"
                    out[f"{name} (Dynamo {runtime}, {role})"] = f.content
    out["specdec-guard.service"] = guard.boot_unit()
    return out


def _score(tmp: Path, name: str, text: str) -> float:
    path = tmp / name.split(" ", 1)[0]
    path.write_text(text)
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes",
                           f"--threshold={int(LIMIT * 10)}", str(path)],
                          capture_output=True, text=True, check=False, timeout=60)
    m = _SCORE.search(proc.stdout + proc.stderr)
    assert m, (name, proc.stdout[-400:], proc.stderr[-400:])
    assert proc.returncode == 0, f"{name}: {m.group(1)} > {LIMIT}"
    return float(m.group(1))


def test_every_unit_scores_at_most_4(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is not installed (package systemd)")
    units = _units()
    kinds = {k.split(" ", 1)[0] for k in units}
    assert {"specdec-engine.service", "specdec-proxy.service", "specdec-firewall.service",
            "specdec-etcd.service", "specdec-frontend.service",
            "specdec-guard.service"} <= kinds
    scores = {}
    for name, text in units.items():
        d = tmp_path / str(len(scores))
        d.mkdir()
        scores[name] = _score(d, name, text)
    width = max(map(len, scores))
    print("\n" + "\n".join(f"{n:<{width}}  {s:.1f}" for n, s in sorted(scores.items())))
    assert max(scores.values()) <= LIMIT


def test_the_transient_guard_is_sandboxed_as_its_boot_unit() -> None:
    cmd = guard.arm_command("abc", 60)
    for line in guard._sandbox():
        assert f"-p {line}" in cmd or f"-p '{line}'" in cmd


def _service_section(text: str) -> list[str]:
    return text.split("[Service]", 1)[1].split("[Install]", 1)[0].splitlines()


@pytest.mark.parametrize("unit", ["specdec-proxy.service", "specdec-etcd.service",
                                  "specdec-frontend.service"])
def test_network_services_run_under_their_own_account(unit: str) -> None:
    """The proxy, etcd and the Dynamo frontend ran as the service user, in the docker group on a
    docker host (issue 29, high 4): each now has an account of its own, no way to the Docker
    socket, and nginx only IP sockets; a docker CLI that is in the docker group has no network."""
    found = {k: t for k, t in _units().items() if k.startswith(unit + " ")}
    assert len(found) >= 2, sorted(found)
    for kind, text in found.items():
        lines = _service_section(text)
        assert "DynamicUser=yes" in lines and not any(ln.startswith("User=") for ln in lines), kind
        families = next(ln for ln in lines if ln.startswith("RestrictAddressFamilies="))
        if "SupplementaryGroups=docker" in lines:  # the docker CLI: no network of its own
            assert {"PrivateNetwork=yes", "IPAddressDeny=any",
                    "RestrictAddressFamilies=AF_UNIX"} <= set(lines), kind
            continue
        assert "InaccessiblePaths=-/run/docker.sock" in lines, kind
        assert not any(ln.startswith("SupplementaryGroups=") for ln in lines), kind
        want = {"specdec-proxy.service": "AF_INET AF_INET6",
                "specdec-etcd.service": "AF_INET AF_INET6 AF_UNIX",
                "specdec-frontend.service": "AF_INET AF_INET6"}[unit]
        assert families == f"RestrictAddressFamilies={want}", kind


def _device_allow(text: str) -> list[str]:
    return [ln.split("=", 1)[1].rsplit(" ", 1)[0] for ln in _service_section(text)
            if ln.startswith("DeviceAllow=")]


def test_the_gpu_nodes_are_nvidias_lists() -> None:
    """A native engine may open what NVIDIA's container mount spec gives a CUDA container on
    L4T R36 (every dev entry of devices.csv; the DRM globs as their driver's group), and on a
    Spark the 580 driver's /proc/devices groups, no longer nvidia-frontend (gone since 545)
    (issue 29, medium 10)."""
    units = _units()
    jetson = _device_allow(units["specdec-engine.service (vllm native, Jetson)"])
    csv = [ln.split(", ", 1)[1] for ln in devicenodes.L4T_R36_DEVICES_CSV.splitlines()
           if ln.startswith("dev, ")]
    assert len(csv) == 39  # and one dir entry
    assert jetson == ["char-drm", *(p for p in csv if "*" not in p)]
    for node in ("/dev/nvgpu/igpu0/ctxsw", "/dev/nvgpu/igpu0/dbg", "/dev/nvgpu/igpu0/sched",
                 "/dev/nvhost-prof-dev-gpu", "/dev/host1x-fence", "/dev/nvidiactl"):
        assert node in jetson  # missed before
    assert "/dev/nvhost-ctrl" not in jetson
    spark = _device_allow(units["specdec-engine.service (trtllm native, Spark)"])
    assert spark == ["char-nvidia", "char-nvidiactl", "char-nvidia-modeset", "char-nvidia-uvm",
                     "char-nvidia-caps"]
    for text in units.values():
        assert "nvidia-frontend" not in text
    with pytest.raises(ValueError, match="glob"):
        devicenodes.jetson_entries("dev, /dev/nvhost-*\n")
