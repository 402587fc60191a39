"""The JSON request handler and serving loop both HTTP servers build on: the rollout server (``serve.py`` beside it) and
``honing serve`` (``honing/infer/serve.py``). Like the rollout server, it imports nothing of honing, as it runs
beside it in vLLM's own environment."""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON over keep-alive connections and logs each request at debug level to
    its server's ``log``."""

    protocol_version = "HTTP/1.1"  # keep-alive: a client's requests share one connection
    log: ClassVar[logging.Logger] = logging.getLogger(__name__)

    def send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        """Answer ``payload`` as JSON with ``status``."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        """http.server's request lines, at debug level (a server answering a training run logs no line per call)."""
        self.log.debug("%s " + format, self.address_string(), *args)


def listening_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threaded server of ``handler`` listening on ``host:port`` (0: any free port); its request threads do not
    keep the process alive at exit."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_until_interrupted(server: ThreadingHTTPServer) -> None:
    """Serve until Ctrl-C, then close the listening socket."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
