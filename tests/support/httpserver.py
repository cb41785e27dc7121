"""A scriptable HTTP server on loopback for the whole test suite.

Feed servers, JSON APIs, webhook receivers and misbehaving servers (slow-loris,
gzip bombs, redirects, 5xx/429 sequences) are all one :class:`TestHTTPServer`
with routes::

    with TestHTTPServer() as srv:
        srv.route("GET", "/items", json_reply([{"id": 1}]))
        srv.route("GET", "/old", redirect("/items"))
        srv.route("GET", "/drip", drip(b"x" * 100, interval=0.3))
        srv.route("GET", "/flaky", sequence(503, 503, json_reply([])))
        ... srv.url("/items") ...
        assert srv.hits("/items") == 1

A handler receives the :class:`RecordedRequest` and returns either a reply
``(status, headers, body)`` or a *writer*: a callable given a :class:`RawReply`
that writes the raw HTTP response itself (for drips and huge bodies). Every
request is recorded (method, target, headers, body, monotonic time) before its
handler runs, so a handler that never answers is still visible.

The server binds 127.0.0.1 port 0 (a free port), serves from a daemon thread
and speaks HTTP/1.1 keep-alive; writers always close the connection after.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

Reply = tuple[int, Mapping[str, str], bytes]
Handler = Callable[["RecordedRequest"], "Reply | Callable[[RawReply], None]"]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    target: str  # the raw request target: "/p?q=1", or "http://h/p" if sent via a proxy
    path: str  # target without the query string
    headers: dict[str, str]  # lower-cased names
    body: bytes
    at: float  # time.monotonic() when the request head had been read

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class RawReply:
    """Gives a writer handler the socket's write side and the server's stop signal."""

    def __init__(self, wfile: Any, stopping: threading.Event) -> None:
        self._wfile = wfile
        self.stopping = stopping

    def head(self, status: int, headers: Mapping[str, str] | None = None) -> bool:
        lines = [f"HTTP/1.1 {status} X", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        return self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def write(self, data: bytes) -> bool:
        """Send ``data`` now; False once the client has gone away."""
        try:
            self._wfile.write(data)
            self._wfile.flush()
            return True
        except OSError:
            return False

    def sleep(self, secs: float) -> bool:
        """Wait ``secs``; False if the server is stopping meanwhile."""
        return not self.stopping.wait(secs)


class TestHTTPServer:
    """Threaded loopback server with scriptable routes and a request log."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], Handler] = {}
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        """``("127.0.0.1", port)``: what ``fetch(allow_addresses=...)`` expects."""
        return ("127.0.0.1", self.port)

    def url(self, path: str = "/", host: str | None = None) -> str:
        """An absolute URL; ``host`` replaces 127.0.0.1 (pair it with a fake resolver)."""
        return f"http://{host or '127.0.0.1'}:{self.port}{path}"

    def route(self, method: str, path: str, handler: Handler) -> TestHTTPServer:
        """Serve ``path`` (exact, query ignored) for ``method`` (or ``"*"``)."""
        with self._lock:
            self._routes[(method.upper(), path)] = handler
        return self

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def hits(self, path: str | None = None) -> int:
        return sum(1 for r in self.requests if path is None or r.path == path)

    def start(self) -> TestHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> TestHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, req: RecordedRequest) -> Handler | None:
        with self._lock:
            self._requests.append(req)
            return self._routes.get((req.method, req.path)) or self._routes.get(("*", req.path))


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up mid-response (caps, deadlines) are the point of many tests.
        pass


def _make_handler(server: TestHTTPServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            req = RecordedRequest(
                method=self.command,
                target=self.path,
                path=urlsplit(self.path).path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                at=time.monotonic(),
            )
            handler = server._record(req)
            result = handler(req) if handler else (404, {}, b"no route\n")
            if callable(result):
                self.close_connection = True
                result(RawReply(self.wfile, server.stopping))
                return
            status, headers, payload = result
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if "content-length" not in {k.lower() for k in headers}:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

        def log_message(self, *args: Any) -> None:
            pass

    return _Handler


# --- handler helpers ---------------------------------------------------------------


def reply(
    status: int = 200, body: bytes = b"", headers: Mapping[str, str] | None = None
) -> Handler:
    """A fixed reply."""
    return lambda req: (status, dict(headers or {}), body)


def json_reply(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Handler:
    """A fixed JSON reply (``doc`` may also be a callable returning the document)."""

    def handle(req: RecordedRequest) -> Reply:
        value = doc() if callable(doc) else doc
        return (
            status,
            {"Content-Type": "application/json", **(headers or {})},
            json.dumps(value).encode(),
        )

    return handle


def redirect(location: str, status: int = 302) -> Handler:
    return reply(status, b"", {"Location": location})


def sequence(*steps: int | Handler) -> Handler:
    """Answer with each step in turn, repeating the last (an int is an empty reply)."""
    handlers = [reply(s) if isinstance(s, int) else s for s in steps]
    counter = itertools.count()
    lock = threading.Lock()

    def handle(req: RecordedRequest) -> Any:
        with lock:
            index = min(next(counter), len(handlers) - 1)
        return handlers[index](req)

    return handle


@functools.lru_cache(maxsize=4)
def gzip_bomb_bytes(decoded_size: int = 300 * 1024 * 1024) -> bytes:
    """A gzip stream of ``decoded_size`` zero bytes (300 MiB -> about 300 KiB)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    parts = [comp.compress(block) for _ in range(decoded_size // len(block))]
    parts.append(comp.compress(bytes(decoded_size % len(block))))
    parts.append(comp.flush())
    return b"".join(parts)


def gzip_bomb(decoded_size: int = 300 * 1024 * 1024) -> Handler:
    body = gzip_bomb_bytes(decoded_size)
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    return reply(200, body, headers)


def drip(body: bytes, interval: float = 0.3, headers: Mapping[str, str] | None = None) -> Handler:
    """Slow-loris: full headers at once, then one body byte every ``interval`` seconds."""

    def writer(raw: RawReply) -> None:
        if not raw.head(200, {"Content-Length": str(len(body)), **(headers or {})}):
            return
        for i in range(len(body)):
            if not raw.sleep(interval) or not raw.write(body[i : i + 1]):
                return

    return lambda req: writer


def stream_zeros(total: int, *, content_length: bool = True, chunk: int = 64 * 1024) -> Handler:
    """A ``total``-byte body written in chunks, with or without Content-Length."""

    def writer(raw: RawReply) -> None:
        headers = {"Content-Length": str(total)} if content_length else {}
        if not raw.head(200, headers):
            return
        block = bytes(chunk)
        sent = 0
        while sent < total and not raw.stopping.is_set():
            n = min(chunk, total - sent)
            if not raw.write(block[:n]):
                return
            sent += n

    return lambda req: writer
