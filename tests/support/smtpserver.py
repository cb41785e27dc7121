"""A local SMTP server (aiosmtpd) that records mails and can refuse on script.

``with SMTPServer() as smtp:`` listens on a free loopback port; ``smtp.messages``
holds every accepted mail as an :class:`email.message.Message`; ``smtp.rcpt_reply``
and ``smtp.data_reply`` (e.g. ``"550 5.1.1 no such user"``) make the next
RCPT / DATA fail; ``smtp.drop_after_data`` accepts a mail and then hangs up
without answering (the answer is lost); ``smtp.slow(secs, conversations=1)`` makes
the next conversation(s) answer MAIL and RCPT only after ``secs`` each (a slow
server, every step well inside a per-command timeout).
"""

from __future__ import annotations

import asyncio
import threading
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from .procs import free_port

__all__ = ["SMTPServer", "free_port"]


class _Handler:
    def __init__(self, server: SMTPServer) -> None:
        self.server = server

    async def _maybe_slow(self, session) -> None:
        with self.server.lock:
            if id(session) not in self.server._seen:
                self.server._seen.add(id(session))
                if self.server._slow_left > 0:
                    self.server._slow_left -= 1
                    self.server._slow_sessions.add(id(session))
            slow = id(session) in self.server._slow_sessions
        if slow:
            await asyncio.sleep(self.server.slow_secs)

    async def handle_MAIL(self, srv, session, envelope, address, mail_options) -> str:
        await self._maybe_slow(session)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, srv, session, envelope, address, rcpt_options) -> str:
        await self._maybe_slow(session)
        reply = self.server.rcpt_reply
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, srv, session, envelope) -> str:
        reply = self.server.data_reply
        if reply:
            return reply
        with self.server.lock:
            self.server.messages.append(message_from_bytes(envelope.original_content))
            self.server.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        if self.server.drop_after_data:
            self.server.drop_after_data = False
            srv.transport.close()  # taken, but the client never hears "250"
            return "250 OK"
        return "250 OK"


class SMTPServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.rcpt_reply: str | None = None
        self.data_reply: str | None = None
        self.drop_after_data = False
        self.slow_secs = 0.0
        self._slow_left = 0
        self._seen: set[int] = set()
        self._slow_sessions: set[int] = set()
        self.lock = threading.Lock()
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)

    def slow(self, secs: float, conversations: int = 1) -> None:
        with self.lock:
            self.slow_secs, self._slow_left = secs, conversations

    def __enter__(self) -> SMTPServer:
        self._controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._controller.stop()
