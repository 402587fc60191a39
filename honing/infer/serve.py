"""``honing serve MODEL_OR_RUN``: a trained model behind an OpenAI-compatible chat endpoint, so that any OpenAI
client (the ``openai`` package, LangChain, curl) talks to it.

- ``POST /v1/chat/completions``: messages → the model's own chat template → honing's decoder → a
  ``chat.completion`` with ``usage``; ``"stream": true`` sends the answer as server-sent ``chat.completion.chunk``
  events ending with ``data: [DONE]``.
- ``GET /v1/models``: the one model served; ``GET /health``: ``{"status": "ok"}``.

Errors are OpenAI's error objects with their HTTP status (400 for a field the server cannot honour, 404 for another
model or path). The standard library serves it, as the rollout server (``honing/rollout/serve.py``) does; one lock
takes the requests one at a time (the model is one), while ``/health`` and ``/v1/models`` answer at once."""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from honing.errors import ConfigError
from honing.infer.generate import Reply, Sampling, TextGenerator
from honing.infer.generate_command import sampling_from
from honing.infer.model_source import LoadedModel, load_model
from honing.infer.openai_protocol import (
    APIError,
    ChatRequest,
    chat_completion,
    chunk,
    completion_id,
    model_list,
    parse_chat_request,
    usage,
)
from honing.rollout.json_http import JsonHandler, listening_server, serve_until_interrupted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedChat:
    """A request ready to decode: its generator (the request's sampling, fitted to the context) and the request."""

    generator: TextGenerator
    request: ChatRequest


class ChatService:
    """One loaded model answering chat requests, one at a time."""

    def __init__(self, loaded: LoadedModel, model_name: str, defaults: Sampling):
        if loaded.is_vision:
            raise ConfigError(
                f"MODEL_OR_RUN: {loaded.source.path} is a vision-language model; honing serve serves text"
            )
        if not getattr(loaded.tokenizer, "chat_template", None):
            raise ConfigError(
                f"MODEL_OR_RUN: {loaded.source.path} has no chat template to render messages with; train it with "
                "data.chat_template set, or give a model whose tokenizer has one"
            )
        self.loaded = loaded
        self.model_name = model_name
        self.defaults = defaults.check()
        self.created = int(time.time())
        self.lock = threading.Lock()

    def prepare(self, body: object) -> PreparedChat:
        """Check ``body`` and fit its answer length to the model's context: every refusal happens here, before a
        stream's first byte."""
        request = parse_chat_request(body, model_name=self.model_name, defaults=self.defaults)
        sampling = request.sampling
        generator = TextGenerator(self.loaded, sampling, chat_template=True)
        prompt_tokens = len(_encode(generator, request.messages))
        context = self.loaded.context_length
        if context is not None:
            room = context - prompt_tokens
            if room < 1:
                raise APIError(
                    HTTPStatus.BAD_REQUEST,
                    f"messages: the conversation takes {prompt_tokens} tokens; the model's context holds {context}",
                    param="messages",
                )
            if sampling.max_new_tokens > room:
                if request.max_tokens_given:
                    raise APIError(
                        HTTPStatus.BAD_REQUEST,
                        f"max_tokens: {sampling.max_new_tokens} new tokens after a {prompt_tokens}-token prompt do not "
                        f"fit the model's context of {context}; give {room} or less",
                        param="max_tokens",
                    )
                generator = TextGenerator(self.loaded, replace(sampling, max_new_tokens=room), chat_template=True)
        return PreparedChat(generator, request)

    def answer(self, prepared: PreparedChat, write: Callable[[str], object] | None = None) -> Reply:
        """Decode one prepared request (its text streamed to ``write`` when given)."""
        with self.lock:
            return prepared.generator.reply(prepared.request.messages, write)


def _encode(generator: TextGenerator, messages: list[dict[str, str]]) -> list[int]:
    """The conversation's prompt ids; a template that refuses the conversation (roles out of order) is a 400."""
    from jinja2 import TemplateError

    try:
        return generator.encode(messages)
    except TemplateError as error:
        raise APIError(
            HTTPStatus.BAD_REQUEST, f"messages: the chat template refused them: {error}", param="messages"
        ) from None


def handler_for(service: ChatService) -> type[JsonHandler]:
    """The request handler class bound to ``service``."""

    class Handler(JsonHandler):  # keep-alive for JSON answers; a stream closes its connection at its end
        log = log  # this module's logger takes the request lines

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = urlparse(self.path).path.rstrip("/")
            if path == "/v1/models":
                self.send_json(HTTPStatus.OK, model_list(service.model_name, service.created))
            elif path == "/health":
                self.send_json(HTTPStatus.OK, {"status": "ok", "model": service.model_name})
            else:
                self.send_error_json(APIError(HTTPStatus.NOT_FOUND, f"no GET {path}; see GET /v1/models"))

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path.rstrip("/")
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            if path != "/v1/chat/completions":
                self.send_error_json(APIError(HTTPStatus.NOT_FOUND, f"no POST {path}; POST /v1/chat/completions"))
                return
            try:
                prepared = service.prepare(json.loads(body or b"null"))
            except APIError as error:
                self.send_error_json(error)
                return
            except json.JSONDecodeError as error:
                self.send_error_json(APIError(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {error}"))
                return
            if prepared.request.stream:
                self.stream(prepared)
                return
            try:
                reply = service.answer(prepared)
            except Exception as error:  # the model failed: the client gets the reason, the server keeps serving
                log.exception("request %s failed", self.path)
                self.send_error_json(_internal(error))
                return
            self.send_json(
                HTTPStatus.OK, chat_completion(reply, model_name=service.model_name, answer_id=completion_id())
            )

        def stream(self, prepared: PreparedChat) -> None:
            """The answer as server-sent events, each piece sent as the decoder chooses its tokens."""
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")  # no length is known ahead: the stream ends with the connection
            self.end_headers()
            self.close_connection = True
            answer_id, name = completion_id(), service.model_name
            with_usage = {"usage": None} if prepared.request.include_usage else {}

            def event(payload: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

            def piece(text: str) -> None:
                if text:
                    event(chunk(model_name=name, answer_id=answer_id, delta={"content": text}, **with_usage))

            try:
                event(
                    chunk(
                        model_name=name, answer_id=answer_id, delta={"role": "assistant", "content": ""}, **with_usage
                    )
                )
                reply = service.answer(prepared, piece)
                reason = "stop" if reply.stopped else "length"
                event(chunk(model_name=name, answer_id=answer_id, delta={}, reason=reason, **with_usage))
                if prepared.request.include_usage:
                    event(chunk(model_name=name, answer_id=answer_id, delta=None, usage=usage(reply)))
                self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):  # the client left: nothing is left to tell it
                log.info("a streaming client disconnected before its answer ended")
            except Exception as error:  # after the headers, an error can only be one more event
                log.exception("request %s failed", self.path)
                event(_internal(error).body())

        def send_error_json(self, error: APIError) -> None:
            self.send_json(error.status, error.body())

    return Handler


def _internal(error: Exception) -> APIError:
    return APIError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}", kind="server_error")


def make_server(service: ChatService, host: str, port: int) -> ThreadingHTTPServer:
    """The HTTP server of ``service`` listening on ``host:port`` (0: any free port); ``serve_forever`` serves."""
    try:
        return listening_server(host, port, handler_for(service))
    except OSError as error:  # the port is taken, the address is not this machine's
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port} ({error.strerror or error})") from None


def run_serve(args: argparse.Namespace) -> int:
    """Carry out ``honing serve``: load the model, then serve until Ctrl-C."""
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: expected 0 to 65535 (0: any free port), got {args.port}")
    defaults = sampling_from(args)  # the sampling of a request that names none
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    service = ChatService(loaded, args.served_model_name or args.model, defaults)
    server = make_server(service, args.host, args.port)
    host, port = server.server_address[:2]
    print(
        f"serving {service.model_name} on http://{host}:{port}/v1 (OpenAI chat completions; Ctrl-C stops)", flush=True
    )
    serve_until_interrupted(server)
    return 0
