"""The OpenAI chat-completions protocol as ``honing serve`` speaks it: a request's fields checked and turned into a
conversation and sampling settings, and the answer written as the response, its stream chunks and its errors.
Pure functions over JSON values; the HTTP server is ``honing.infer.serve``."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any, TypeVar

from honing.errors import ConfigError
from honing.infer.generate import Reply, Sampling

#: the fields a request may hold; any other is refused by name rather than silently not honoured
KNOWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "n",
        "stream",
        "stream_options",
        "user",  # an end-user id for the caller's own records: it changes nothing in the answer
    }
)
ROLES = ("system", "developer", "user", "assistant")

#: the kinds of number a request field is read as
_Number = TypeVar("_Number", int, float)


class APIError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error object (``message``, ``type``, ``param``)."""

    def __init__(self, status: HTTPStatus, message: str, *, param: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.param = param
        self.kind = kind or ("not_found_error" if status == HTTPStatus.NOT_FOUND else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI's clients read the error from."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": None}}


@dataclass(frozen=True)
class ChatRequest:
    """A checked request: the conversation, its sampling, whether to stream and whether the stream ends with usage;
    ``max_tokens_given``: the client named a length (past the context it is refused, not shortened)."""

    messages: list[dict[str, str]]
    sampling: Sampling
    stream: bool
    include_usage: bool
    max_tokens_given: bool


def parse_chat_request(body: object, *, model_name: str, defaults: Sampling) -> ChatRequest:
    """``body`` as a chat request to ``model_name``; a field the server cannot honour is a 400 naming it."""
    if not isinstance(body, dict):
        raise APIError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    unknown = sorted(set(body) - KNOWN_FIELDS)
    if unknown:
        raise APIError(
            HTTPStatus.BAD_REQUEST,
            f"unsupported field {unknown[0]!r}: honing serve takes {', '.join(sorted(KNOWN_FIELDS))}",
            param=unknown[0],
        )
    model = body.get("model")
    if model is not None and model != model_name:
        raise APIError(
            HTTPStatus.NOT_FOUND,
            f"the model {model!r} does not exist; this server serves {model_name!r}",
            param="model",
        )
    if body.get("n", 1) != 1:
        raise APIError(HTTPStatus.BAD_REQUEST, f"n: only 1 answer per request, got {body['n']!r}", param="n")
    messages = [_message(index, item) for index, item in enumerate(_list(body, "messages"))]
    if not messages:
        raise APIError(HTTPStatus.BAD_REQUEST, "messages: at least one message is needed", param="messages")
    length_field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    values = {
        "max_new_tokens": _number(body, length_field, int),
        "temperature": _number(body, "temperature", float),
        "top_p": _number(body, "top_p", float),
        "seed": _number(body, "seed", int),
    }
    sampling = replace(defaults, **{name: value for name, value in values.items() if value is not None})
    try:
        sampling.check()
    except ConfigError as error:  # Sampling names the command line's options; the client named the body's fields
        option = str(error).split(":")[0]
        field = {"--max-new-tokens": length_field, "--top-p": "top_p"}.get(option, option.lstrip("-"))
        raise APIError(HTTPStatus.BAD_REQUEST, str(error).replace(option, field, 1), param=field) from None
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise APIError(HTTPStatus.BAD_REQUEST, f"stream: expected true or false, got {stream!r}", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise APIError(
            HTTPStatus.BAD_REQUEST, 'stream_options: only {"include_usage": true|false}', param="stream_options"
        )
    include_usage = bool(options.get("include_usage", False))
    return ChatRequest(messages, sampling, stream, include_usage, values["max_new_tokens"] is not None)


def _list(body: dict[str, Any], field: str) -> list[Any]:
    value = body.get(field)
    if not isinstance(value, list):
        raise APIError(HTTPStatus.BAD_REQUEST, f"{field}: expected a list, got {type(value).__name__}", param=field)
    return value


def _number(body: dict[str, Any], field: str, kind: type[_Number]) -> _Number | None:
    value = body.get(field)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not float(value).is_integer())
    ):
        raise APIError(HTTPStatus.BAD_REQUEST, f"{field}: expected a number, got {value!r}", param=field)
    return kind(value)


def _message(index: int, item: object) -> dict[str, str]:
    """One message as the chat template takes it: a role and text (a list of text parts is joined)."""
    param = f"messages[{index}]"
    if not isinstance(item, dict) or item.get("role") not in ROLES:
        raise APIError(
            HTTPStatus.BAD_REQUEST,
            f'{param}: expected {{"role": one of {", ".join(ROLES)}, "content": ...}}',
            param=param,
        )
    content = item.get("content")
    if isinstance(content, list):
        if not all(isinstance(part, dict) and part.get("type") == "text" for part in content):
            raise APIError(
                HTTPStatus.BAD_REQUEST, f"{param}: only text parts are served (a text model)", param=f"{param}.content"
            )
        content = "".join(str(part.get("text", "")) for part in content)
    if not isinstance(content, str):
        raise APIError(HTTPStatus.BAD_REQUEST, f"{param}.content: expected text", param=f"{param}.content")
    # "developer" is OpenAI's newer name for the system turn; chat templates know "system"
    return {"role": "system" if item["role"] == "developer" else item["role"], "content": content}


def completion_id() -> str:
    """A fresh id for one answer (its stream's chunks share it)."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(reply: Reply) -> dict[str, int]:
    """The token counts of one answer."""
    total = reply.prompt_tokens + reply.completion_tokens
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens, "total_tokens": total}


def finish_reason(reply: Reply) -> str:
    """``stop`` when a stop token ended the answer, ``length`` when the length limit did."""
    return "stop" if reply.stopped else "length"


def chat_completion(reply: Reply, *, model_name: str, answer_id: str) -> dict[str, Any]:
    """The ``chat.completion`` object of one answer."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": reply.text},
        "finish_reason": finish_reason(reply),
        "logprobs": None,
    }
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [choice],
        "usage": usage(reply),
    }


def chunk(
    *, model_name: str, answer_id: str, delta: dict[str, str] | None, reason: str | None = None, **extra: object
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream: a piece of the answer (``delta``), its end (``reason``), or, with
    ``delta`` None, the closing usage chunk (no choices)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}]
    body = {"id": answer_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model_name}
    return {**body, "choices": choices, **extra}


def model_list(model_name: str, created: int) -> dict[str, Any]:
    """What ``GET /v1/models`` answers: the one model served."""
    return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "honing"}]}
