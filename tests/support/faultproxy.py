"""A small asyncio TCP proxy on loopback that injects network faults (Toxiproxy-style).

``FaultProxy(target_port).start()`` listens on a free 127.0.0.1 port and forwards to
the target. ``set_mode`` switches, for new and open connections alike:

- ``pass``: bytes flow both ways;
- ``reset``: every connection is aborted with a TCP RST (``SO_LINGER 0``), new ones at once;
- ``blackhole``: connections stay open, bytes are read and dropped, nothing answers;
- ``cut_after_request`` (``cut_after_request(match, times)``): a request whose bytes hold
  ``match`` reaches the target, which runs it; its reply is dropped and the client's
  connection cut (a reply lost on the way back), ``times`` times, then ``pass`` again.
  redis-py then sends the command again on a new connection.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

from .procs import free_port

MODES = ("pass", "reset", "blackhole", "cut_after_request")


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.mode = "pass"
        self.connections = 0  # accepted so far, in any mode
        self.resets = 0
        self.cuts = 0  # replies dropped in cut_after_request
        self._cut_match, self._cut_left = b"", 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> FaultProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", self.port), self._loop
        )
        self._server = fut.result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # none left pending when the loop stops
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode

        def apply() -> None:
            self.mode = mode
            if mode == "reset":
                for w in list(self._writers):
                    self.resets += 1
                    _rst(w)
                self._writers.clear()

        self._loop.call_soon_threadsafe(apply)
        # return once the loop applied it: the caller's next step sees the new mode
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self._loop).result(10)

    def cut_after_request(self, match: bytes, times: int = 1) -> None:
        """Drop the reply to the next ``times`` requests holding ``match``, and cut their
        connections (see the module docstring)."""

        def arm() -> None:
            self._cut_match, self._cut_left = match, times

        self._loop.call_soon_threadsafe(arm)
        self.set_mode("cut_after_request")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "reset":
            self.resets += 1
            _rst(writer)
            return
        if self.mode == "blackhole":
            await self._swallow(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _rst(writer)
            return
        self._writers.update((writer, up_writer))
        sent = {"cut": False}  # this connection sent a request whose reply is to be lost
        await asyncio.gather(
            self._pipe(reader, up_writer, sent),
            self._pipe(up_reader, writer, sent, reply=True),
            return_exceptions=True,
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while await reader.read(65536):
                pass
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sent: dict,
        reply: bool = False,
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if self.mode == "blackhole":
                continue  # dropped: the peer waits for an answer that never comes
            if self.mode == "reset":
                break
            if self.mode == "cut_after_request":
                if reply and sent["cut"]:  # the target ran it: lose its answer, cut
                    self.cuts += 1
                    self._cut_left -= 1
                    if self._cut_left <= 0:
                        self.mode = "pass"
                    _rst(writer)
                    break
                if not reply and self._cut_left > 0 and self._cut_match in data:
                    sent["cut"] = True
            writer.write(data)
            await writer.drain()
        writer.transport.abort()
