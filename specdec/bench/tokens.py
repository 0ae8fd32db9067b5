"""Count output tokens with the model's own tokenizer, when a server streams without ``usage``.

The benchmark asks for usage in the stream (``stream_options.include_usage`` and
``continuous_usage_stats``). A server that sends none leaves the client with text only; SSE
chunks are not tokens (a speculative engine sends several per chunk). The model's tokenizer
counts them exactly *if it is on the control node*: ``tokenizer.json`` in a local directory, or
in the Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``)
under the model's repo id. Nothing is downloaded. It needs the optional ``tokenizers`` package
(``pip install 'specdec[tokens]'``); without it, or without the file, `load_counter` returns
None and the bench marks the counts *estimated* (the gate then refuses to decide).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["find_tokenizer_file", "load_counter"]

Counter = Callable[[str], int]


def _hub_caches() -> list[Path]:
    out = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            out.append(Path(os.environ[var]))
    home = os.environ.get("HF_HOME")
    if home:
        out.append(Path(home) / "hub")
    xdg = os.environ.get("XDG_CACHE_HOME")
    out.append((Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub")
    return out


def find_tokenizer_file(name: str) -> Path | None:
    """``tokenizer.json`` for a local path (file or directory) or a repo id in the HF cache."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    if (p / "tokenizer.json").is_file():
        return p / "tokenizer.json"
    if "/" not in name or name.startswith(("/", ".", "~")):
        return None
    for cache in _hub_caches():
        base = cache / ("models--" + name.replace("/", "--"))
        try:
            rev = (base / "refs" / "main").read_text().strip()
        except OSError:
            continue
        f = base / "snapshots" / rev / "tokenizer.json"
        if f.is_file():
            return f
    return None


def load_counter(name: str | None) -> Counter | None:
    """A function counting the tokens of a text, or None (no tokenizer, no library)."""
    if not name:
        return None
    path = find_tokenizer_file(name)
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a broken file is "no tokenizer"
        return None

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count
