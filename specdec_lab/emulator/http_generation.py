"""The generation routes, ``POST /v1/completions`` and ``/v1/chat/completions``: one JSON
response, or SSE chunks (with ``stream``), from the events of an `EngineService` request."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from specdec_lab.emulator.http_base import BaseHandler
from specdec_lab.emulator.openai import ApiError, GenRequest, parse_generation, usage
from specdec_lab.emulator.request import RequestState
from specdec_lab.emulator.truth import RequestRecord

__all__ = ["generate"]


def generate(h: BaseHandler, kind: str, raw: bytes, arrival: float) -> None:
    """Parse, admit and answer one generation request (``kind``: chat or completion)."""
    svc = h.svc
    try:
        try:
            body = json.loads(raw) if raw else None
        except ValueError as exc:
            raise ApiError(400, f"JSON decode error: {exc}") from None
        gen = parse_generation(
            kind, body, engine=h.cfg.engine, served_names=h.cfg.served_model_names,
            max_model_len=h.cfg.setup.model_len, tokenizer=h.cfg.setup.target.tokenizer,
            default_temperature=h.cfg.default_temperature)
    except ApiError as err:
        h.send_api_error(err)
        return
    number = svc.next_request()
    if h.server.ctx.faults.is_5xx(number):
        st = RequestState(gen=gen, record=_record(arrival, gen))
        h.send_api_error(ApiError(500, "EngineCore encountered an issue. See stack trace (above) "
                                       "for the root cause.", type_="InternalServerError"))
        svc.finish(st, first=None, last=None, end=time.perf_counter(), status=500)
        return
    st, events = svc.generate(gen, arrival)
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
    if gen.stream:
        _stream(h, kind, gen, st, events, rid)
    else:
        _complete(h, kind, gen, st, events, rid)


def _record(arrival: float, gen: GenRequest) -> RequestRecord:
    return RequestRecord(arrival=arrival, category=gen.categories[0] if gen.categories else "chat")


def _choice_extra(h: BaseHandler, st: RequestState, i: int, steps: dict[int, int]
                  ) -> dict[str, Any]:
    if not h.trt:
        return {}
    n = st.completion[i]
    return {"avg_decoded_tokens_per_iter": round(n / max(1, steps.get(i, 1)), 4)}


def _complete(h: BaseHandler, kind: str, gen: GenRequest, st: RequestState, events: Any,
              rid: str) -> None:
    texts: dict[int, list[str]] = {}
    steps: dict[int, int] = {}
    first = last = None
    for ev in events:
        texts.setdefault(ev.choice, []).extend(ev.out.tokens)
        steps[ev.choice] = steps.get(ev.choice, 0) + 1
        first = first if first is not None else ev.t
        last = ev.t
    if st.aborted:
        h.send_api_error(ApiError(500, "Engine shut down", type_="InternalServerError"))
        h.svc.finish(st, first=first, last=last, end=time.perf_counter(), status=500)
        return
    choices = []
    for i in range(len(gen.choice_of)):
        text = "".join(texts.get(i, []))
        c: dict[str, Any] = {"index": i}
        if kind == "chat":
            c["message"] = {"role": "assistant", "content": text, "reasoning_content": None,
                            "tool_calls": []}
        else:
            c["text"] = text
        c.update({"logprobs": None, "finish_reason": st.finish[i], "stop_reason": None})
        c.update(_choice_extra(h, st, i, steps))
        choices.append(c)
    body = {
        "id": rid, "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": int(time.time()), "model": gen.model, "choices": choices,
        "usage": usage(st.prompt_tokens, st.completion_tokens,
                       sum(st.cached) if h.trt else None),
    }
    h.send_json(200, body)
    h.svc.finish(st, first=first, last=last, end=time.perf_counter())


def _stream(h: BaseHandler, kind: str, gen: GenRequest, st: RequestState, events: Any,
            rid: str) -> None:
    created = int(time.time())
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    h.send_response_only(200)
    h.send_header("date", h.date_time_string())
    h.send_header("server", "uvicorn")
    h.send_header("content-type", "text/event-stream; charset=utf-8")
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    h.access_log(200)

    def write(payload: str) -> None:
        data = payload.encode()
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    def chunk(choices: list[dict[str, Any]], use: dict[str, Any] | None = None) -> str:
        d: dict[str, Any] = {"id": rid, "object": obj, "created": created,
                             "model": gen.model, "choices": choices}
        if use is not None:
            d["usage"] = use
        return "data: " + json.dumps(d) + "\n\n"

    first = last = None
    seen: set[int] = set()
    steps: dict[int, int] = {}
    try:
        for ev in events:
            i = ev.choice
            steps[i] = steps.get(i, 0) + 1
            out = ev.out
            text = "".join(out.tokens)
            parts = []
            if kind == "chat":
                if i not in seen:
                    parts.append(chunk([{"index": i, "delta": {"role": "assistant",
                                                               "content": ""},
                                         "logprobs": None, "finish_reason": None}]))
                c: dict[str, Any] = {"index": i, "delta": {"content": text},
                                     "logprobs": None, "finish_reason": out.finish_reason}
            else:
                c = {"index": i, "text": text, "logprobs": None,
                     "finish_reason": out.finish_reason, "stop_reason": None}
            if out.finished:
                c.update(_choice_extra(h, st, i, steps))
            seen.add(i)
            use = None
            if gen.include_usage and gen.continuous_usage:
                use = usage(gen.prompt_tokens[i], out.generated)
            parts.append(chunk([c], use))
            write("".join(parts))
            last = time.perf_counter()
            if first is None:
                first = last
        if st.aborted:
            err = ApiError(500, "Engine shut down", type_="InternalServerError")
            write("data: " + json.dumps(err.body()) + "\n\n")
        elif gen.include_usage:
            write(chunk([], usage(st.prompt_tokens, st.completion_tokens,
                                  sum(st.cached) if h.trt else None)))
        write("data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    except OSError:
        events.close()  # client went away: abort its sequences
        h.close_connection = True
        h.svc.finish(st, first=first, last=last, end=time.perf_counter(), status=499)
        return
    h.svc.finish(st, first=first, last=last, end=time.perf_counter(),
                 status=500 if st.aborted else 200)
