from __future__ import annotations

import pytest

from specdec.bench.client import parse_sse_line
from specdec.errors import BenchError


def test_sse_ok() -> None:
    assert parse_sse_line('data: {"choices": []}') == {"choices": []}
    assert parse_sse_line('data:{"choices": []}\r') == {"choices": []}
    assert parse_sse_line("data: [DONE]") is None
    assert parse_sse_line("") is None
    assert parse_sse_line(": keepalive") is None
    assert parse_sse_line("event: message") is None


@pytest.mark.parametrize("line", ["garbage", "data: {oops", "data: [1,2]", "data: 3"])
def test_sse_malformed(line: str) -> None:
    with pytest.raises(BenchError, match="malformed SSE"):
        parse_sse_line(line)


def test_sse_error_in_stream() -> None:
    with pytest.raises(BenchError, match="server error in stream: boom"):
        parse_sse_line('data: {"error": {"message": "boom\\nsecond line", "code": 500}}')
