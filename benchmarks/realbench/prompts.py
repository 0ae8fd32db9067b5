"""Prompts neither engine was fitted on: generated from a printed seed (the emulator's x86-cpu
step cost was fitted on the built-in prompt set, `specdec/bench/prompts.yaml`), interleaved by
the bench's four categories (chat, code, summarization, repetitive) like the built-in set, each
phrased so the emulator's own classifier (`specdec_lab.emulator.textgen.category_of`) reads
the category it was written for."""

from __future__ import annotations

import json
import random
from pathlib import Path

from specdec.bench.prompts import Prompt, PromptSet, builtin_prompts

CATEGORIES = ("chat", "code", "summarization", "repetitive")
_TOPICS = ("tides", "volcanoes", "sourdough starters", "bird migration", "solar eclipses",
           "glaciers", "coral reefs", "honeybees", "thunderstorms", "compost heaps",
           "lighthouses", "river deltas", "northern lights", "desert cacti", "tea plantations",
           "earthquakes", "snowflakes", "old maps", "sailing knots", "beekeeping")
_WHO = ("a ten-year-old", "a retired farmer", "a new student", "a tourist", "a busy parent",
        "a museum visitor")
_TASKS = ("counts the vowels in a string", "reverses the words of a sentence",
          "returns the median of a list of numbers", "checks whether a string is a palindrome",
          "groups a list of words by their first letter", "flattens a nested list",
          "converts Celsius to Fahrenheit for a list of values",
          "removes duplicate items while keeping their order",
          "finds the longest common prefix of several strings",
          "parses 'key=value' pairs from a line into a dict")
_NAMES = ("Mara", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Odile", "Bruno")
_PLACES = ("the harbour", "the library", "the market square", "the train station",
           "the old mill", "the school garden")
_EVENTS = ("a spring fair", "a repair café", "a night walk", "a book swap", "a river clean-up",
           "a choir concert")
_PHRASES = ("bright lanterns over calm water", "seven green bottles on the shelf",
            "slow rain on a tin roof", "every road leads back home", "paper boats in the gutter")
_ITEMS = ("pencils", "rulers", "erasers", "folders", "staplers", "scissors", "markers",
          "notebooks", "compasses", "calculators", "crayons", "paper clips")


def _chat(r: random.Random) -> str:
    return (f"Explain to {r.choice(_WHO)} how {r.choice(_TOPICS)} work, in a friendly tone, "
            f"and mention one surprising fact about {r.choice(_TOPICS)}.")


def _code(r: random.Random) -> str:
    return (f"Write a Python function that {r.choice(_TASKS)}. Add a docstring and two "
            "example calls.")


def _summary(r: random.Random) -> str:
    name, other = r.sample(_NAMES, 2)
    place, event = r.choice(_PLACES), r.choice(_EVENTS)
    n, m = r.randint(20, 90), r.randint(2, 9)
    text = (f"{name} organised {event} at {place} last weekend. About {n} people came, more "
            f"than the {n // 2} who were expected, and {other} ran a stall with {m} helpers. "
            f"The weather turned cold in the afternoon, so the group moved indoors for the "
            f"last hour. Several visitors asked for the event to be repeated in the autumn, "
            f"and {name} has already asked {place} for a date. The money raised will pay for "
            f"new benches and a notice board.")
    return f"Summarize the following passage in two sentences.\n\n{text}"


def _repetitive(r: random.Random) -> str:
    if r.random() < 0.5:
        return (f"Repeat the phrase '{r.choice(_PHRASES)}' {r.randint(6, 12)} times, each on "
                "its own line.")
    items = r.sample(_ITEMS, 8)
    return f"Copy this list verbatim and number each item: {', '.join(items)}."


_MAKERS = {"chat": _chat, "code": _code, "summarization": _summary, "repetitive": _repetitive}


def generate(n: int, seed: int) -> PromptSet:
    """``n`` prompts from ``seed``, interleaved by category (chat, code, summ., rep., ...)."""
    r = random.Random(seed)
    out: list[Prompt] = []
    seen: set[str] = set()
    while len(out) < n:
        cat = CATEGORIES[len(out) % len(CATEGORIES)]
        text = _MAKERS[cat](r)
        if text in seen:
            continue
        seen.add(text)
        out.append(Prompt(f"s{seed}-{len(out) + 1:02d}", cat, text))
    return PromptSet(tuple(out), builtin_prompts().warmup, f"generated, seed {seed}")


def tagged(pset: PromptSet, tag: str) -> PromptSet:
    """The same prompts, each behind ``[tag #i] `` (no prefix-cache reuse across runs; the tag
    has one length for every client so both send requests of the same size)."""
    return PromptSet(tuple(Prompt(p.id, p.category, f"[{tag} #{i + 1:02d}] {p.text}")
                           for i, p in enumerate(pset.measured)), pset.warmup, pset.source)


def write_jsonl(pset: PromptSet, path: Path) -> Path:
    """The prompts as ``vllm bench serve --dataset-name custom`` reads them."""
    path.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in pset.measured))
    return path
