"""What the deploy puts on a host before the engine starts, recreated in a temporary directory
for tests that run the emulator on rendered files: the local draft directory (emulated
``hf download --local-dir``) and the tiktoken encoding gpt-oss reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdec_lab.emulator import hf

__all__ = ["engine_yaml_on_host"]


def engine_yaml_on_host(golden: Path, plan: dict[str, Any], tmp: Path
                        ) -> tuple[Path, dict[str, str]]:
    """The golden engine.yaml pointed at those files under ``tmp``, and the environment the
    unit gives the engine (TIKTOKEN_ENCODINGS_BASE)."""
    text = (golden / "engine.yaml").read_text()
    env: dict[str, str] = {}
    draft_dir = plan.get("draft_dir")
    if isinstance(draft_dir, str):
        local = tmp / "local"
        hf.download(str(plan["draft"]), local_dir=str(local), quiet=True, time_scale=0)
        text = text.replace(draft_dir, str(local))
    if plan.get("tiktoken_dir"):
        enc = tmp / "tiktoken"
        enc.mkdir(exist_ok=True)
        (enc / "o200k_base.tiktoken").write_text("emulated encoding\n")
        env["TIKTOKEN_ENCODINGS_BASE"] = str(enc)
    out = tmp / "engine.yaml"
    out.write_text(text)
    return out, env
