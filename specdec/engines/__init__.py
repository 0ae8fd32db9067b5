"""The engines specdec serves with, one package each (`vllm`, `trtllm`, `dynamo`).

In each package, ``facts.py`` holds what every release accepts, with sources (pure Python, no
third-party imports: the engine emulator ships it into the lab's images) and ``engine.py`` the
engine's part in plan, render and verify (`specdec.engines.base.Engine`). The generic flow finds
an engine by name in `specdec.engines.registry`. Shared pieces: `version` (release numbers),
`ranges` (facts dated by release), `support` (can a release run a method).

The fact tables, `version`, `ranges` and `support` are shared vocabulary (they import nothing
but `specdec.errors`); the engines may import `config`, `catalog`, `host`, `plan.types` and the
unit text of `render` (`unitfile`, `sandbox`).
"""
