"""What a deploy does for issue 29 on a converged host: a flushed firewall is restored (and
reported as a change), and a key rotation reaches the host's API proxy in two deploys."""

from __future__ import annotations

from specdec.config import apikey
from specdec.host import layout
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import AGX, converged, run_deploy
from tests.deploy.harness import host_plan as _hp

RESTORE = f"systemctl reload-or-restart {layout.FIREWALL_SERVICE}.service"
PROXY_RESTART = f"systemctl restart {layout.PROXY_SERVICE}.service"


def test_a_flushed_firewall_is_restored_by_a_no_op_deploy(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.firewall = "gone"  # `nft flush ruleset`, or nftables.service started after us
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [RESTORE] and r.uploads == [] and not r.failed
    world.firewall = "ok"
    assert run_deploy(monkeypatch, world, AGX).commands == []


def test_a_rotation_reaches_the_proxy_in_two_deploys(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hp = _hp(agx_world, AGX)
    world = converged(agx_world, hp, TOKEN)
    key_file, _ = apikey.host_key_file(None, "inventory", hp.settings.host,
                                       apikey.inventory_dir(None, [hp.settings.host]))
    old = apikey.read_key(key_file)
    new = apikey.rotate(key_file)
    r = run_deploy(monkeypatch, world, AGX)
    got = {path: body for path, body in r.uploads if "api_key" in path}
    assert set(got.values()) == {(new + "\n").encode(), (old + "\n").encode()}
    assert f"mv -f /etc/specdec/.api_key.new {layout.API_KEY_FILE}" in r.commands
    assert f"mv -f /etc/specdec/.api_key.old.new {layout.API_KEY_OLD_FILE}" in r.commands
    assert PROXY_RESTART in r.commands  # it reads the keys at start
    assert f"systemctl restart {layout.SERVICE_NAME}.service" not in r.commands  # no key
    assert old not in r.output and new not in r.output
    for path, body in r.uploads:  # the host now holds both
        world.put(path.replace("/.", "/").removesuffix(".new"), body.decode(), "0600")
    assert run_deploy(monkeypatch, world, AGX).commands == []
    apikey.retire(key_file)
    r = run_deploy(monkeypatch, world, AGX)
    assert [b for p, b in r.uploads if "api_key" in p] == [b""]  # the old one emptied
    assert PROXY_RESTART in r.commands
