"""OpenAI-compatible request parsing and validation (pure), shared by both engines.

vLLM ignores unknown request fields (and logs them); trtllm-serve's protocol models forbid extra
fields, so unknown fields are a 400 there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from specdec_lab.emulator.core import SeqRequest
from specdec_lab.emulator.textgen import category_of, chat_prompt_tokens, count_tokens, stable_int

__all__ = ["ApiError", "GenRequest", "parse_generation", "usage"]

_COMMON = {
    "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "temperature", "top_p",
    "user", "best_of", "use_beam_search", "top_k", "min_p", "repetition_penalty",
    "length_penalty", "early_stopping", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "truncate_prompt_tokens", "lora_request", "disaggregated_params", "return_context_logits",
    "return_generation_logits", "response_format", "add_special_tokens", "priority",
    "detokenize", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "prompt_logprobs", "cache_salt", "request_id", "allowed_token_ids", "bad",
}
_CHAT_ONLY = {"messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
              "add_generation_prompt", "continue_final_message", "echo", "documents",
              "chat_template", "chat_template_kwargs", "reasoning_effort", "mm_processor_kwargs",
              "functions", "function_call", "modalities", "audio", "metadata", "store",
              "service_tier"}
_COMPLETION_ONLY = {"prompt", "echo", "suffix", "suggested_completion"}
_STREAM_OPTIONS = {"include_usage", "continuous_usage_stats"}
_WORD = re.compile(r"\w+|[^\w\s]")


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type_: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def _bad(msg: str, param: str | None = None) -> ApiError:
    return ApiError(400, msg, param=param)


@dataclass
class GenRequest:
    kind: str  # "chat" | "completion"
    model: str
    stream: bool
    include_usage: bool
    continuous_usage: bool
    seqs: list[SeqRequest] = field(default_factory=list)
    choice_of: list[int] = field(default_factory=list)  # seq position -> choice index
    prompt_tokens: list[int] = field(default_factory=list)  # per choice
    categories: list[str] = field(default_factory=list)  # per choice
    ignored: list[str] = field(default_factory=list)


def _content_text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)
    raise _bad(f"messages[{i}].content: Input should be a valid string", "messages")


def _int(body: dict[str, Any], key: str, *, minimum: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{key}: Input should be a valid integer, got {v!r}", key)
    if minimum is not None and v < minimum:
        if key in ("max_tokens", "max_completion_tokens"):
            raise _bad(f"max_tokens must be at least {minimum}, got {v}.", key)
        raise _bad(f"{key} must be at least {minimum}, got {v}.", key)
    return v


def _num(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _bad(f"{key}: Input should be a valid number, got {v!r}", key)
    return float(v)


def _prefix_blocks(text: str, prompt_tokens: int) -> tuple[int, ...]:
    words = _WORD.findall(text)
    blocks: list[int] = []
    prev = 0
    for i in range(min(len(words) // 16, prompt_tokens // 16)):
        prev = stable_int(prev, *words[i * 16:(i + 1) * 16])
        blocks.append(prev)
    return tuple(blocks)


@dataclass(frozen=True)
class _Sampling:
    """The validated sampling fields (``max_tokens`` None: the engine's default)."""

    max_tokens: int | None
    min_tokens: int
    n: int
    seed: int | None
    temperature: float
    ignore_eos: bool


def parse_generation(
    kind: str,
    body: Any,
    *,
    engine: str,
    served_names: tuple[str, ...],
    max_model_len: int,
    tokenizer: str,
    default_temperature: float,
) -> GenRequest:
    """Validate one /v1/completions or /v1/chat/completions body; raises `ApiError`."""
    if not isinstance(body, dict):
        raise _bad("Input should be a valid dictionary or object to extract fields from")
    extra = _extra_fields(kind, body, engine)
    model = _model(body, served_names)
    stream, include_usage, continuous = _stream_options(body, engine)
    texts, ptoks = _chat_prompt(body, tokenizer) if kind == "chat" else _completion_prompts(body)
    sampling = _sampling(kind, body, default_temperature)
    req = GenRequest(kind=kind, model=model, stream=stream, include_usage=include_usage,
                     continuous_usage=continuous, ignored=extra)
    for text, p in zip(texts, ptoks, strict=True):
        mt = _prompt_max_tokens(kind, p, sampling, max_model_len)
        _add_choice(req, kind, text, p, mt, sampling)
    return req


def _extra_fields(kind: str, body: dict[str, Any], engine: str) -> list[str]:
    """Fields the kind does not know: ignored by vLLM, a 400 from trtllm-serve."""
    allowed = _COMMON | (_CHAT_ONLY if kind == "chat" else _COMPLETION_ONLY)
    extra = sorted(k for k in body if k not in allowed)
    if extra and engine == "trtllm":
        raise _bad("; ".join(f"{k}: Extra inputs are not permitted" for k in extra), extra[0])
    return extra


def _model(body: dict[str, Any], served_names: tuple[str, ...]) -> str:
    model = body.get("model")
    if model is None:
        model = served_names[0]
    if not isinstance(model, str):
        raise _bad(f"model: Input should be a valid string, got {model!r}", "model")
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", type_="NotFoundError",
                       param="model")
    return model


def _stream_options(body: dict[str, Any], engine: str) -> tuple[bool, bool, bool]:
    """(stream, include_usage, continuous_usage_stats)."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad(f"stream: Input should be a valid boolean, got {stream!r}", "stream")
    opts = body.get("stream_options")
    if opts is not None:
        if not stream:
            raise _bad("Stream options can only be defined when `stream=True`.",
                       "stream_options")
        if not isinstance(opts, dict) or any(k not in _STREAM_OPTIONS for k in opts):
            raise _bad(f"stream_options: invalid value {opts!r}", "stream_options")
    opts = opts or {}
    # trtllm-serve's StreamOptions.include_usage defaults to True once stream_options is given
    include_usage = bool(opts.get("include_usage", engine == "trtllm" and bool(opts)))
    return stream, include_usage, bool(opts.get("continuous_usage_stats", False))


def _chat_prompt(body: dict[str, Any], tokenizer: str) -> tuple[list[str], list[int]]:
    """The conversation as one prompt text and its token count."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("messages: Field required" if msgs is None else
                   "messages: Input should be a non-empty list", "messages")
    contents = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}]: each message needs a 'role'", "messages")
        contents.append(_content_text(m.get("content"), i))
    return ["\n".join(contents)], [chat_prompt_tokens(contents, tokenizer)]


def _completion_prompts(body: dict[str, Any]) -> tuple[list[str], list[int]]:
    """Each prompt (a string or token ids, or a list of them) as text and its token count."""
    prompt = body.get("prompt")
    if prompt is None:
        raise _bad("prompt: Field required", "prompt")
    items: list[Any]
    token_ids = isinstance(prompt, list) and bool(prompt) and all(
        isinstance(x, int) for x in prompt)
    if isinstance(prompt, str) or token_ids:
        items = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = list(prompt)
    else:
        raise _bad("prompt: Input should be a string, a list of strings or token ids", "prompt")
    texts: list[str] = []
    ptoks: list[int] = []
    for it in items:
        if isinstance(it, str):
            texts.append(it)
            ptoks.append(max(1, count_tokens(it) + 1))
        elif isinstance(it, list) and it and all(isinstance(x, int) for x in it):
            texts.append(" ".join(map(str, it)))
            ptoks.append(len(it))
        else:
            raise _bad("prompt: Input should be a string, a list of strings or token ids",
                       "prompt")
    return texts, ptoks


def _sampling(kind: str, body: dict[str, Any], default_temperature: float) -> _Sampling:
    max_tokens = _int(body, "max_tokens", minimum=1)
    if kind == "chat":
        mct = _int(body, "max_completion_tokens", minimum=1)
        max_tokens = mct if mct is not None else max_tokens
    min_tokens = _int(body, "min_tokens", minimum=0) or 0
    n = _int(body, "n", minimum=1) or 1
    if n > 16:
        raise _bad(f"n must be at most 16, got {n}.", "n")
    seed = _int(body, "seed")
    temperature = _num(body, "temperature")
    if temperature is None:
        temperature = default_temperature
    if temperature < 0:
        raise _bad(f"temperature must be non-negative, got {temperature}.", "temperature")
    top_p = _num(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise _bad(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise _bad(f"ignore_eos: Input should be a valid boolean, got {ignore_eos!r}",
                   "ignore_eos")
    return _Sampling(max_tokens, min_tokens, n, seed, temperature, ignore_eos)


def _prompt_max_tokens(kind: str, p: int, s: _Sampling, max_model_len: int) -> int:
    """The prompt's max_tokens (default: the rest of the context for chat, 16 for completions),
    checked against the context length and min_tokens."""
    if p >= max_model_len:
        raise _bad(f"This model's maximum context length is {max_model_len} tokens. However, "
                   f"your request has {p} input tokens. Please reduce the length of the "
                   "input messages.", "messages" if kind == "chat" else "prompt")
    mt = s.max_tokens if s.max_tokens is not None else (
        max_model_len - p if kind == "chat" else 16)
    if p + mt > max_model_len:
        raise _bad(f"'max_tokens' or 'max_completion_tokens' is too large: {mt}. This "
                   f"model's maximum context length is {max_model_len} tokens and your "
                   f"request has {p} input tokens ({mt} > {max_model_len} - {p}).",
                   "max_tokens")
    if s.min_tokens > mt:
        raise _bad(f"min_tokens must be less than or equal to max_tokens={mt}, got "
                   f"{s.min_tokens}.", "min_tokens")
    return mt


def _add_choice(req: GenRequest, kind: str, text: str, p: int, mt: int, s: _Sampling) -> None:
    """The prompt's ``n`` sequences (seeds ``seed + j``; unseeded and sampling: ``j``)."""
    cat = category_of(text)
    key = stable_int(kind, text)
    for j in range(s.n):
        req.seqs.append(SeqRequest(
            prompt_key=key, prompt_tokens=p, category=cat, max_tokens=mt,
            min_tokens=s.min_tokens, ignore_eos=s.ignore_eos, temperature=s.temperature,
            seed=(s.seed + j) if s.seed is not None else (j if s.n > 1 and s.temperature > 0
                                                          else None),
            prefix_blocks=_prefix_blocks(text, p),
        ))
        req.choice_of.append(len(req.prompt_tokens))
        req.prompt_tokens.append(p)
        req.categories.append(cat)


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                         "completion_tokens": completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u
