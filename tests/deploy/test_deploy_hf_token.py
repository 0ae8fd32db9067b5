"""The HF token reaches /etc/specdec/hf_token and nothing else: no argv, op name, log, diff."""

from __future__ import annotations

import hashlib

import pytest
from pyinfra.api.exceptions import PyinfraError

from specdec.host import layout
from specdec.roles.common import DeployError, SecretIO
from tests.deploy import harness
from tests.deploy.conftest import TOKEN
from tests.deploy.harness import AGX, AGX_UNGATED, HOST, World, converged, run_deploy
from tests.deploy.harness import host_plan as _hp

PATH = layout.HF_TOKEN_FILE
NEW = f"{layout.CONFIG_DIR}/.hf_token.new"  # uploaded here, then renamed over PATH


def _writes_token(command: str) -> bool:
    words = command.split()
    return bool(words) and words[0] in ("install", "chmod", "chown", "cp", "mv", "rm", "tee",
                                        "truncate") and PATH in words


def _everything_shown(r, capfd) -> str:
    out, err = capfd.readouterr()
    names = [" ".join(sorted(m.names)) + " " + " ".join(map(str, m.args))
             for m in r.state.op_meta.values()]
    return "\n".join([*r.commands, *names, r.output, out, err])


@pytest.mark.parametrize("sudo", [False, True])
def test_token_uploaded_but_never_shown(agx_world, monkeypatch, capfd, sudo):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    data = {**AGX, "_sudo": True} if sudo else AGX
    r = run_deploy(monkeypatch, agx_world, data, verbose=True)
    assert not r.failed
    uploads = dict(r.uploads)
    assert uploads[NEW] == (TOKEN + "\n").encode()  # positive control: it *is* delivered
    shown = _everything_shown(r, capfd)
    assert ">>> " in shown and "Will create" in shown  # the capture sees -vvv and --diff
    assert "MARKERtoken" not in shown
    # created 0600 before any content, renamed over the old token only once complete
    i_new = r.commands.index(f"install -m 0600 -o root -g root /dev/null {NEW}")
    i_mv = r.commands.index(f"mv -f {NEW} {PATH}")
    assert i_new < r.commands.index(f"chmod 0600 {NEW}") < i_mv
    assert [c for c in r.commands if _writes_token(c)] == [f"mv -f {NEW} {PATH}"]
    # with sudo the upload's temp file is created 0600 by the login user first
    assert any("umask 077" in c for c in r.commands) is sudo


def test_unchanged_token_is_not_uploaded(agx_world, monkeypatch, capfd):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    r = run_deploy(monkeypatch, world, AGX, verbose=True)
    assert r.commands == [] and r.uploads == []
    assert "MARKERtoken" not in _everything_shown(r, capfd)


def test_changed_token_is_uploaded(agx_world, monkeypatch):
    world = converged(agx_world, _hp(agx_world, AGX), "hf_OLDtokenOLDtokenOLD99")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    r = run_deploy(monkeypatch, world, AGX)
    assert [p for p, _ in r.uploads] == [NEW]
    assert f"mv -f {NEW} {PATH}" in r.commands
    assert hashlib.sha256(dict(r.uploads)[NEW]).hexdigest() == hashlib.sha256(
        (TOKEN + "\n").encode()).hexdigest()


def test_wrong_mode_is_fixed_without_upload(agx_world, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    world = converged(agx_world, _hp(agx_world, AGX), TOKEN)
    world.files[PATH]["mode"] = 644
    r = run_deploy(monkeypatch, world, AGX)
    assert r.commands == [f"chown root:root {PATH}", f"chmod 0600 {PATH}"]
    assert r.uploads == []


def test_token_file_on_control_node_wins(agx_world, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", "hf_ENVtokenENVtokenENV00")
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    r = run_deploy(monkeypatch, agx_world, {**AGX, "specdec_hf_token_file": str(f)})
    assert dict(r.uploads)[NEW] == (TOKEN + "\n").encode()


def test_failed_upload_keeps_the_old_token(agx_world, monkeypatch):
    world = converged(agx_world, _hp(agx_world, AGX), "hf_OLDtokenOLDtokenOLD99")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    states: list = []

    record = harness._record_put

    def broken_put(self, filename_or_io, remote_filename, *args, **kwargs):
        record(self, filename_or_io, remote_filename)
        return False  # the SFTP write failed half-way

    monkeypatch.setattr(harness, "_record_put", broken_put)
    with pytest.raises(PyinfraError, match="No hosts remaining"):
        run_deploy(monkeypatch, world, AGX, state_out=states)
    h = states[0].inventory.get_host(HOST)
    commands = list(h.connector.executed_commands)
    assert [p for p, _ in h._uploads] == [NEW]
    # nothing touched the old token: no rename, no truncation
    assert not [c for c in commands if _writes_token(c)]


def test_unreadable_token_file_is_one_line(agx_world, monkeypatch, tmp_path):
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, agx_world,
                   {**AGX, "specdec_hf_token_file": str(tmp_path / "nope")})
    assert "specdec_hf_token_file" in str(err.value) and "\n" not in str(err.value)


def test_gated_model_without_token_fails_before_changes(agx_world, monkeypatch):
    world: World = agx_world
    with pytest.raises(DeployError) as err:
        run_deploy(monkeypatch, world, AGX)
    assert str(err.value).startswith(f"{HOST}: meta-llama/Llama-3.1-8B-Instruct")
    assert "gated" in str(err.value)


def test_ungated_without_token_skips_with_message(agx_world, monkeypatch):
    r = run_deploy(monkeypatch, agx_world, AGX_UNGATED)
    assert not r.failed
    assert f"install -m 0600 -o root -g root /dev/null {PATH}" in r.commands
    assert PATH not in dict(r.uploads)
    world = converged(agx_world, _hp(agx_world, AGX_UNGATED), None)
    r = run_deploy(monkeypatch, world, AGX_UNGATED)
    assert r.commands == []
    assert "no HF token given" in r.output


def test_secret_io_repr_hides_content():
    assert "MARKER" not in repr(SecretIO(TOKEN.encode()))
