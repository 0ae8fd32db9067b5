"""``specdec lab traffic HOST``: user traffic for a lab host with a chosen prompt-category mix.

Open-loop Poisson arrivals at ``rate`` requests per *device* second (the lab's emulator runs
faster than the device: its time scale from ``GET /lab/truth`` converts), each request a prompt
of a category drawn from the mix (the built-in prompt set's categories: chat, code,
summarization, repetitive; its measured and warmup prompts, each with a unique prefix so no two
requests share a cached prefix), chat completions of ``max_tokens`` at temperature 0. Bounded:
``duration`` (device seconds) and/or ``requests``, at least one; at most ``max_inflight`` in
flight (an arrival beyond it is shed and counted, never queued without end).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from specdec.bench.device_time import tls_verify
from specdec.bench.prompts import builtin_prompts
from specdec.errors import ConfigError
from specdec_lab.errors import LabError

__all__ = ["Traffic", "TrafficResult", "parse_mix", "run_traffic"]

MAX_REQUESTS = 1_000_000
MAX_DURATION_S = 7 * 86400.0


def parse_mix(text: str) -> dict[str, float]:
    """``code=0.8,chat=0.2`` -> normalised weights of the built-in prompt categories."""
    cats = set(builtin_prompts().categories())
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"--mix={text!r}: expected CATEGORY=WEIGHT,… "
                              "(e.g. code=0.8,chat=0.2)")
        if name not in cats:
            raise ConfigError(f"--mix={text!r}: unknown category {name!r} (the built-in "
                              f"prompt set has {', '.join(sorted(cats))})")
        try:
            w = float(value)
        except ValueError:
            raise ConfigError(f"--mix={text!r}: weight {value!r} of {name} is not a number") \
                from None
        if not math.isfinite(w) or w < 0:
            raise ConfigError(f"--mix={text!r}: weight of {name} must be finite and >= 0")
        if name in out:
            raise ConfigError(f"--mix={text!r}: {name} given twice")
        out[name] = w
    total = sum(out.values())
    if total <= 0:
        raise ConfigError(f"--mix={text!r}: the weights sum to 0")
    return {k: v / total for k, v in out.items() if v > 0}


@dataclass(frozen=True)
class Traffic:
    url: str
    mix: Mapping[str, float]
    rate: float  # requests per device second
    duration_s: float | None = None  # device seconds
    requests: int | None = None
    max_tokens: int = 128
    max_inflight: int = 64
    seed: int = 0
    tag: str = "t"
    api_key: str | None = field(default=None, repr=False)  # the fleet's key (the API proxy)
    ca_file: str | None = None  # the CA of the API's certificate (https)

    def check(self) -> None:
        if not math.isfinite(self.rate) or not 0 < self.rate <= 1000:
            raise ConfigError(f"--rate={self.rate!r}: requests per device second in (0, 1000]")
        if self.duration_s is None and self.requests is None:
            raise ConfigError("give --duration S or --requests N (traffic is bounded)")
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:
            raise ConfigError(f"--duration={self.duration_s!r}: device seconds in "
                              f"(0, {MAX_DURATION_S:g}]")
        if self.requests is not None and not 0 < self.requests <= MAX_REQUESTS:
            raise ConfigError(f"--requests={self.requests!r}: in 1..{MAX_REQUESTS}")
        if not 1 <= self.max_tokens <= 8192:
            raise ConfigError(f"--max-tokens={self.max_tokens!r}: in 1..8192")
        if not 1 <= self.max_inflight <= 4096:
            raise ConfigError(f"--max-inflight={self.max_inflight!r}: in 1..4096")


@dataclass
class TrafficResult:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    shed: int = 0
    tokens: int = 0
    by_category: dict[str, int] = field(default_factory=dict)
    device_s: float = 0.0
    time_scale: float = 1.0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(device_s=round(self.device_s, 3), errors=self.errors[:5])
        return d


def _prompts() -> dict[str, list[str]]:
    ps = builtin_prompts()
    out: dict[str, list[str]] = {}
    for p in (*ps.measured, *ps.warmup):
        out.setdefault(p.category, []).append(p.text)
    return out


async def _server(client: httpx.AsyncClient, url: str) -> tuple[str, float]:
    try:
        r = await client.get(url + "/v1/models")
        model = str(r.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise LabError(f"{url}: no OpenAI model list ({type(exc).__name__})") from None
    scale = 1.0
    try:
        r = await client.get(url + "/lab/truth")
        v = r.json().get("time_scale") if r.status_code == 200 else None
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            scale = float(v)
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return model, scale


async def _run(t: Traffic) -> TrafficResult:
    rng = random.Random(t.seed)
    prompts = _prompts()
    cats, weights = list(t.mix), [t.mix[c] for c in t.mix]
    res = TrafficResult()
    limits = httpx.Limits(max_connections=t.max_inflight, max_keepalive_connections=16)
    headers = {"Authorization": f"Bearer {t.api_key}"} if t.api_key else None
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0),
                                 limits=limits, headers=headers,
                                 verify=tls_verify(t.ca_file)) as client:
        model, scale = await _server(client, t.url)
        res.time_scale = scale
        inflight: set[asyncio.Task[None]] = set()

        async def one(i: int, cat: str) -> None:
            text = f"[{t.tag}{t.seed}-{i}] " + rng.choice(prompts[cat])
            body = {"model": model, "messages": [{"role": "user", "content": text}],
                    "max_tokens": t.max_tokens, "temperature": 0.0}
            try:
                r = await client.post(t.url + "/v1/chat/completions", json=body)
                r.raise_for_status()
                res.tokens += int(r.json()["usage"]["completion_tokens"])
                res.completed += 1
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                res.failed += 1
                res.errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")

        start = time.monotonic()
        end = start + t.duration_s * scale if t.duration_s is not None else math.inf
        due, i = start, 0
        while (t.requests is None or i < t.requests):
            due += rng.expovariate(t.rate) * scale
            if due >= end:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            cat = rng.choices(cats, weights)[0]
            i += 1
            if len(inflight) >= t.max_inflight:
                res.shed += 1
                continue
            res.sent += 1
            res.by_category[cat] = res.by_category.get(cat, 0) + 1
            task = asyncio.ensure_future(one(i, cat))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(inflight)
        res.device_s = (time.monotonic() - start) / scale
    return res


def run_traffic(t: Traffic) -> TrafficResult:
    t.check()
    return asyncio.run(_run(t))
