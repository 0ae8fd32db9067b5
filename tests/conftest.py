"""Every test: the control node's own state (generated API keys, serving groups' CAs:
`specdec.config.apikey.state_dir`) in a temporary directory, never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _control_state(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path_factory.mktemp("control-state")
    state.chmod(0o700)
    monkeypatch.setenv("SPECDEC_STATE_DIR", str(state))
    monkeypatch.delenv("SPECDEC_API_KEY_FILE", raising=False)
