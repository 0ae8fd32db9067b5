"""`specdec bench` and `specdec gate`.

Both write their JSON only after success (to a temporary file, then renamed), so a failed run
never leaves a partial result behind; failures are one line on stderr, exit status 2 for bad
input (flags, files, a model the server does not serve), 1 for anything else. `specdec gate`
exits by its decision (`GATE_EXIT`), so a CI step can branch on it.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specdec.bench import device_time
from specdec.bench.client import BenchConfig, run_bench, to_json
from specdec.bench.prompts import load_prompts
from specdec.config.apikey import read_key
from specdec.errors import ConfigError
from specdec.gate.decide import decide, load_policy, load_result

__all__ = ["register", "write_json_atomic"]


def write_json_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    except OSError as exc:
        raise ConfigError(f"--json {path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"--json {path}: cannot write: {exc.strerror or exc}") from None


# The gate's exit status by decision (1 and 2 stay failure and bad input).
GATE_EXIT = {"keep": 0, "disable": 3, "inconclusive": 4}


def _gate(args: argparse.Namespace) -> int:
    dec = decide(load_result(args.baseline), load_result(args.candidate), load_policy(args.policy))
    text = json.dumps(dec.to_dict(), indent=2)
    if args.json:
        write_json_atomic(args.json, text)
    print(text)
    return GATE_EXIT[dec.decision]


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--concurrency: not a comma-separated list of integers: "
                          f"{text!r}") from None
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(f"--concurrency: levels must be >= 1, got {text!r}")
    return levels


def _counts(text: str | None, levels: tuple[int, ...]) -> int | tuple[int, ...] | None:
    return None if text is None else _per_level("--requests", "counts", text, levels)


def _offsets(text: str, levels: tuple[int, ...]) -> int | tuple[int, ...]:
    return _per_level("--prompt-offset", "offsets", str(text), levels)


def _per_level(flag: str, noun: str, text: str, levels: tuple[int, ...]) -> int | tuple[int, ...]:
    """One integer for every level, or one per level."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag}: not an integer or a comma-separated list: {text!r}") from None
    if len(values) == 1:
        return values[0]
    if len(values) != len(levels):
        raise ConfigError(f"{flag}: {len(values)} {noun} for {len(levels)} concurrency "
                          f"levels ({text!r})")
    return values


def _prompt_ids(items: list[str] | None) -> tuple[tuple[int, tuple[str, ...]], ...]:
    out = []
    for item in items or []:
        level, sep, ids = item.partition("=")
        try:
            conc = int(level)
        except ValueError:
            conc = 0
        if not sep or conc < 1 or not ids.strip():
            raise ConfigError(f"--prompt-ids: expected LEVEL=ID,ID,..., got {item!r}")
        out.append((conc, tuple(i for i in ids.split(",") if i)))
    return tuple(out)


def _bench(args: argparse.Namespace) -> int:
    levels = _levels(args.concurrency)
    key = read_key(args.api_key_file) if args.api_key_file else None
    cfg = BenchConfig(
        url=args.url, model=args.model, concurrency=levels,
        requests=_counts(args.requests, levels), max_tokens=args.max_tokens, warmup=args.warmup,
        prompt_offset=_offsets(args.prompt_offset, levels),
        prompts=load_prompts(args.prompts), endpoint=args.endpoint,
        fixed_length=not args.no_fixed_length, continuous_usage=not args.no_continuous_usage,
        request_timeout_s=args.timeout, max_failed_fraction=args.max_failed,
        progress=False if args.no_progress else None, tokenizer=args.tokenizer,
        fill=not args.no_fill, ramp_tokens=args.ramp_tokens,
        prompt_ids=_prompt_ids(args.prompt_ids), api_key=key, ca_file=args.ca_file,
    ).validate()
    res: dict[str, Any] = run_bench(cfg)
    if not args.wall_time:  # the lab's engine emulator: what the device would show
        res = device_time.apply(cfg.url, res, key, args.ca_file)
    text = to_json(res)
    if args.json:
        write_json_atomic(args.json, text)
    else:
        print(text)
    return 0


def register(sub: Any) -> None:
    g = sub.add_parser("gate", help="keep / disable / inconclusive from two bench results",
                       description="Decide whether speculation stays on, from a baseline and a "
                                   "candidate `specdec bench --json` result (the default policy "
                                   "unless --policy). Exit status: 0 keep, 3 disable, "
                                   "4 inconclusive, 2 bad input.")
    g.add_argument("baseline", help="bench JSON with speculation off")
    g.add_argument("candidate", help="bench JSON with speculation on")
    g.add_argument("--policy", default=None, help="YAML/JSON file of GatePolicy fields")
    g.add_argument("--json", default=None, help="also write the decision JSON here")
    g.set_defaults(func=_gate)

    b = sub.add_parser("bench", help="benchmark an OpenAI-compatible server",
                       description="Streamed, greedy, fixed-length requests at each concurrency "
                                   "level; TTFT/TPOT/ITL/E2EL, throughput and speculation "
                                   "acceptance from the server's counters.")
    b.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    b.add_argument("--model", help="served model name (default: the only one served)")
    b.add_argument("--concurrency", default="1,8", help="comma-separated levels (default 1,8)")
    b.add_argument("--requests", default=None,
                   help="requests per level, or one count per level (12,16); default: each "
                        "measured prompt once")
    b.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    b.add_argument("--warmup", type=int, default=4, help="warmup requests (not measured)")
    b.add_argument("--prompts", default=None, help="YAML/JSON prompt file (default: built-in)")
    b.add_argument("--prompt-offset", default="0",
                   help="start at this measured prompt, or one offset per level (0,4): gate "
                        "rounds rotate through the prompts")
    b.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    b.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, seconds")
    b.add_argument("--max-failed", type=float, default=0.05,
                   help="fail the run above this fraction of failed requests (default 0.05)")
    b.add_argument("--no-fixed-length", action="store_true",
                   help="do not send ignore_eos/min_tokens (servers that reject them)")
    b.add_argument("--no-continuous-usage", action="store_true",
                   help="do not ask for per-chunk usage (continuous_usage_stats)")
    b.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    b.add_argument("--no-fill", action="store_true",
                   help="at concurrency > 1, let the level drain instead of keeping it full with "
                        "unmeasured requests until the last measured one ends")
    b.add_argument("--prompt-ids", action="append", default=None, metavar="LEVEL=ID,ID",
                   help="measure exactly these prompts (ids of the prompt set) at that "
                        "concurrency level (repeatable)")
    b.add_argument("--ramp-tokens", type=int, default=0,
                   help="at concurrency > 1, each client first sends one unmeasured request of "
                        "this many tokens, so measured requests start staggered (steady state)")
    b.add_argument("--tokenizer", default=None,
                   help="tokenizer.json, its directory or a repo id in the local HF cache, to "
                        "count tokens of a server that sends no usage (default: --model)")
    b.add_argument("--wall-time", action="store_true",
                   help="keep an engine emulator's wall-clock figures (default: device time)")
    b.add_argument("--json", help="write the result here (default: print it)")
    b.add_argument("--api-key-file", default=None,
                   help="a file holding the API key to send (specdec's hosts require one)")
    b.add_argument("--ca-file", default=None,
                   help="https: the CA the server's certificate must chain to (specdec's "
                        "hosts: `specdec keys ca INVENTORY`); default: the system's")
    b.set_defaults(func=_bench)
