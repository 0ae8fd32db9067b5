"""The model card files the emulator hands Dynamo's frontend (pure, no third-party imports).

A Dynamo worker registers a model directory; the frontend downloads its ``tokenizer.json``,
``tokenizer_config.json`` and ``config.json`` from the worker's system server, tokenizes
prompts and detokenizes what the worker returns. The emulated models have no real tokenizer, so
this writes one that round-trips exactly: a byte-level BPE (the GPT-2 byte alphabet, as
Llama-3's and Qwen3's tokenizers use) with no merges, so a prompt encodes to one id per byte and
the worker reads the prompt text back; plus one id per token string the emulator generates
(`specdec_lab.emulator.textgen`), so the frontend counts exactly the tokens the emulator emitted.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from specdec_lab.emulator import textgen

__all__ = ["ModelCard", "model_card", "write_model_card"]

_SPECIALS = {
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
               "<|end_header_id|>"],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}
_BOS_EOS = {"llama3": ("<|begin_of_text|>", "<|eot_id|>"), "qwen3": (None, "<|im_end|>")}
# Chat templates in the families' own formats (Llama 3 header ids; Qwen3's ChatML).
_TEMPLATES = {
    "llama3": ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
               "<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>"
               "\n\n{% endif %}"),
    "qwen3": ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
              "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
              "{% endif %}"),
}


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode: every byte as one printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    out = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + n)
            n += 1
    return out


BYTES = _byte_alphabet()
_UNBYTE = {c: b for b, c in BYTES.items()}


def _generated_strings() -> list[str]:
    """Every token string `textgen.TextGenerator` can emit."""
    out: set[str] = {"\n", ".", ",", "!", "?"}
    for w in (*textgen._CHAT, *textgen._SUM):
        out.update({" " + w, " " + w.capitalize()})
    for tmpl in textgen._CODE_LINES:
        for n in textgen._NAMES:
            for a in textgen._NAMES:
                line = tmpl.format(n=n, a=a, N=n.capitalize())
                out.update(re.findall(r"\s*\w+|\s*[^\w\s]", line))
    return sorted(out)


class ModelCard:
    """Token ids <-> text for one tokenizer family."""

    def __init__(self, family: str) -> None:
        self.family = family if family in _SPECIALS else "llama3"
        self.specials = list(_SPECIALS[self.family])
        vocab: dict[str, int] = {s: i for i, s in enumerate(self.specials)}
        self.byte_base = len(vocab)
        for b in range(256):
            vocab[BYTES[b]] = self.byte_base + b
        for text in _generated_strings():
            vocab.setdefault(_encode(text), len(vocab))
        self.vocab = vocab
        bos, eos = _BOS_EOS[self.family]
        self.bos, self.eos = bos, eos
        self.eos_id = vocab[eos] if eos else None

    def ids_of(self, token: str) -> list[int]:
        """The ids of one generated token string (one id when the vocabulary has it)."""
        hit = self.vocab.get(_encode(token))
        if hit is not None:
            return [hit]
        return [self.byte_base + b for b in token.encode()]

    def text_of(self, ids: list[int]) -> str:
        """A prompt's text back from its ids (special tokens dropped)."""
        raw = bytearray()
        inverse = {i: s for s, i in self.vocab.items()}
        for i in ids:
            if 0 <= i - self.byte_base < 256:
                raw.append(i - self.byte_base)
            elif i >= self.byte_base + 256 and i in inverse:
                raw.extend(bytes(_UNBYTE[c] for c in inverse[i]))
        return raw.decode("utf-8", "replace")

    def files(self, architecture: str, model_type: str, max_len: int) -> dict[str, str]:
        added = [{"id": self.vocab[s], "content": s, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True} for s in self.specials]
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True}
        tokenizer: dict[str, Any] = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": self.vocab, "merges": []},
        }
        tok_config = {"tokenizer_class": "PreTrainedTokenizerFast",
                      "model_max_length": max_len, "chat_template": _TEMPLATES[self.family],
                      "bos_token": self.bos, "eos_token": self.eos}
        config = {"architectures": [architecture or "LlamaForCausalLM"],
                  "model_type": model_type or "llama", "vocab_size": len(self.vocab),
                  "max_position_embeddings": max_len, "hidden_size": 4096,
                  "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16",
                  "bos_token_id": self.vocab.get(self.bos or "", None),
                  "eos_token_id": self.eos_id}
        gen = {"eos_token_id": self.eos_id}
        return {"tokenizer.json": json.dumps(tokenizer), "config.json": json.dumps(config),
                "tokenizer_config.json": json.dumps(tok_config),
                "generation_config.json": json.dumps(gen)}


def _encode(text: str) -> str:
    return "".join(BYTES[b] for b in text.encode())


@cache
def model_card(family: str) -> ModelCard:
    return ModelCard(family)


def write_model_card(directory: Path, family: str, architecture: str, model_type: str,
                     max_len: int) -> ModelCard:
    card = model_card(family)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in card.files(architecture, model_type, max_len).items():
        (directory / name).write_text(text)
    return card
