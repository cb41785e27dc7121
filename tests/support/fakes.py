"""Hand-written fakes for poller and network tests (no MagicMock).

- :class:`FakeHost` implements ``PollerHost`` and records what a tick produced.
- :class:`FakeResolver` is a ``getaddrinfo`` stand-in: host names map to address
  lists (or to a sequence of answers, for DNS-rebinding tests), every call is
  recorded, and nothing reaches a real DNS server.
- :class:`ConnectLog` records every ``socket.connect`` made while it is active,
  through an audit hook (``sys.addaudithook``), so a test can assert "zero connect
  attempts" or "connected only to 127.0.0.1:<port>" without patching sockets.
- :func:`make_context` builds a ``PollContext`` with sensible defaults.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nexopoll.core.contract import CancelToken, PollContext

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Delivered:
    channel: str
    recipient: str
    payload: dict[str, Any]


@dataclass
class FakeHost:
    """Records deliveries, logs, metrics and publishes; credentials from a dict."""

    credentials: dict[str, dict[str, Any]] = field(default_factory=dict)
    deliveries: list[Delivered] = field(default_factory=list)
    logs: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    metrics: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    published: list[tuple[str, bytes]] = field(default_factory=list)
    post_commit: list[Callable[[], None]] = field(default_factory=list)

    def deliver(self, channel: str, recipient: str, payload: dict[str, Any]) -> None:
        self.deliveries.append(Delivered(channel, recipient, payload))

    def publish(self, topic: str, payload: bytes) -> None:
        self.published.append((topic, payload))

    def credentials_get(self, channel: str) -> dict[str, Any]:
        return dict(self.credentials.get(channel, {}))

    def log(self, level: str, message: str, **fields: Any) -> None:
        self.logs.append((level, message, fields))

    def metric_inc(self, name: str, **labels: str) -> None:
        self.metrics.append((name, labels))

    def llm_invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("FakeHost has no LLM")

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.post_commit.append(callback)

    def commit(self) -> None:
        """Play the runtime after a successful commit: run the registered side effects."""
        callbacks, self.post_commit = self.post_commit, []
        for callback in callbacks:
            callback()

    @property
    def texts(self) -> list[str]:
        return [d.payload["text"] for d in self.deliveries]

    @property
    def item_ids(self) -> list[str]:
        return [d.payload["item_id"] for d in self.deliveries]


class FakeResolver:
    """``getaddrinfo`` over a fixed table.

    ``FakeResolver({"api.example.test": ["127.0.0.1"]})`` answers that list on
    every call; a value that is a list of lists is a sequence of answers (the last
    one repeats): ``{"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]}``.
    IP literals resolve to themselves; other unknown names raise ``socket.gaierror``.
    """

    def __init__(self, table: dict[str, list[str] | list[list[str]]]) -> None:
        self._table = table
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __call__(
        self, host: str, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        with self._lock:
            answers = self._table.get(host)
            count = sum(1 for h in self.calls if h == host)
            self.calls.append(host)
        if answers is None and _is_ip_literal(host):
            answers = [host]  # like getaddrinfo: literals need no lookup
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if answers and isinstance(answers[0], list):
            answers = answers[min(count, len(answers) - 1)]
        out = []
        for ip in answers:
            if ":" in ip:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, int(port), 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, int(port))))
        return out


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class ConnectLog:
    """Context manager collecting ``(host, port)`` of every ``socket.connect``."""

    _active: list[ConnectLog] = []
    _installed = False
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.addresses: list[tuple[Any, ...]] = []

    def __enter__(self) -> ConnectLog:
        with ConnectLog._lock:
            if not ConnectLog._installed:
                sys.addaudithook(ConnectLog._hook)  # process-wide and permanent: install once
                ConnectLog._installed = True
            ConnectLog._active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with ConnectLog._lock:
            ConnectLog._active.remove(self)

    @staticmethod
    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and ConnectLog._active:
            address = args[1]
            for log in list(ConnectLog._active):
                log.addresses.append(tuple(address) if isinstance(address, tuple) else (address,))


def make_context(
    config: dict[str, Any],
    *,
    host: FakeHost | None = None,
    cursor: bytes | None = None,
    job_id: str = "job1",
    now: datetime = NOW,
    cancel: CancelToken | None = None,
) -> PollContext:
    return PollContext(
        job_id=job_id,
        agent_id="ana",
        kind="webhook_poll",
        config=config,
        cursor=cursor,
        now=now,
        interval_hint=timedelta(seconds=60),
        cancel=cancel or CancelToken(),
        host=host or FakeHost(),
    )
