"""The rollout server: completions sampled from prompt token ids over HTTP + JSON, and the policy's weights loaded
into its engine between steps (GRPO's ``use_vllm: true``).

It imports nothing of honing (a test and an import contract check it), so it runs in vLLM's own environment, where
vLLM's torch pin decides the packages: ``python honing/rollout/serve.py --model FOLDER`` there, or
``python -m honing.rollout.serve`` where honing is installed. The standard library serves it; one lock takes the
requests one at a time (the engine is one model), while ``/health`` answers at once.

Endpoints (JSON in and out unless said):

- ``GET /health``: ``{"status": "ok", "server": "honing-rollout", "engine", "model", "dtype", "weights_version",
  "generate_requests"}`` (``dtype``: the engine's weights dtype, in which the trainer sends them).
- ``GET /weights_version``: ``{"weights_version": n}``: how many weight updates the engine has taken.
- ``POST /generate``: ``{"prompts": [[ids]], "seeds": [int], "temperature", "top_p", "top_k", "max_tokens",
  "stop_token_ids": [ids], "weights_version": n | null}`` → ``{"completions": [[ids]], "weights_version": n}``.
  One completion per prompt, drawn with its own seed, ending at its first stop token (kept) or after
  ``max_tokens``. A request naming another weights version than the engine's is refused (409): the trainer's ranks
  sample only from the weights their step synced.
- ``POST /update_weights?first=0|1&last=0|1``: the body is a safetensors file of named tensors (Hugging Face
  checkpoint names), one chunk of the model; ``first`` opens an update, ``last`` closes it (the version counts up
  and the prefix cache is dropped). ``/generate`` is refused (409) while an update is open.
- ``POST /reset_prefix_cache``: drops cached prompt prefixes (done after every update; exposed for clients).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlparse

if __package__:
    from . import engines, json_http  # python -m honing.rollout.serve
else:
    import engines  # python path/to/serve.py: this file's folder is on sys.path
    import json_http

log = logging.getLogger("honing-rollout")

#: ``/health``'s ``server`` field: a client tells this server from anything else listening on the port
SERVER_NAME = "honing-rollout"
#: the generation settings every ``/generate`` request names
GENERATE_FIELDS = ("prompts", "seeds", "temperature", "top_p", "top_k", "max_tokens", "stop_token_ids")


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the client."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class RolloutService:
    """The server's state around one engine: the weights version, an open update, and the lock that serialises
    the engine's calls."""

    def __init__(self, engine: engines.Engine, model: str):
        self.engine = engine
        self.model = model
        self.weights_version = 0
        self.generate_requests = 0  # answered ones: a client (or a test) sees that its ranks each asked
        self.updating = False
        self.lock = threading.Lock()

    def health(self) -> dict[str, Any]:
        """What ``/health`` answers."""
        name = getattr(self.engine, "name", type(self.engine).__name__)
        status = {"status": "ok", "server": SERVER_NAME, "engine": name, "model": self.model}
        counts = {"weights_version": self.weights_version, "generate_requests": self.generate_requests}
        return {**status, "dtype": getattr(self.engine, "dtype", None), **counts}

    def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        """One completion per prompt, each trimmed after its first stop token."""
        missing = [name for name in GENERATE_FIELDS if name not in request]
        if missing:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"/generate: missing fields {missing}")
        prompts, seeds = request["prompts"], request["seeds"]
        if len(prompts) != len(seeds):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"/generate: {len(prompts)} prompts but {len(seeds)} seeds")
        if any(not prompt for prompt in prompts):
            raise RequestError(HTTPStatus.BAD_REQUEST, "/generate: every prompt needs at least one token id")
        stops = [int(token) for token in request["stop_token_ids"]]
        with self.lock:
            expected = request.get("weights_version")
            if self.updating:
                raise RequestError(
                    HTTPStatus.CONFLICT, "/generate: a weight update is open (its last chunk is to come)"
                )
            if expected is not None and int(expected) != self.weights_version:
                raise RequestError(
                    HTTPStatus.CONFLICT,
                    f"/generate: the request expects weights version {expected}; the engine has {self.weights_version}",
                )
            sampling = engines.Sampling(
                temperature=float(request["temperature"]),
                top_p=float(request["top_p"]),
                top_k=int(request["top_k"]),
                max_tokens=int(request["max_tokens"]),
                stop_token_ids=tuple(stops),
            )
            completions = self.engine.generate(
                [[int(token) for token in prompt] for prompt in prompts], [int(seed) for seed in seeds], sampling
            )
            version = self.weights_version
            self.generate_requests += 1
        return {"completions": [until_stop(c, stops) for c in completions], "weights_version": version}

    def update_weights(self, blob: bytes, *, first: bool, last: bool) -> dict[str, Any]:
        """Load one chunk of named tensors; ``first`` opens the update, ``last`` closes it."""
        with self.lock:
            if first:
                self.engine.begin_weight_update()
                self.updating = True
            elif not self.updating:
                raise RequestError(HTTPStatus.CONFLICT, "/update_weights: no update is open; send first=1 first")
            try:
                loaded = self.engine.load_weights(blob)
            except Exception as error:
                self.updating = False  # the client starts again from its first chunk
                if isinstance(error, (KeyError, ValueError)):
                    raise RequestError(HTTPStatus.BAD_REQUEST, f"/update_weights: {error}") from error
                raise
            if last:
                self.engine.finish_weight_update()
                self.engine.reset_prefix_cache()  # cached prefixes hold keys and values of the old weights
                self.updating = False
                self.weights_version += 1
                log.info("weights version %d loaded", self.weights_version)
            return {"tensors": loaded, "weights_version": self.weights_version}

    def reset_prefix_cache(self) -> dict[str, Any]:
        """Drop the engine's cached prompt prefixes."""
        with self.lock:
            self.engine.reset_prefix_cache()
        return {"status": "ok"}


def until_stop(tokens: list[int], stop_token_ids: list[int]) -> list[int]:
    """``tokens`` up to and including the first stop token (engines stop there, this makes it a contract)."""
    stops = set(stop_token_ids)
    for index, token in enumerate(tokens):
        if token in stops:
            return list(tokens[: index + 1])
    return list(tokens)


def handler_for(service: RolloutService) -> type[json_http.JsonHandler]:
    """The request handler class bound to ``service``."""

    class Handler(json_http.JsonHandler):  # keep-alive: one connection carries a step's requests
        log = log  # the server's logger takes the request lines

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = urlparse(self.path).path.rstrip("/")
            if path == "/health":
                self.answer(service.health)
            elif path == "/weights_version":
                self.answer(lambda: {"weights_version": service.weights_version})
            else:
                self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no GET {path}"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            path, query = url.path.rstrip("/"), parse_qs(url.query)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if path == "/generate":
                self.answer(lambda: service.generate(json.loads(body or b"{}")))
            elif path == "/update_weights":
                flag = lambda name: query.get(name, ["0"])[0] == "1"  # noqa: E731
                self.answer(lambda: service.update_weights(body, first=flag("first"), last=flag("last")))
            elif path == "/reset_prefix_cache":
                self.answer(service.reset_prefix_cache)
            else:
                self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no POST {path}"})

        def answer(self, produce: Callable[[], dict[str, Any]]) -> None:
            try:
                self.send_json(HTTPStatus.OK, produce())
            except RequestError as error:
                self.send_json(error.status, {"error": str(error)})
            except json.JSONDecodeError as error:
                self.send_json(HTTPStatus.BAD_REQUEST, {"error": f"the body is not JSON: {error}"})
            except Exception as error:  # the engine failed: the client gets the reason, the server keeps serving
                log.exception("request %s failed", self.path)
                self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(error).__name__}: {error}"})

    return Handler


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (the vLLM flags are TRL's ``vllm-serve`` names)."""
    parser = argparse.ArgumentParser(description="honing's rollout server: GRPO's completions and weight sync")
    parser.add_argument("--model", required=True, help="the policy's Hugging Face folder (or hub name) to start from")
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="the port to listen on (0: any free port)")
    parser.add_argument(
        "--engine",
        choices=("auto", "vllm", "transformers"),
        default="auto",
        help="auto: vLLM where it imports and CUDA is there, else transformers (slow; for tests and CPU machines)",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM: share of the GPU it takes")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM: GPUs one model spans")
    parser.add_argument("--dtype", default="auto", help="the engine's weights dtype (auto: the model's own)")
    parser.add_argument("--max-model-len", type=int, default=None, help="vLLM: the longest prompt + completion")
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM: no CUDA graphs")
    parser.add_argument("--device", default="auto", help="transformers engine: cpu, cuda, ... (auto: cuda if any)")
    parser.add_argument("--port-file", default=None, help="write the port listened on to this file once serving")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Build the engine, then serve until interrupted."""
    args = parse_arguments(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    engine = engines.build_engine(args)
    service = RolloutService(engine, args.model)
    server = json_http.listening_server(args.host, args.port, handler_for(service))
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file, "w") as file:  # written once listening: a launcher may connect as soon as it reads
            file.write(str(port))
    log.info("serving %s with the %s engine on http://%s:%d", args.model, engine.name, args.host, port)
    json_http.serve_until_interrupted(server)


if __name__ == "__main__":
    main()
