"""The OpenAI wire format: request bodies checked field by field, errors and responses shaped as
OpenAI shapes them.

Every check names the field at fault in an ``APIError`` that renders as
``{"error": {"message", "type", "param", "code"}}`` with its HTTP status.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass

from volvox.tasks.sampling import SamplingParams

MAX_STOPS = 4  # stop strings per request, as OpenAI allows


class APIError(Exception):
    """An error the client sees as an OpenAI-shaped body with an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        """The JSON body OpenAI's API returns for this error."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(param: str, message: str, code: str | None = "invalid_value") -> APIError:
    """A 400 naming the request field at fault."""
    return APIError(400, message, param=param, code=code)


@dataclass
class Completion:
    """A checked completion request: what to generate and how."""

    prompt: str | list[int]       # text, or token ids
    max_tokens: int | None        # None: up to the end of the context
    params: SamplingParams
    stops: list[str]
    stream: bool
    include_usage: bool           # stream_options.include_usage: a last chunk with the usage


def number_field(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(name, f"'{name}' must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise invalid(name, f"'{name}' must be between {lo:g} and {hi:g}, got {value!r}")
    return float(value)


def integer_field(body: dict, name: str, lo: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"'{name}' must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise invalid(name, f"'{name}' must be >= {lo}, got {value}")
    return value


def _unsupported(body: dict, name: str, default) -> None:
    if body.get(name, default) not in (default, None):
        raise invalid(name, f"'{name}' is not supported by this server (only {default!r})", code="unsupported_value")


def parse_sampling(body: dict, max_tokens_fields: tuple[str, ...]) -> Completion:
    """The sampling and streaming fields shared by completions and chat completions."""
    max_tokens = None
    for name in max_tokens_fields:
        max_tokens = integer_field(body, name, lo=1) if body.get(name) is not None else max_tokens
    seed = integer_field(body, "seed")
    params = SamplingParams(temperature=number_field(body, "temperature", 1.0, 0.0, 2.0),
                            top_p=number_field(body, "top_p", 1.0, 1e-9, 1.0),
                            top_k=integer_field(body, "top_k", lo=0) or 0,
                            repetition_penalty=number_field(body, "repetition_penalty", 1.0, 1e-3, 100.0),
                            seed=seed)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if (not isinstance(stops, list) or len(stops) > MAX_STOPS
            or not all(isinstance(s, str) and s for s in stops)):
        raise invalid("stop", f"'stop' must be a non-empty string or a list of up to {MAX_STOPS} of them, got {stop!r}")
    if integer_field(body, "n", lo=1) not in (None, 1):
        raise invalid("n", "'n' must be 1: this server returns one choice per request", code="unsupported_value")
    for name in ("presence_penalty", "frequency_penalty"):
        _unsupported(body, name, 0)
    for name in ("logprobs", "echo"):
        _unsupported(body, name, False)
    _unsupported(body, "best_of", 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("stream", f"'stream' must be true or false, got {stream!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise invalid("stream_options", f"'stream_options' must be an object, got {options!r}")
    return Completion(prompt="", max_tokens=max_tokens, params=params, stops=stops, stream=stream,
                      include_usage=bool(options.get("include_usage")))


def parse_completion(body: dict) -> Completion:
    """``POST /v1/completions``: ``prompt`` is a string, a list of one string, or a list of token ids."""
    request = parse_sampling(body, ("max_tokens",))
    if body.get("max_tokens") is None:  # OpenAI's default for the legacy completions endpoint
        request.max_tokens = 16
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        request.prompt = [int(t) for t in prompt]
    elif isinstance(prompt, str):
        request.prompt = prompt
    else:
        raise invalid("prompt", "'prompt' must be a string, a list of one string, or a list of token ids "
                      f"(one prompt per request), got {str(prompt)[:100]!r}")
    return request


def parse_chat(body: dict) -> tuple[Completion, list[dict]]:
    """``POST /v1/chat/completions``: the sampling fields and the messages (text content only)."""
    request = parse_sampling(body, ("max_tokens", "max_completion_tokens"))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty list of {role, content} objects")
    checked = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer", "user", "assistant"):
            raise invalid(where, f"{where} must be an object whose 'role' is system, developer, user or assistant")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise invalid(f"{where}.content", f"{where}.content parts must all be {{type: text, text: ...}}; "
                              "this server's models read text only")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise invalid(f"{where}.content", f"{where}.content must be a string, got {content!r}")
        role = "system" if message["role"] == "developer" else message["role"]
        checked.append({"role": role, "content": content})
    return request, checked


def new_id(prefix: str) -> str:
    """A fresh response id such as ``chatcmpl-1f2e...``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """The ``usage`` object of a response."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_response(rid: str, model: str, text: str, finish: str, counts: tuple[int, int]) -> dict:
    """The body of a non-streamed ``/v1/completions`` answer."""
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            "usage": usage(*counts)}


def chat_response(rid: str, model: str, text: str, finish: str, counts: tuple[int, int]) -> dict:
    """The body of a non-streamed ``/v1/chat/completions`` answer."""
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish, "logprobs": None}],
            "usage": usage(*counts)}


def completion_chunk(rid: str, model: str, text: str, finish: str | None) -> dict:
    """One streamed ``/v1/completions`` event."""
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}


def chat_chunk(rid: str, model: str, delta: dict, finish: str | None) -> dict:
    """One streamed ``/v1/chat/completions`` event (``delta``: role and/or content)."""
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
