"""Speculative-decoding counters on the control node: the on-host client's implementation
(`specdec.bench.onhost.counters`, one definition for both clients) with its errors raised as the
control node's `BenchError`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from specdec.bench.onhost import counters as core
from specdec.bench.onhost import errors as core_errors
from specdec.errors import BenchError

__all__ = [
    "RESTARTED",
    "Counters",
    "TrtllmAccumulator",
    "add_counters",
    "as_control_error",
    "diff_counters",
    "parse_vllm",
    "spec_delta",
    "trtllm_entries",
]

F = TypeVar("F", bound=Callable[..., Any])
RESTARTED = core.RESTARTED
Counters = core.Counters


def as_control_error(fn: F) -> F:
    """``fn`` with the on-host core's `BenchError` raised as the control node's."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except core_errors.BenchError as exc:
            raise BenchError(str(exc)) from None

    return call  # type: ignore[return-value]


parse_vllm = as_control_error(core.parse_vllm)
trtllm_entries = as_control_error(core.trtllm_entries)
spec_delta = as_control_error(core.spec_delta)
diff_counters = core.diff_counters
add_counters = core.add_counters


class TrtllmAccumulator(core.TrtllmAccumulator):
    """`specdec.bench.onhost.counters.TrtllmAccumulator`, raising the control node's errors."""

    add = as_control_error(core.TrtllmAccumulator.add)
