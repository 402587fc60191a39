"""A real S3-compatible server (moto) on loopback for tests, and a proxy in front of it that can be cut.

``s3_server`` starts one ``moto_server`` for the session; ``s3`` gives each test its own prefix in a
bucket with the standard AWS variables pointing at the server; ``s3_proxy`` is a TCP forwarder on its
own port whose ``down()`` refuses and drops connections (an unreachable storage) and ``up()`` reopens
it on the same port, while the server behind keeps its data.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

BUCKET = "honing-tests"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def boto3_client(endpoint: str):
    """A boto3 S3 client for ``endpoint`` with the dummy credentials (bypasses honing and s3fs)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


class MotoServer:
    """``moto_server`` in a subprocess on a free loopback port."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        executable = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.process = subprocess.Popen(
            [executable, "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto_server did not start on port {self.port}")
            time.sleep(0.1)
        self.client = boto3_client(self.endpoint)

    def keys(self, prefix: str, bucket: str = BUCKET) -> dict[str, int]:
        """Every object under ``prefix`` as key (relative to the prefix) → size, read straight from the server."""
        prefix = prefix.rstrip("/") + "/"
        found: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"][len(prefix) :]] = item["Size"]
        return found

    def stop(self) -> None:
        """Stop the server process."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class ToggleProxy:
    """Forwards loopback TCP connections from ``port`` to ``target_port`` until ``down()``."""

    def __init__(self, target_port: int):
        self.port = free_port()
        self.target_port = target_port
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        """Accept connections again, on the same port."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.create_server(("127.0.0.1", self.port))  # sets SO_REUSEADDR: rebinding is safe
            listener.settimeout(0.05)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones: the storage is unreachable."""
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets, self._sockets = self._sockets, []
        if listener is not None:
            listener.close()
        for sock in open_sockets:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            with self._lock:
                if self._listener is not listener:
                    return
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _reset_s3fs() -> None:
    # s3fs caches file systems by their options; the endpoint from the environment is not part of that
    # key, so a file system from another test could still point at another port.
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def s3_server():
    """One moto server for the session, with the test bucket created."""
    server = MotoServer()
    server.client.create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The AWS variables pointing at the session's server, and a prefix of the bucket for this test alone."""
    import fsspec.config

    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_server.endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delitem(fsspec.config.conf, "s3", raising=False)
    _reset_s3fs()
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    yield SimpleNamespace(
        server=s3_server,
        url=f"s3://{BUCKET}/{prefix}",
        prefix=prefix,
        keys=lambda sub="": s3_server.keys(f"{prefix}/{sub}".rstrip("/")),
    )
    _reset_s3fs()


@pytest.fixture
def s3_proxy(s3_server):
    """A proxy in front of the session's server that a test can cut and restore."""
    proxy = ToggleProxy(s3_server.port)
    yield proxy
    proxy.down()
