"""A loopback TCP proxy in front of PostgreSQL that loses the reply to a COMMIT.

``CommitCut(5432).start()`` listens on a free 127.0.0.1 port and forwards to the
server. After ``arm()``, the next request that holds ``COMMIT`` reaches the server,
which commits; its reply is dropped and the client's connection cut (RELIABILITY.md
row 53: the connection dies after COMMIT was sent). Then it forwards again.
"""

from __future__ import annotations

import socket
import threading


class CommitCut:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, int(target_port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.cuts = 0

    def start(self) -> CommitCut:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._listener.close()

    def arm(self) -> None:
        """Lose the reply to the next COMMIT (one)."""
        self._armed.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # stopped
                return
            upstream = socket.create_connection(self.target)
            cut = threading.Event()
            for args in ((client, upstream, cut, False), (upstream, client, cut, True)):
                threading.Thread(target=self._pipe, args=args, daemon=True).start()

    def _pipe(
        self, src: socket.socket, dst: socket.socket, cut: threading.Event, reply: bool
    ) -> None:
        try:
            while data := src.recv(65536):
                if reply and cut.is_set():  # the server committed: its answer is lost
                    self.cuts += 1
                    break
                if not reply and self._armed.is_set() and b"COMMIT" in data:
                    self._armed.clear()
                    cut.set()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
