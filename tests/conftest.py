"""Every test: the control node's own state (generated API keys, serving groups' CAs:
`specdec.config.apikey.state_dir`) and Hugging Face login (the token `hf auth login` saves)
in temporary directories, never the user's; `hf_token`: a token in ``$HF_TOKEN``."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _control_state(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path_factory.mktemp("control-state")
    state.chmod(0o700)
    monkeypatch.setenv("SPECDEC_STATE_DIR", str(state))
    monkeypatch.delenv("SPECDEC_API_KEY_FILE", raising=False)
    monkeypatch.delenv("SPECDEC_INVENTORY_STATE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)


FAKE_TOKEN = "hf_MARKERfaketoken0123456789abcdefgh"  # the shape of a Hugging Face token


@pytest.fixture
def hf_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """A token for plans of gated models (`specdec plan` refuses them without one)."""
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    return FAKE_TOKEN
