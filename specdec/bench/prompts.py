"""The benchmark's prompt sets: the built-in `prompts.yaml` and user files (`--prompts FILE`).

A prompt file is YAML or JSON, either a mapping ``{measured: [...], warmup: [...]}`` or just a
list (the measured prompts; warmup then comes from the built-in set). Each item is a string or a
mapping ``{id, category, prompt}``; ``id`` defaults to ``p001``…, ``category`` to ``chat``.
Measured ids must be unique and no warmup prompt may also be measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specdec.config.yamlfile import read_yaml
from specdec.errors import ConfigError

__all__ = ["Prompt", "PromptSet", "builtin_prompts", "load_prompts"]


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str


@dataclass(frozen=True)
class PromptSet:
    measured: tuple[Prompt, ...]
    warmup: tuple[Prompt, ...]
    source: str

    def categories(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.measured:
            out[p.category] = out.get(p.category, 0) + 1
        return out


def _items(raw: Any, where: str, field: str, prefix: str) -> tuple[Prompt, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: field {field!r} must be a non-empty list")
    out: list[Prompt] = []
    for i, it in enumerate(raw):
        if isinstance(it, str):
            it = {"prompt": it}
        if not isinstance(it, dict):
            raise ConfigError(f"{where}: {field}[{i}] must be a string or a mapping, got {it!r}")
        text = it.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{where}: {field}[{i}].prompt must be a non-empty string")
        pid = it.get("id", f"{prefix}{i + 1:03d}")
        cat = it.get("category", "chat")
        if not isinstance(pid, str | int) or isinstance(pid, bool):
            raise ConfigError(f"{where}: {field}[{i}].id must be a string, got {pid!r}")
        if not isinstance(cat, str) or not cat:
            raise ConfigError(f"{where}: {field}[{i}].category must be a string, got {cat!r}")
        unknown = sorted(set(it) - {"id", "category", "prompt"})
        if unknown:
            raise ConfigError(f"{where}: {field}[{i}]: unknown field {unknown[0]!r}")
        out.append(Prompt(str(pid), cat, text))
    ids = [p.id for p in out]
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup is not None:
        raise ConfigError(f"{where}: {field}: duplicate id {dup!r}")
    return tuple(out)


def _parse(data: Any, where: str) -> PromptSet:
    warmup: tuple[Prompt, ...]
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"measured", "warmup", "version", "categories"})
        if unknown:
            raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
        measured = _items(data.get("measured"), where, "measured", "p")
        warmup = (_items(data["warmup"], where, "warmup", "w") if data.get("warmup")
                  else builtin_prompts().warmup)
    elif isinstance(data, list):
        measured = _items(data, where, "measured", "p")
        warmup = builtin_prompts().warmup
    else:
        raise ConfigError(f"{where}: expected a list of prompts or a mapping with 'measured'")
    texts = {p.text for p in measured}
    clash = next((w for w in warmup if w.text in texts), None)
    if clash is not None:
        raise ConfigError(f"{where}: warmup prompt {clash.id!r} is also in the measured set")
    return PromptSet(measured, warmup, where)


_BUILTIN: PromptSet | None = None


def builtin_prompts() -> PromptSet:
    """The package's prompt set (52 measured prompts in 4 categories, 8 warmup prompts)."""
    global _BUILTIN
    if _BUILTIN is None:
        text = resources.files("specdec.bench").joinpath("prompts.yaml").read_text()
        # the built-in file always has its own warmup section, so no recursion happens here
        _BUILTIN = _parse(yaml.safe_load(text), "specdec/bench/prompts.yaml")
    return _BUILTIN


def load_prompts(path: str | Path | None = None) -> PromptSet:
    """The built-in set (``path`` None) or a user file; ConfigError names the field."""
    if path is None:
        return builtin_prompts()
    data = read_yaml(path, "--prompts", ConfigError)
    return _parse(data, f"--prompts {path}")
