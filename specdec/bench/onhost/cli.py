"""`specdec bench` beside the engine: the on-host client's command line.

    python3 onhost.pyz http://127.0.0.1:8000 --model M --prompts prompts.json --json -

``--json -`` prints one line ``SPECDEC-BENCH-RESULT <json>`` on stdout (`MARKER`); a failure is
one line ``specdec-bench: error: …`` on stderr and exit 1 (2: bad arguments). The prompt set is
JSON (``--prompts``, written from the package's ``prompts.yaml``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import ssl
import sys
from urllib.parse import urlsplit

from .errors import BenchError, ConfigError, _one_line
from .records import ENDPOINTS
from .run import run_bench, time_scale, to_device_time
from .stats import finite

MARKER = "SPECDEC-BENCH-RESULT "


def _ints(text, flag, levels=None):
    try:
        vals = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"{flag}: not an integer or a comma-separated list: {text!r}") \
            from None
    if levels is not None and len(vals) == 1:
        vals = vals * len(levels)
    if levels is not None and len(vals) != len(levels):
        raise ConfigError(f"{flag}: {len(vals)} values for {len(levels)} concurrency levels "
                          f"({text!r})")
    return vals


def ssl_context(parts, ca_file, insecure_loopback):
    """The TLS context of an https URL: verified against ``ca_file`` (else the system's
    trust); unverified only with ``insecure_loopback`` to this host itself (nothing on a
    network is between)."""
    if parts.scheme != "https":
        return None
    if insecure_loopback:
        if parts.hostname not in ("127.0.0.1", "::1", "localhost"):
            raise ConfigError("--insecure-loopback: only for https://127.0.0.1")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--ca-file: cannot read a CA certificate: {_one_line(exc)}") \
            from None


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="specdec-bench", description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--model")
    ap.add_argument("--prompts", required=True, help="the prompt set as JSON")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--requests", default=None)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--prompt-offset", default="0")
    ap.add_argument("--prompt-ids", action="append", default=None, metavar="LEVEL=ID,ID")
    ap.add_argument("--ramp-tokens", type=int, default=0)
    ap.add_argument("--no-fill", action="store_true")
    ap.add_argument("--endpoint", choices=sorted(ENDPOINTS), default="chat")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--max-failed", type=float, default=0.05)
    ap.add_argument("--no-fixed-length", action="store_true")
    ap.add_argument("--no-continuous-usage", action="store_true")
    ap.add_argument("--tokenizer", default=None, help="recorded only (no tokenizer here)")
    ap.add_argument("--no-progress", action="store_true", help="accepted; there is none")
    ap.add_argument("--wall-time", action="store_true")
    ap.add_argument("--deadline", type=float, default=None, help="give up after this many s")
    ap.add_argument("--json", default="-", help="output file, - for stdout (default)")
    ap.add_argument("--api-key-file", default=None,
                    help="the API key: a file, or - for standard input (never an argument)")
    ap.add_argument("--ca-file", default=None, help="https: the CA the server's certificate "
                    "must chain to (default: the system's)")
    ap.add_argument("--insecure-loopback", action="store_true",
                    help="https to 127.0.0.1 without checking the certificate")
    a = ap.parse_args(argv)
    parts = urlsplit(a.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"url: expected http(s)://host:port, got {a.url!r}")
    a.ssl_context = ssl_context(parts, a.ca_file, a.insecure_loopback)
    a.concurrency = _ints(a.concurrency, "--concurrency")
    if min(a.concurrency) < 1:
        raise ConfigError(f"--concurrency: levels must be >= 1, got {a.concurrency}")
    a.requests = _ints(a.requests, "--requests", a.concurrency) if a.requests else None
    a.prompt_offset = _ints(a.prompt_offset, "--prompt-offset", a.concurrency)
    ids = []
    for item in a.prompt_ids or []:
        level, sep, rest = item.partition("=")
        level = level.strip()
        if not sep or not (level.isascii() and level.isdigit()) or len(level) > 9 \
                or int(level) < 1 or not rest.strip():
            raise ConfigError(f"--prompt-ids: expected LEVEL=ID,ID,..., got {item!r}")
        ids.append((int(level), tuple(i for i in rest.split(",") if i)))
    a.prompt_ids = tuple(ids)
    for flag, bad in (("--requests", a.requests and min(a.requests) < 1),
                      ("--max-tokens", a.max_tokens < 2), ("--warmup", a.warmup < 0),
                      ("--prompt-offset", min(a.prompt_offset) < 0),
                      ("--ramp-tokens", a.ramp_tokens < 0 or a.ramp_tokens == 1),
                      ("--max-failed", not 0.0 <= a.max_failed < 1.0),
                      ("--timeout", a.timeout <= 0)):
        if bad:
            raise ConfigError(f"{flag}: out of range")
    a.fill, a.fixed_length = not a.no_fill, not a.no_fixed_length
    a.continuous_usage, a.unique_prefix, a.progress = not a.no_continuous_usage, True, False
    a.request_timeout_s, a.max_failed_fraction = a.timeout, a.max_failed
    a.connect_timeout_s, a.trtllm_poll_s, a.warmup_max_tokens = 10.0, 0.5, 16
    a.api_key = read_key(a.api_key_file) if a.api_key_file else None
    return a


def read_key(path):
    """The API key: ``sdk_`` and 20-200 letters and digits (specdec.config.apikey), from a file or
    from standard input (``-``: the caller opened the root-only file for us)."""
    try:
        if path == "-":
            text = sys.stdin.read(4097)
        else:
            with open(path) as fh:
                text = fh.read(4097)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--api-key-file: cannot read: {_one_line(exc)}") from None
    key = text.strip()
    if not re.fullmatch(r"sdk_[A-Za-z0-9]{20,200}", key):
        raise ConfigError("--api-key-file: does not hold a specdec API key")
    return key


def load_prompts(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
        ok = all(isinstance(p, dict) and {"id", "category", "prompt"} <= set(p)
                 for p in doc["measured"] + doc["warmup"]) and doc["measured"] and doc["warmup"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--prompts {path}: cannot read the prompt set: {_one_line(exc)}") \
            from None
    if not ok:
        raise ConfigError(f"--prompts {path}: not a prompt set (measured, warmup: id, "
                          "category, prompt)")
    doc.setdefault("source", path)
    return doc


async def _main(a):
    try:
        res = await asyncio.wait_for(run_bench(a, load_prompts(a.prompts)), a.deadline)
    except asyncio.TimeoutError:
        raise BenchError(f"no result within {a.deadline:.0f}s (engine hung?)") from None
    scale = None if a.wall_time else await time_scale(a.url, a.api_key, a.ssl_context)
    return res if scale is None else to_device_time(res, scale)


def main(argv=None):
    try:
        a = parse_args(argv)
        res = asyncio.run(_main(a))
    except ConfigError as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"specdec-bench: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(finite(res), allow_nan=False, separators=(",", ":"))
    if a.json == "-":
        sys.stdout.write(MARKER + text + "\n")
    else:
        with open(a.json, "w") as fh:
            fh.write(text + "\n")
    return 0

