"""Prompt token counts, prompt categories and deterministic pseudo-text (pure)."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

__all__ = [
    "OUTPUT_TOKEN_REGEX",
    "category_of",
    "chat_prompt_tokens",
    "count_tokens",
    "natural_length",
    "stable_int",
    "TextGenerator",
    "tokenizer_json",
]

_WORD = re.compile(r"\w+|[^\w\s]")
_SUMMARY = re.compile(r"summari[sz]|tl;?dr|condense|key points|main points|abstract of|"
                      r"in one (?:sentence|paragraph)|brief overview|recap", re.I)
_CODE = re.compile(r"```|\bdef |\bfunction\b|\bpython\b|\bjavascript\b|\btypescript\b|\brust\b|"
                   r"\bgolang\b|\bjava\b|c\+\+|\bsql\b|\bregex\b|\bcode\b|\bimplement|"
                   r"\bbug\b|\bcompile|\bscript\b|\bprogram\b|\balgorithm\b|\bunit tests?\b|"
                   r"\bclass\b|\bbash\b|\bjson\b|\byaml\b", re.I)
_REPEAT = re.compile(r"\brepeat\b|\bverbatim\b|\bcopy (?:the|this)\b|\bword for word\b|"
                     r"\bcount from\b|\blist the numbers\b", re.I)
# Chat template overhead (system header + per-message framing + assistant header).
_TEMPLATE = {"llama3": (25, 5), "qwen3": (3, 5), "o200k_harmony": (40, 5)}


def stable_int(*parts: object) -> int:
    """A process-independent 64-bit hash of ``parts``."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big")


def count_tokens(text: str) -> int:
    """Approximate BPE token count (about 1 token per short word, more for long words)."""
    n = 0
    for w in _WORD.findall(text):
        n += 1 + len(w) // 8
    return n


def chat_prompt_tokens(contents: Sequence[str], tokenizer: str) -> int:
    fixed, per = _TEMPLATE.get(tokenizer, (10, 4))
    return fixed + sum(per + count_tokens(c) for c in contents) + 4


def category_of(text: str) -> str:
    """chat | code | summarization | repetitive, from the prompt text."""
    words = [w.lower() for w in re.findall(r"\w+", text)]
    if len(words) >= 30 and len(set(words)) / len(words) < 0.35:
        return "repetitive"
    if _SUMMARY.search(text):
        return "summarization"
    if _CODE.search(text):
        return "code"
    if _REPEAT.search(text):
        return "repetitive"
    return "chat"


def natural_length(prompt_key: int) -> int:
    """Where generation would stop by itself (EOS): 150-400 tokens, fixed per prompt."""
    return 150 + prompt_key % 251


_CHAT = [
    "the", "system", "a", "model", "can", "be", "is", "that", "it", "and", "of", "to", "in", "for",
    "with", "on", "this", "which", "as", "more", "data", "when", "each", "user", "request", "time",
    "value", "result", "process", "simple", "example", "first", "however", "because", "often",
    "also", "between", "important", "way", "useful", "approach", "case", "point", "then", "these",
    "network", "memory", "speed", "answer", "question", "idea", "people", "work", "using", "makes",
    "helps"
]
_SUM = [
    "the", "article", "report", "study", "authors", "main", "finding", "key", "points", "overall",
    "results", "show", "that", "in", "summary", "paper", "describes", "proposes", "evaluates",
    "concludes", "significant", "improvement", "compared", "with", "previous", "method", "data",
    "suggests", "section", "also", "notes"
]
_CODE_LINES = (
    "def {n}({a}):", "    return {a}", "    for i in range({a}):", "    if {a} is None:",
    "        {n} = {n} + 1", "import {n}", "class {N}:", "    {n}.append({a})",
    "        return {n}({a})", "    {n} = []", "# {n} the {a}", "print({n})",
)
_NAMES = [
    "items", "value", "result", "data", "count", "node", "key", "total", "buf", "index", "parse",
    "load"
]


class TextGenerator:
    """Deterministic token strings for one output: same seed -> same text, token by token."""

    def __init__(self, seed: int, category: str) -> None:
        self._rng = random.Random(seed)
        self._category = category
        self._pending: list[str] = []

    def _refill(self) -> None:
        rng = self._rng
        if self._category == "code":
            tmpl = rng.choice(_CODE_LINES)
            n, a = rng.choice(_NAMES), rng.choice(_NAMES)
            line = tmpl.format(n=n, a=a, N=n.capitalize())
            parts = re.findall(r"\s*\w+|\s*[^\w\s]", line)
            self._pending.extend(parts)
            self._pending.append("\n")
            return
        words = _SUM if self._category == "summarization" else _CHAT
        length = rng.randint(6, 16)
        sentence = [rng.choice(words) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        self._pending.extend(" " + w for w in sentence)
        self._pending.append(rng.choice((".", ".", ".", ",", "!", "?")) if rng.random() < 0.1
                             else ".")

    def next_tokens(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            if not self._pending:
                self._refill()
            take = min(n - len(out), len(self._pending))
            out.extend(self._pending[:take])
            del self._pending[:take]
        return out


# The boundaries of the pieces `TextGenerator` emits: a newline, or optional blanks (not
# newlines) followed by a word or by one punctuation character. Splitting generated text with it
# gives back exactly the emitted tokens.
OUTPUT_TOKEN_REGEX = r"\n|[^\S\n]*\w+|[^\S\n]*[^\w\s]"


def tokenizer_json() -> str:
    """A Hugging Face ``tokenizer.json`` (WordLevel) whose pieces are the generator's tokens, so
    the `tokenizers` library counts an emulated output exactly as the engine counted it."""
    import json

    words = {w for w in (*_CHAT, *_SUM, *_NAMES)}
    vocab = ["[UNK]", "\n", ".", ",", "!", "?", "(", ")", ":", "=", "+", "#", "[", "]"]
    for w in sorted(words):
        vocab += [w, " " + w, " " + w.capitalize(), w.capitalize()]
    ids = {t: i for i, t in enumerate(dict.fromkeys(vocab))}
    doc: dict[str, object] = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": OUTPUT_TOKEN_REGEX},
                          "behavior": "Isolated", "invert": False},
        "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": ids, "unk_token": "[UNK]"},
    }
    return json.dumps(doc, indent=1) + "\n"
