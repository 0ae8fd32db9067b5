"""Benchmark figures in device time when the server is the lab's engine emulator.

The emulator runs ``time_scale`` wall seconds per emulated second (the lab's default 0.1: ten
times faster than the device). A person reading a lab result wants what the device would show,
so `apply` asks the server for its time scale (``GET /lab/truth``: only the emulator answers;
vLLM and trtllm-serve say 404) and converts the result: every duration (``*_ms``,
``*_ms_p50``, ``duration``, ``start_s``/``end_s``) is divided by the time scale, every rate
(tokens or requests per second) multiplied by it, and the result is labelled
``"device_time": {"emulated": true, "time_scale": X}``. Ratios between two results (what the
gate decides on) do not change. A real engine's result is returned untouched.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from specdec.bench.onhost import run as core_run
from specdec.errors import ConfigError

__all__ = ["RATE_KEYS", "apply", "probe_time_scale", "tls_verify", "to_device_time"]

RATE_KEYS = frozenset(core_run.RATE_KEYS)


def tls_verify(ca_file: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: the CA file's context, else the system's trust."""
    try:
        return ssl.create_default_context(cafile=ca_file) if ca_file else True
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--ca-file={ca_file!r}: cannot read a CA certificate "
                          f"({getattr(exc, 'strerror', None) or exc})") from None


def probe_time_scale(url: str, timeout: float = 5.0, api_key: str | None = None,
                     ca_file: str | None = None) -> float | None:
    """The emulator's time scale, or None for a real engine (no ``/lab/truth``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        r = httpx.get(url.rstrip("/") + "/lab/truth", timeout=timeout, headers=headers,
                      verify=tls_verify(ca_file))
        doc = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    scale = doc.get("time_scale") if isinstance(doc, dict) else None
    if isinstance(scale, int | float) and not isinstance(scale, bool) and scale > 0:
        return float(scale)
    return None


def to_device_time(result: dict[str, Any], time_scale: float) -> dict[str, Any]:
    """``result`` (a `specdec bench` JSON) with wall figures turned into device figures (the
    on-host client's conversion: one definition for both)."""
    if result.get("device_time"):
        return result  # already converted
    out: dict[str, Any] = core_run.to_device_time(result, time_scale)
    return out


def apply(url: str, result: dict[str, Any], api_key: str | None = None,
          ca_file: str | None = None) -> dict[str, Any]:
    """Device-time figures when ``url`` is the engine emulator, else ``result`` as is."""
    scale = probe_time_scale(url, api_key=api_key, ca_file=ca_file)
    return result if scale is None else to_device_time(result, scale)
