"""Per role: the commands deploys/specdec.py sends given facts, and that a converged host gets
none (idempotence)."""

from __future__ import annotations

import copy
import json
import re
import shlex

import pytest

from specdec.catalog import load_catalog
from specdec.host import guard, layout, release
from specdec.host.identify import parse_identity
from specdec.render.files import LIMITS_PATH
from specdec.roles.common import DeployError
from specdec.roles.facts import DAEMON_JSON
from specdec.roles.jetson_tuning import CLOCKS_MARKER, TUNING_JSON
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import (
    AGX,
    AGX_NATIVE,
    AGX_UNGATED,
    HOST,
    SPARK,
    World,
    converged,
    run_deploy,
)
from tests.deploy.harness import host_plan as _hp
from tests.unit.test_identify import NANO8


@pytest.mark.parametrize(
    ("world_name", "data"),
    [("agx_world", AGX), ("agx_world", AGX_NATIVE), ("agx_world", AGX_UNGATED),
     ("spark_world", SPARK)],
)
def test_second_run_sends_nothing(request, monkeypatch, world_name, data):
    world: World = request.getfixturevalue(world_name)
    if world.identity.device != "dgx-spark":  # an AGX Orin left in a 15W mode
        world.with_jetson(world.identity.device, mode_id=1)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    first = run_deploy(monkeypatch, world, data)
    assert first.commands, "the first run must change something"
    assert not first.failed

    again = run_deploy(monkeypatch, converged(world, _hp(world, data), TOKEN), data)
    assert again.commands == []
    assert again.uploads == []
    assert not again.failed


def test_first_run_agx_docker(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_deploy(monkeypatch, agx_world, AGX)
    hp = _hp(agx_world, AGX)
    rid = hp.rendered.release_id
    cmds = r.commands
    assert any(c.startswith("useradd") and "-G docker" in c and "-r" in c for c in cmds)
    assert f"docker pull {hp.plan.image}" in cmds
    downloads = [c for c in cmds if "docker run --rm --network host" in c]
    assert len(downloads) == 2  # target + EAGLE-3 head
    # as the service user (and its uid in the image), never root: root copies the token to a
    # file the user may read, in a fresh directory of its own; only for the gated target (the
    # EAGLE-3 head is not: it is downloaded without any token)
    cat = load_catalog()
    assert cat.needs_token(hp.plan.model) and hp.plan.draft and \
        not cat.needs_token(hp.plan.draft)
    assert all(("runuser -u specdec -- sh -c " in c and '--user "$(id -u):$(id -g)"' in c and
                "--security-opt no-new-privileges --cap-drop ALL" in c and
                "--entrypoint sh" in c and "command -v hf" in c
                and f"complete/{repo.replace('/', '--')}" in c and "does not match the Hub" in c)
               for c, repo in zip(downloads, (hp.plan.model, hp.plan.draft), strict=True))
    target, head = downloads
    assert target.startswith("d=$(mktemp -d /run/specdec-prefetch.XXXXXX) && ") and \
        "install -m 0400 -o specdec -g root /etc/specdec/hf_token" in target and \
        "HF_TOKEN_PATH=/run/secrets/hf_token" in target
    assert "hf_token" not in head and "HF_TOKEN_PATH=/dev/null" in head
    assert not any(c.startswith("chown -R") for c in cmds)
    assert release.activate(rid) in cmds
    assert "systemctl daemon-reload" in cmds
    # order: files of the release, then the link, then the switch, then the (re)start
    i_switch = cmds.index(release.activate(rid))
    assert len(cmds) - 1 - cmds[::-1].index("systemctl daemon-reload") > i_switch
    uploaded = dict(r.uploads)
    assert f"{layout.release_dir(rid)}/specdec-engine.service" in uploaded
    assert f"{layout.release_dir(rid)}/plan.json" in uploaded
    assert LIMITS_PATH in uploaded
    daemon = json.loads(uploaded[DAEMON_JSON])
    assert daemon["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime",
                                            "runtimeArgs": []}
    assert daemon["default-ulimits"]["memlock"] == {"Name": "memlock", "Hard": -1, "Soft": -1}
    assert daemon["default-ulimits"]["stack"]["Hard"] == 67108864


def test_native_runtime_has_no_docker(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_deploy(monkeypatch, agx_world, AGX_NATIVE)
    assert not any("docker" in c for c in r.commands)
    assert DAEMON_JSON not in dict(r.uploads)
    target, head = [c for c in r.commands if "command -v hf" in c]  # gated, and not
    assert 'HF_TOKEN_PATH="$tok"' in target and "HF_TOKEN_PATH=/dev/null" in head
    assert all("runuser -u specdec" in c for c in (target, head))


def test_daemon_json_merge_keeps_foreign_keys(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    foreign = {
        "log-driver": "json-file",
        "data-root": "/mnt/docker",
        "runtimes": {"crun": {"path": "/usr/bin/crun"}},
        "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536, "Soft": 65536}},
    }
    agx_world.put(DAEMON_JSON, json.dumps(foreign))
    r = run_deploy(monkeypatch, agx_world, {**AGX, "specdec_memlock": 8388608})
    merged = json.loads(dict(r.uploads)[DAEMON_JSON])
    assert merged["log-driver"] == "json-file"
    assert merged["data-root"] == "/mnt/docker"
    assert merged["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
    assert merged["default-ulimits"]["nofile"]["Hard"] == 65536
    assert merged["default-ulimits"]["memlock"] == {
        "Name": "memlock", "Hard": 8388608, "Soft": 8388608}
    assert "systemctl restart docker.service" in r.commands or \
        "systemctl start docker.service" in r.commands


def test_daemon_json_change_restarts_docker_and_engine(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.put(DAEMON_JSON, json.dumps({"log-driver": "journald"}))
    r = run_deploy(monkeypatch, world, AGX)
    merged = json.loads(dict(r.uploads)[DAEMON_JSON])
    assert merged["log-driver"] == "journald" and "nvidia" in merged["runtimes"]
    assert r.commands == [
        "install -d -m 0755 /etc/docker",
        "systemctl restart docker.service",
        "systemctl restart specdec-engine.service",
    ]


def test_daemon_json_already_merged_no_restart(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    world = converged(agx_world, hp, TOKEN)
    doc = json.loads(world.files[DAEMON_JSON]["content"])
    doc["log-driver"] = "journald"  # someone else's key: not ours to touch
    world.put(DAEMON_JSON, json.dumps(doc))
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [] and r.uploads == []


def test_spark_daemon_json_has_no_nvidia_runtime(spark_world, monkeypatch):
    r = run_deploy(monkeypatch, spark_world, SPARK)
    daemon = json.loads(dict(r.uploads)[DAEMON_JSON])
    assert "runtimes" not in daemon
    assert "engine.yaml" in " ".join(p for p, _ in r.uploads)


# -- serve -------------------------------------------------------------------------------------


def test_serve_activates_only_when_release_differs(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    rid = hp.rendered.release_id
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(current="0ld0ld0ld0ld", releases=(rid, "0ld0ld0ld0ld"))
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands[0] == release.activate(rid)
    assert "systemctl daemon-reload" in r.commands
    assert "systemctl restart specdec-engine.service" in r.commands
    assert r.uploads == []  # the release files are already there

    world.releases = release.ReleaseState(current=rid, releases=(rid, "0ld0ld0ld0ld"))
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == []


def test_recorded_disable_decision_keeps_baseline(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    assert hp.baseline is not None
    rid, base = hp.rendered.release_id, hp.baseline.release_id
    world = converged(agx_world, hp, TOKEN)
    decision = {"outcome": "disabled", "active": base}
    world.releases = release.ReleaseState(current=base, last_good=base, releases=(base, rid),
                                          decisions={rid: decision})
    for f in hp.baseline.release_files:
        world.put(f.path, f.content, f.mode, f.owner, f.group)
    world.dirs[hp.baseline.release_dir] = {"user": "root", "group": "root", "mode": 755}
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [] and r.uploads == []  # re-run after a rollback: a no-op

    world.releases = release.ReleaseState(current=rid, releases=(base, rid),
                                          decisions={rid: decision})
    r = run_deploy(monkeypatch, world, AGX)
    assert release.activate(base) in r.commands
    assert release.activate(rid) not in r.commands


def test_decision_naming_a_missing_release_falls_back_to_candidate(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    rid = hp.rendered.release_id
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(
        current=rid, releases=(rid,),
        decisions={rid: {"outcome": "disabled", "active": "f0f0f0f0f0f0"}})
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == []  # the candidate stays; no dangling `current`


def test_prune_keeps_five_and_protected(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    rid = hp.rendered.release_id
    world = converged(agx_world, hp, TOKEN)
    old = [f"old{i:09d}" for i in range(8)]  # newest first
    world.releases = release.ReleaseState(current=rid, last_good=old[-1],
                                          releases=(rid, *old))
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [release.remove(old[5:7])]  # old[7] is last-good


# -- images ------------------------------------------------------------------------------------


def test_present_image_is_not_pulled_and_digest_change_restarts(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    world = converged(agx_world, hp, TOKEN)
    assert hp.plan.image
    new = f"dustynv/vllm@sha256:{'b' * 64}"
    world.images[hp.plan.image] = new
    r = run_deploy(monkeypatch, world, AGX)
    assert not any(c.startswith("docker pull") for c in r.commands)
    assert r.commands[0] == f"printf '%s\\n' {new} > {layout.IMAGE_DIGEST_FILE}"
    assert "systemctl restart specdec-engine.service" in r.commands
    assert "systemctl daemon-reload" not in r.commands


def test_digest_pinned_image_pulled_only_when_absent(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    image = f"dustynv/vllm:0.9.2-r36.4-cu128-24.04@sha256:{'c' * 64}"
    data = {**AGX, "specdec_image": image}
    r = run_deploy(monkeypatch, agx_world, data)
    assert f"docker pull {image}" in r.commands
    world = converged(agx_world, _hp(agx_world, data), TOKEN)
    r = run_deploy(monkeypatch, world, data)
    assert r.commands == []


# -- jetson tuning -----------------------------------------------------------------------------
NANO = {"specdec_device": "orin-nano-8gb", "specdec_model": "Qwen/Qwen3-0.6B"}
SWITCH = re.compile(r"^echo no \| nvpmodel -m (\d+)$")


def _nano_world() -> World:
    return World(identity=parse_identity(NANO8), groups=["root"])


def _tuning_commands(r) -> list[str]:
    return [c for c in r.commands if "nvpmodel" in c or "jetson_clocks" in c or TUNING_JSON in c]


def test_nano_mode_zero_is_15w_and_the_role_sets_maxn_super_by_name(monkeypatch):
    # JetPack 6.2 on an Orin Nano: id 0 is 15W, MAXN_SUPER is id 2. `nvpmodel -m 0` would
    # leave the board at 68 GB/s; the role must look the name up in the host's conf.
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(_nano_world(), _hp(_nano_world(), NANO), TOKEN)
    world.with_jetson("orin-nano-8gb", mode_id=0)
    world.files.pop(CLOCKS_MARKER, None)
    assert world.power_state().current == ("15W", 0)
    r = run_deploy(monkeypatch, world, NANO)
    assert not r.failed, r.output
    cmds = _tuning_commands(r)
    assert [m.group(1) for c in cmds if (m := SWITCH.match(c))] == ["2"]
    assert "nvpmodel -q" in cmds
    assert not any("--force" in c for c in cmds)  # 15W -> MAXN_SUPER is a live switch
    assert cmds[-1] == f"jetson_clocks && mkdir -p /run/specdec && touch {CLOCKS_MARKER}"
    assert world.power_state().current == ("MAXN_SUPER", 2)
    assert world.power_state().clocks["gpu_cur_mhz"] == 1020.0  # pinned at the new mode's max
    record = json.loads(shlex.split(next(c for c in cmds if TUNING_JSON in c))[-3])
    assert record["power_mode"] == "MAXN_SUPER" and record["power_mode_id"] == 2
    assert record["previous"] == ["15W", 0] and record["bandwidth_gbs"] == 102.4
    assert record["rebooted"] is False
    # ... and the next run finds nothing to do.
    again = run_deploy(monkeypatch, world, NANO)
    assert again.commands == [] and not again.failed


def test_agx_maxn_needs_a_reboot_and_the_role_reboots_and_checks(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.with_jetson("agx-orin-64gb")  # boot default: MODE_30W (id 2), another TPC mask
    assert world.power_state().current == ("MODE_30W", 2)
    boot = world.boot_id
    r = run_deploy(monkeypatch, world, AGX)
    assert not r.failed, r.output
    cmds = _tuning_commands(r)
    assert cmds[0] == "echo no | nvpmodel -m 0"  # MAXN: id 0 in nvpmodel_p3701_0000.conf
    assert cmds[1] == "nvpmodel -q"  # still MODE_30W: the prompt was declined
    assert "nohup setsid sh -c 'sleep 1; nvpmodel -m 0 --force'" in cmds[2]
    assert cmds[3] == "nvpmodel -q"
    assert world.boot_id != boot  # the host did reboot
    assert world.power_state().current == ("MAXN", 0)
    record = json.loads(shlex.split(next(c for c in cmds if TUNING_JSON in c))[-3])
    assert record["rebooted"] is True and record["previous"] == ["MODE_30W", 2]
    assert cmds[-1].startswith("jetson_clocks && ")  # /run was emptied by the reboot
    again = run_deploy(monkeypatch, world, AGX)
    assert again.commands == [] and not again.failed


def test_a_mode_that_does_not_hold_fails_the_host_in_one_line(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.with_jetson("agx-orin-64gb")
    answer = world.respond

    def no_switch(command: str):  # the board reboots but comes back in its old mode
        if "--force" in command:
            world.reboot()
            return True, []
        return answer(command)

    monkeypatch.setattr(world, "respond", no_switch)
    r = run_deploy(monkeypatch, world, AGX, all_may_fail=True)
    assert r.failed
    assert "after the reboot nvpmodel reports MODE_30W (id 2), not MAXN (id 0)" in r.output
    assert not any(TUNING_JSON in c for c in r.commands)


def test_pre_super_nano_without_maxn_is_left_alone(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = _nano_world().with_jetson("orin-nano-8gb", conf="nvpmodel_p3767_0003.conf")
    world = converged(world, _hp(world, NANO), TOKEN)  # 15W / 7W only: nothing faster
    r = run_deploy(monkeypatch, world, NANO)
    assert r.commands == [] and not r.failed
    assert "has no MAXN_SUPER or MAXN mode (modes: 15W, 7W); left at 15W (id 0)" in r.output


def test_jetson_tuning_absent_tools_skip_cleanly(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.which.discard("jetson_clocks")
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [] and not r.failed
    assert "no /etc/nvpmodel.conf" in r.output
    assert "jetson_clocks is not installed" in r.output


def test_jetson_tuning_opt_out(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    data = {**AGX, "specdec_jetson_tuning": False}
    world = converged(agx_world, _hp(agx_world, data), TOKEN)
    world.with_jetson("agx-orin-64gb")
    world.files.pop(CLOCKS_MARKER, None)
    r = run_deploy(monkeypatch, world, data)
    assert r.commands == []
    assert "JetsonPower" not in world.facts_seen
    assert world.power_state().current == ("MODE_30W", 2)


# -- model prefetch ----------------------------------------------------------------------------


def test_cached_models_are_not_downloaded(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    world = converged(agx_world, hp, TOKEN)
    assert hp.plan.draft
    world.hf_cached.discard(hp.plan.draft)
    r = run_deploy(monkeypatch, world, AGX)
    assert len(r.commands) == 1  # the download, as the service user; no chown by root
    assert f" sh {hp.plan.draft} >/dev/null" in r.commands[0]


# -- bad plans ---------------------------------------------------------------------------------


def test_bad_plan_aborts_before_any_command(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = copy.deepcopy(agx_world)
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, world, {**AGX, "specdec_max_num_seqs": 0})
    assert str(err.value) == f"{HOST}: specdec_max_num_seqs=0: must be an integer in 1..1024"
    assert "DeviceIdentity" not in world.facts_seen  # data checked before any fact


def test_device_mismatch_is_one_line(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, agx_world, {**AGX, "specdec_device": "orin-nano-8gb"})
    msg = str(err.value)
    assert "\n" not in msg and HOST in msg and "orin-nano-8gb" in msg


def test_one_bad_host_stops_every_host_before_any_op(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    states: list = []
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, agx_world, AGX, state_out=states,
                   others=[("@fake/orin-2", {**AGX, "specdec_port": 80})])
    assert str(err.value).startswith("@fake/orin-2: specdec_port=80")
    (state,) = states
    # the good host (prepared first) got no operation at all, and nothing was executed
    assert all(not ops for ops in state.ops.values())
    assert all(not h.connector.executed_commands for h in state.inventory)


def test_activation_off_last_good_arms_the_guard_first(monkeypatch, agx_world):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    rid = hp.rendered.release_id
    world = converged(agx_world, hp, TOKEN)
    world.releases = release.ReleaseState(current="0ld0ld0ld0ld", last_good="0ld0ld0ld0ld",
                                          releases=(rid, "0ld0ld0ld0ld"))
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands[0] == guard.arm_command(rid, guard.deadline_for(hp.plan.health_timeout_s))
    assert r.commands[1] == release.activate(rid)
    assert r.commands.index("systemctl restart specdec-engine.service") > 1


def test_native_plans_with_the_installed_release(agx_world, monkeypatch):
    """Natively the engine release is what the host has: vLLM 0.9.2 cannot run EAGLE-3 for a
    Qwen3 target, so the plan falls back; with nothing installed the deploy stops first."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    data = {**AGX_NATIVE, "specdec_model": "Qwen/Qwen3-8B"}
    agx_world.engines = {"vllm": "0.9.2"}
    hp = _hp(agx_world, data)
    assert (hp.plan.engine_version, hp.plan.method) == ("0.9.2", "draft_model")
    assert any("Eagle3 is only supported for Llama models" in n for n in hp.plan.notes)
    agx_world.engines = {}
    world = copy.deepcopy(agx_world)
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, world, data)
    assert str(err.value) == (f"{HOST}: specdec_runtime='native': vllm is not installed on the "
                              "host (nothing on PATH answers --version)")


def test_spark_gpt_oss_gets_its_local_head_and_tiktoken(spark_world, monkeypatch):
    """TensorRT-LLM 1.2.1 (the default) needs the EAGLE-3 head as a local directory, and gpt-oss
    reads its harmony encoding from TIKTOKEN_ENCODINGS_BASE on an offline host: both are
    fetched before the engine starts, and a second run fetches nothing."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(spark_world, SPARK)
    assert hp.plan.draft_dir and hp.plan.tiktoken_dir
    r = run_deploy(monkeypatch, spark_world, SPARK)
    local = [c for c in r.commands if "--local-dir" in c or f" {hp.plan.draft_dir}" in c]
    assert any(hp.plan.draft_dir in c and "command -v hf" in c for c in local), r.commands
    fetches = [c for c in r.commands if "openaipublic.blob.core.windows.net/encodings/" in c]
    assert len(fetches) == 2 and all("sha256sum -c" in c for c in fetches)
    again = run_deploy(monkeypatch, converged(spark_world, hp, TOKEN), SPARK)
    assert again.commands == []


def test_host_data_is_parsed_once_per_host_per_run(agx_world, monkeypatch):
    import specdec.plan.hostdata as hostdata

    parsed: list[str] = []
    check = hostdata._check_unknown

    def counting(host, data):
        parsed.append(host)
        return check(host, data)

    monkeypatch.setattr(hostdata, "_check_unknown", counting)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    others = [("@fake/orin-2", AGX), ("@fake/orin-3", AGX_UNGATED)]
    r = run_deploy(monkeypatch, agx_world, AGX, others=others)
    assert not r.failed
    assert sorted(parsed) == sorted([HOST, "@fake/orin-2", "@fake/orin-3"])


LOGIN = "is an existing login account on the host (uid {uid}); the service user must be a " \
    "dedicated system account"
NOT_OURS = "is an existing account specdec did not create (uid {uid}, comment {comment!r}, not " \
    "'specdec service account'); name an account that does not exist yet"
MARK = "specdec service account"


@pytest.mark.parametrize(("uid", "home", "shell", "comment", "refused"), [
    (0, "/root", "/bin/bash", "root", LOGIN),
    (1000, "/home/svc", "/bin/bash", "Svc", LOGIN),
    # a system account of a package (www-data, messagebus, sshd, etcd, docker-registry, ...):
    # the deploy moved its home and added it to docker (issue 29, medium 9)
    (998, "/var/www", "/usr/sbin/nologin", "www-data", NOT_OURS),
    (120, "/nonexistent", "/usr/sbin/nologin", None, NOT_OURS),
    (998, "/var/lib/specdec", "/bin/sh", "someone's", NOT_OURS),
    (1, "/usr/sbin", "/usr/sbin/nologin", MARK,
     "is one of the distribution's own accounts (uid 1, below 100); the service user must be an "
     "account of specdec's"),
    (998, "/srv/x", "/bin/sh", MARK, None),  # specdec's (marked): corrected
    (998, "/var/lib/specdec", "/usr/sbin/nologin", None, None),  # a specdec's before the mark
])
def test_an_account_specdec_did_not_create_is_not_made_the_service_user(
        agx_world, monkeypatch, uid, home, shell, comment, refused):
    """The deploy makes the service user a nologin account with specdec's home (and the docker
    group): an existing account is refused before any change unless specdec created it."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    agx_world.users["svc"] = {"home": home, "shell": shell, "group": "svc", "groups": [],
                              "uid": uid, "comment": comment}
    data = {**AGX, "specdec_service_user": "svc"}
    if not refused:
        cmds = run_deploy(monkeypatch, agx_world, data).commands
        mod = [c for c in cmds if c.startswith("usermod")]
        assert len(mod) == 1 and mod[0].endswith(" svc"), mod
        assert ("-c 'specdec service account'" in mod[0]) is (comment != MARK), mod
        return
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, agx_world, data)
    assert str(err.value) == f"{HOST}: specdec_service_user='svc': " + refused.format(
        uid=uid, comment=comment)


def test_a_new_service_user_is_marked(agx_world, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    cmds = [c for c in run_deploy(monkeypatch, agx_world, AGX).commands
            if c.startswith("useradd")]
    assert cmds == ["useradd -c 'specdec service account' -d /var/lib/specdec -s "
                    "/usr/sbin/nologin -g specdec -G docker -r -M specdec"], cmds


@pytest.mark.parametrize(("change", "expect"), [
    ({}, None),
    ({"groups": []}, "usermod -a -G docker specdec"),
    ({"shell": "/bin/bash"}, "usermod -s /usr/sbin/nologin specdec"),
    ({"home": "/home/specdec", "group": "users"},
     "usermod -d /var/lib/specdec -g specdec specdec"),
])
def test_an_existing_service_user_is_corrected_as_server_user_would(
        agx_world, monkeypatch, change, expect):
    """specdec.roles.docker_access.service_user: pyinfra's server.user arguments, one account
    read."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    w = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    w.users["specdec"].update(change)
    cmds = [c for c in run_deploy(monkeypatch, w, AGX).commands
            if c.startswith(("useradd", "usermod"))]
    assert cmds == ([expect] if expect else []), cmds


def test_user_account_fact_on_a_real_shell():
    """The one-account read parses as pyinfra's Users does; an absent account is {}."""
    import getpass
    import subprocess

    from pyinfra.facts.server import Users

    from specdec.roles.facts import UserAccount

    me = getpass.getuser()
    for name, present in ((me, True), ("no-such-user-specdec", False)):
        out = subprocess.run(["sh", "-c", UserAccount().command(user=name)],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        got = UserAccount().process(out) if out else UserAccount().default()
        if not present:
            assert got == {}
            continue
        full = Users().process(subprocess.run(["sh", "-c", Users().command()],
                                              capture_output=True, text=True).stdout.splitlines())
        keep = ("home", "shell", "group", "groups", "uid", "gid", "comment")
        assert {k: got[me][k] for k in keep} == {k: full[me][k] for k in keep}
