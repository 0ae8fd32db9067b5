"""The real deploy over real SSH against the lab fleet (see conftest.py for the fixtures)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from specdec.host.identify import identity_command, parse_identity, split_identity_output
from specdec.host.layout import (
    CONFIG_DIR,
    CURRENT,
    HF_TOKEN_FILE,
    RELEASES_DIR,
    SERVICE_NAME,
    UNIT_PATH,
)
from tests.e2e.conftest import LabFleet, PyinfraRun, leftovers

pytestmark = pytest.mark.e2e


def _models(lab: LabFleet, address: str, port: int) -> list[str]:
    status, doc = lab.http(f"https://{address}:{port}/v1/models")
    assert status == 200, status
    return [m["id"] for m in doc["data"]]


def test_each_host_identifies_as_its_device(lab: LabFleet) -> None:
    for h in lab.hosts:
        # Exactly what the deploy's DeviceIdentity fact runs, over SSH.
        out = lab.ssh(h.name, identity_command()).stdout
        ident = parse_identity(split_identity_output(out.splitlines()))
        assert ident.device == h.device, h.name
        assert ident.arch == "aarch64"
        # And `specdec identify` on the host itself.
        on_host = json.loads(lab.ssh(h.name, "specdec identify --json").stdout)
        assert on_host["device"] == h.device, h.name


def test_lab_hosts_run_systemd_docker_and_the_memlock_ceiling(lab: LabFleet) -> None:
    for h in lab.hosts:
        out = lab.ssh(h.name, "systemctl is-system-running; systemctl is-active docker sshd; "
                      "ulimit -Hl; docker info --format '{{.Driver}}'", check=False).stdout
        words = out.split()
        assert words[0] in ("running", "degraded"), (h.name, out)
        assert words[1:3] == ["active", "active"], (h.name, out)
        assert words[3] == "8192", f"{h.name}: memlock ceiling {words[3]} KiB, expected 8 MiB"
        assert words[4] == "vfs", (h.name, out)


def test_status_before_deploy_reports_reachable_but_not_serving(lab: LabFleet) -> None:
    if lab.runs:
        pytest.skip("a deploy already ran in this session")
    rows = {r["host"]: r for r in lab.status()}
    assert set(rows) == {h.name for h in lab.hosts}
    for h in lab.hosts:
        assert rows[h.name]["reachable"] is True
        assert rows[h.name]["serving"] is False


def test_deploy_converges_every_host(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    assert not deployed.errors, deployed.summary()
    runtimes = set()
    for h in lab.hosts:
        assert any(host == h.name for host, _ in deployed.changed), f"{h.name} got no changes"
        active = lab.ssh(h.name, f"systemctl is-active {SERVICE_NAME}", check=False).stdout
        assert active.strip() == "active", h.name
        plan = json.loads(lab.ssh(h.name, f"cat {RELEASES_DIR}/$(basename $(readlink "
                                          "/var/lib/specdec/current))/plan.json").stdout)
        runtimes.add(plan["runtime"])
        dyn = plan.get("dynamo") or {}
        # a serving group answers at its frontend (a worker-only member has no HTTP port)
        served_at = dyn.get("frontend_address") or h.address
        assert _models(lab, served_at, h.port) == [plan.get("served_model_name") or plan["model"]]
        containers = lab.ssh(h.name, "docker ps --format '{{.Names}} {{.Image}}'").stdout
        if plan["runtime"] == "docker":
            # A real pull from the lab registry (its mirror of the catalog image), pinned as
            # the plan says, straight on the site's mirror host, through its pull-through
            # cache on the others; the engine runs the release the image carries.
            via = ("localhost:5000/", f"{lab.hosts[0].address}:")  # the lab site's mirror
            assert plan["image"].startswith(via) and "@sha256:" in plan["image"]
            assert f"{SERVICE_NAME} {plan['image'].split('@')[0]}" in containers, containers
            digest = lab.ssh(h.name, "cat /etc/specdec/image.digest").stdout.strip()
            assert digest.startswith(via) and "@sha256:" in digest
            version = lab.http(f"{lab.api(h)}/version")[1]["version"]
            assert version == plan["engine_version"], (h.name, version)
        else:
            assert SERVICE_NAME not in containers
            pids = lab.ssh(h.name, f"systemctl show -p MainPID --value {SERVICE_NAME}").stdout
            cmd = lab.ssh(h.name, f"tr '\\0' ' ' < /proc/{pids.strip()}/cmdline").stdout
            if dyn:  # a serving group's worker: Dynamo's own vLLM backend
                assert "-m dynamo.vllm " in cmd and "/opt/dynamo/" in cmd, cmd
                continue
            assert "specdec_lab.emulator" in cmd, cmd
            assert plan["engine"] in cmd.replace("-serve", ""), cmd
            # natively, the release the host has installed (read by the deploy)
            assert any(n.endswith("(installed on the host)") for n in plan["notes"]), plan["notes"]
    assert runtimes == {"docker", "native"}, "the fleet must exercise both runtimes"


def test_second_run_changes_nothing(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    again = lab.pyinfra()
    assert again.rc == 0, again.summary()
    assert again.changed == [], f"second run changed: {again.changed}"
    assert again.total is not None and again.total["success"] == "-", again.summary()
    assert again.total["error"] == "-", again.summary()


def test_a_dry_rollout_with_diff_shows_the_change_changes_nothing_and_no_secret(
        lab: LabFleet, deployed: PyinfraRun, tmp_path: Path) -> None:
    """``specdec rollout --dry --diff -vvv`` with a changed value: pyinfra lists the new
    release's uploads among the detected changes and changes nothing on the host; neither the
    HF token nor the API key appears; no run directory is written."""
    assert deployed.rc == 0, deployed.summary()
    host = lab.hosts[0].name
    before = lab.ssh(host, f"readlink {CURRENT}; ls {RELEASES_DIR}").stdout
    reports = tmp_path / "reports"
    out = lab.specdec("rollout", lab.inventory, "--limit", host, "--dry", "--diff", "-vvv",
                      "--data", "specdec_max_num_seqs=2", "--reports", str(reports),
                      "--run-id", "dry")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-2000:]
    assert "Detected changes" in text, text[-3000:]
    uploads = set(re.findall(rf"Upload {RELEASES_DIR}/([0-9a-f]{{12}})/", text))
    assert uploads and not uploads & set(before.split()), text[-3000:]  # a new release
    assert lab.ssh(host, f"readlink {CURRENT}; ls {RELEASES_DIR}").stdout == before
    assert not (reports / "dry").exists()
    assert lab.hf_token not in text
    assert lab.api_key_file.read_text().strip() not in text


def test_status_json_after_deploy(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    rows = lab.status()
    assert [r["host"] for r in rows] == [h.name for h in lab.hosts]
    for r, h in zip(rows, lab.hosts, strict=True):
        footprint = {k: r.pop(k) for k in ("memory_mib", "boot_s", "registry")}
        assert r == {"host": h.name, "device": h.device, "address": h.address,
                     "reachable": True, "service_active": True, "serving": True}
        assert 10 < footprint["memory_mib"] < 2048 and footprint["boot_s"] > 0
        assert footprint["registry"] == (h is lab.hosts[0])  # one site registry


def test_hf_token_appears_nowhere_but_its_file(lab: LabFleet, deployed: PyinfraRun) -> None:
    token = lab.hf_token
    assert deployed.rc == 0, deployed.summary()
    assert token not in deployed.output, "the token is in pyinfra -vvv output"
    for run in lab.runs:
        assert token not in run.output
    q = shlex.quote(token)
    for h in lab.hosts:
        # The file holds it (so the searches below are able to find it) ...
        assert lab.ssh(h.name, f"cat {HF_TOKEN_FILE}").stdout.strip() == token
        mode = lab.ssh(h.name, f"stat -c '%a %U' {HF_TOKEN_FILE}").stdout.split()
        assert mode == ["600", "root"]
        # ... and nothing else: files, units, argv and environments, journal, containers.
        found = lab.ssh(h.name, (
            f"grep -rlF -- {q} /etc /var/lib/specdec /run/systemd /var/lib/docker/containers "
            f"2>/dev/null | grep -vx {HF_TOKEN_FILE} || true"
        )).stdout.strip()
        assert found == "", f"{h.name}: token found in {found}"
        assert token not in lab.ssh(h.name, "ps -eo args ww").stdout
        environ = lab.ssh(h.name, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' "
                          "| grep -c ^HF_TOKEN= || true").stdout.strip()
        assert environ == "0", f"{h.name}: a process has HF_TOKEN in its environment"
        assert token not in lab.ssh(h.name, "journalctl --no-pager -o cat").stdout
        assert token not in lab.ssh(h.name, f"systemctl cat {SERVICE_NAME}").stdout
        assert token not in lab.ssh(h.name, f"cat {UNIT_PATH}; ls -R {CONFIG_DIR}").stdout
        inspect = lab.ssh(h.name, f"docker inspect {SERVICE_NAME} 2>/dev/null || true").stdout
        assert token not in inspect


def test_lab_up_refuses_while_up(lab: LabFleet) -> None:
    proc = lab.specdec("lab", "up", lab.inventory, timeout=120)
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "already up" in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert all(row["reachable"] for row in lab.status())


def test_leftovers_sees_a_running_lab(lab: LabFleet) -> None:
    # The teardown check (conftest) must be able to fail: while up, it sees the lab.
    found = leftovers()
    assert any(f.startswith("netns specdec-lab-") for f in found)
    assert any(f.startswith("process ") for f in found)
    assert any(f.startswith("mount ") for f in found)


def _decision(lab: LabFleet, name: str, release_id: str) -> dict[str, object] | None:
    out = lab.ssh(name, f"cat {RELEASES_DIR}/{release_id}/decision.json 2>/dev/null || true")
    return json.loads(out.stdout) if out.stdout.strip() else None


def test_gate_keeps_eagle3_on_agx_and_disables_the_nx_draft(lab: LabFleet,
                                                            deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    names = {h.name for h in lab.hosts}
    pointers = "basename $(readlink /var/lib/specdec/current); " \
               "basename $(readlink /var/lib/specdec/last-good)"
    if "lab-agx" in names:
        # Kept: the speculative candidate runs, is last-good and carries no "disabled" record.
        current, good = lab.ssh("lab-agx", pointers).stdout.split()
        assert current == good
        plan = json.loads(lab.ssh("lab-agx", f"cat {RELEASES_DIR}/{current}/plan.json").stdout)
        assert plan["method"] == "eagle3", plan
        assert _decision(lab, "lab-agx", current) is None
    _tuned_k_per_host_with_its_curve(lab, deployed)
    if "lab-nx" in names:
        # Disabled: the candidate's decision names the baseline, which runs and is last-good.
        current, good = lab.ssh("lab-nx", pointers).stdout.split()
        assert current == good
        plan = json.loads(lab.ssh("lab-nx", f"cat {RELEASES_DIR}/{current}/plan.json").stdout)
        assert plan["method"] == "none", plan
        found = lab.ssh("lab-nx", f"grep -l '\"disabled\"' {RELEASES_DIR}/*/decision.json")
        cand = found.stdout.strip().split("/")[-2]
        nx = _decision(lab, "lab-nx", cand)
        assert nx is not None and nx["outcome"] == "disabled" and nx["active"] == current, nx
        assert _models(lab, lab.host("lab-nx").address, lab.host("lab-nx").port)


def _tuned_k_per_host_with_its_curve(lab: LabFleet, deployed: PyinfraRun) -> None:
    """Every k: auto host ran the tune phase: the release that runs carries the tuned k (its
    plan says so), the report has the points and the curve, index.html charts it."""
    from specdec.report.fleet import load_reports

    assert deployed.reports is not None
    reps = {r["host"]: r for r in load_reports(deployed.reports)}
    html = (deployed.reports / "index.html").read_text()
    tuned = 0
    for h in lab.hosts:
        rep = reps[h.name]
        if not rep.get("k_auto"):
            continue  # k pinned (lab-nx)
        tune = rep["tune"]
        assert tune and len(tune["measured"]) >= 2 and tune["curves"], (h.name, tune)
        current = lab.ssh(h.name, "basename $(readlink /var/lib/specdec/current)").stdout.strip()
        if rep["outcome"] == "kept":
            assert current == tune["release"], (h.name, current, tune["release"])
            plan = json.loads(lab.ssh(h.name, f"cat {RELEASES_DIR}/{current}/plan.json").stdout)
            assert plan["num_speculative_tokens"] == tune["config"]["k"], plan
            assert any(n.startswith("tuned on the host") for n in plan["notes"]), plan["notes"]
        assert f"{h.name}: throughput vs baseline by k" in html, h.name
        tuned += 1
    assert tuned >= 1 and "Tuning (num_speculative_tokens: auto)" in html


def test_benchmarks_ran_beside_the_engine(lab: LabFleet, deployed: PyinfraRun) -> None:
    """specdec_bench_mode is host by default: every arm's benchmark ran on the host against
    loopback (the uploaded client, its JSON collected), none from the control node."""
    from specdec.report.fleet import load_reports

    assert deployed.rc == 0, deployed.summary()
    assert deployed.reports is not None
    reps = {r["host"]: r for r in load_reports(deployed.reports)}
    arms = 0
    for h in lab.hosts:
        for arm in ("baseline", "candidate"):
            summ = reps[h.name].get(arm)
            if not summ:
                continue
            assert (summ.get("runner") or {}).get("where") == "host", (h.name, arm, summ)
            for f in summ["files"]:
                res = json.loads(Path(f).read_text())
                assert res["runner"]["where"] == "host" and res["url"].startswith(
                    "https://127.0.0.1:"), (h.name, f)
            arms += 1
        # a serving group benchmarks through its frontend, from the frontend member
        ran_on = (reps[h.name].get("group") or {}).get("frontend") or h.name
        client = lab.ssh(ran_on, "ls /var/lib/specdec/bench/*/onhost.pyz").stdout.split()
        assert len(client) >= 1, (h.name, ran_on)
    assert arms >= 2


def test_weights_are_in_the_host_cache_with_completion_records(lab: LabFleet,
                                                               deployed: PyinfraRun) -> None:
    """Every Hub cache variable the image sets points at the host cache (the 0.9.2 image sets
    three to /data/models/huggingface and has only huggingface-cli), and every snapshot the
    engine reads offline has a completion record."""
    assert deployed.rc == 0, deployed.summary()
    for h in lab.hosts:
        plan = json.loads(lab.ssh(h.name, f"cat {RELEASES_DIR}/$(basename $(readlink "
                                          "/var/lib/specdec/current))/plan.json").stdout)
        for repo in (plan["model"], plan["draft"]):
            if not repo:
                continue
            rec = lab.ssh(h.name, f"cat /var/lib/specdec/hf/.specdec/complete/"
                                  f"{repo.replace('/', '--')}").stdout.splitlines()
            assert len(rec) > 2, (h.name, repo, rec)
        if plan.get("draft_dir"):  # TensorRT-LLM before PR #10099: a local directory
            lab.ssh(h.name, f"test -f {plan['draft_dir']}/config.json")
