"""A loopback server that answers every connection with the same raw bytes.

For responses :mod:`http.server` cannot produce (two ``Content-Length`` headers
that disagree, broken framing)::

    server = RawServer(b"HTTP/1.1 200 OK\\r\\nContent-Length: 5\\r\\n\\r\\nhello")
    ... server.url ...; server.requests  # raw request heads, in order
    server.close()
"""

from __future__ import annotations

import socket
import threading


class RawServer:
    """Answers every connection with the same raw bytes, then closes it."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    data = conn.recv(4096)
                    if not data:
                        break
                    head += data
                self.requests.append(head)
                conn.sendall(self.raw)

    def close(self) -> None:
        self._sock.close()
