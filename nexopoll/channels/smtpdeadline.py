"""Django's SMTP backend with one deadline over the whole conversation.

``EMAIL_TIMEOUT`` (and Django's ``timeout``) bounds each socket operation: a server
that answers every command slowly (connect, EHLO, STARTTLS, login, MAIL, RCPT,
DATA) can keep a send going for many times that. A delivery's send must end before
its claim does (:mod:`nexopoll.runtime.claims`), so the email channel opens its
connection through :class:`DeadlineEmailBackend`: before every command and every
reply the socket's timeout is cut to what is left of the attempt's deadline, and a
conversation past it stops with :class:`SMTPDeadlineExceeded` (transient).
"""

from __future__ import annotations

import functools
import smtplib
import socket
import time
from typing import Any

from django.core.mail.backends.smtp import EmailBackend

DJANGO_SMTP = "django.core.mail.backends.smtp.EmailBackend"


class SMTPDeadlineExceeded(smtplib.SMTPServerDisconnected):
    """The conversation ran past its deadline (the connection is closed)."""


class _Bounded:
    _deadline_at: float
    _deadline_secs: float
    sock: Any

    def _left(self) -> float:
        left = self._deadline_at - time.monotonic()
        if left <= 0:
            self.close()
            raise SMTPDeadlineExceeded(f"deadline of {self._deadline_secs:g} s exceeded")
        return left

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        bound = self._left() if timeout is None else min(timeout, self._left())
        return super()._get_socket(host, port, bound)

    def send(self, s: Any) -> None:
        if self.sock is not None:
            self.sock.settimeout(self._left())
        super().send(s)

    def getreply(self) -> tuple[int, bytes]:
        if self.sock is not None:
            self.sock.settimeout(self._left())
        return super().getreply()


class _SMTP(_Bounded, smtplib.SMTP):
    def __init__(self, deadline_at: float, deadline_secs: float, *args: Any, **kw: Any) -> None:
        self._deadline_at, self._deadline_secs = deadline_at, deadline_secs
        super().__init__(*args, **kw)


class _SMTPSSL(_Bounded, smtplib.SMTP_SSL):
    def __init__(self, deadline_at: float, deadline_secs: float, *args: Any, **kw: Any) -> None:
        self._deadline_at, self._deadline_secs = deadline_at, deadline_secs
        super().__init__(*args, **kw)


class DeadlineEmailBackend(EmailBackend):
    """Django's SMTP backend; the whole conversation ends within ``deadline_secs`` from
    the backend's creation."""

    def __init__(self, *, deadline_secs: float, **kw: Any) -> None:
        super().__init__(timeout=deadline_secs, **kw)
        self._deadline = (time.monotonic() + deadline_secs, deadline_secs)

    @property
    def connection_class(self) -> Any:
        cls = _SMTPSSL if self.use_ssl else _SMTP
        return functools.partial(cls, *self._deadline)


def connection(deadline_secs: float) -> Any:
    """A mail connection for one send: bounded by ``deadline_secs`` as a whole with
    Django's SMTP backend, else the configured backend with that timeout."""
    from django.conf import settings
    from django.core.mail import get_connection

    if settings.EMAIL_BACKEND == DJANGO_SMTP:
        return DeadlineEmailBackend(deadline_secs=deadline_secs)
    return get_connection(timeout=deadline_secs)
