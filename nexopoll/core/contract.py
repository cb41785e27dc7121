"""The Poller contract: what a poll module implements and what the runtime gives it.

A Poller only says what to fetch, what to deliver and what cursor to keep; the
runtime owns scheduling, leases, retries, the breaker, persistence and delivery.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError, TransientError
from .limits import KIND_RE


class Cancelled(TransientError):
    """Raised by :meth:`CancelToken.raise_if_cancelled` once the tick must stop."""


class CancelToken:
    """Tells a tick to stop: set on shutdown, reload or when its deadline passes.

    ``clock`` is injectable so tests need not sleep; it returns monotonic seconds.
    """

    def __init__(
        self, deadline: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._event = threading.Event()
        self._deadline = deadline
        self._clock = clock
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), or None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._clock())

    @property
    def cancelled(self) -> bool:
        if self._event.is_set():
            return True
        if self._deadline is not None and self._clock() >= self._deadline:
            self.reason = self.reason or "tick deadline exceeded"
            return True
        return False

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise Cancelled(self.reason or "cancelled")


@runtime_checkable
class PollerHost(Protocol):
    """The poller's single egress. Pollers never touch Redis, the DB or Celery.

    ``deliver`` only records the delivery: nothing is sent before the tick commits.
    ``after_commit`` registers a side effect on the source (marking mail read) that
    runs only once the tick's cursor and deliveries are committed: never for a
    failed, fenced or dry-run tick. A callback that raises is logged, not retried.
    """

    def deliver(self, channel: str, recipient: str, payload: dict[str, Any]) -> None: ...

    def publish(self, topic: str, payload: bytes) -> None: ...

    def credentials_get(self, channel: str) -> dict[str, Any]: ...

    def log(self, level: str, message: str, **fields: Any) -> None: ...

    def metric_inc(self, name: str, **labels: str) -> None: ...

    def llm_invoke(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def after_commit(self, callback: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class PollContext:
    job_id: str
    agent_id: str
    kind: str
    config: dict[str, Any]
    cursor: bytes | None
    now: datetime
    interval_hint: timedelta
    cancel: CancelToken
    host: PollerHost


@dataclass
class TickAck:
    """What a successful tick returns.

    ``next_cursor=None`` keeps the current cursor; resetting is an operator verb.
    ``next_interval_hint`` asks the runtime to wait at least that long before the
    next tick (``Retry-After``, ``Cache-Control``, a feed's ``<ttl>``).
    ``notice`` tells operators something they must know although the tick succeeded
    (an automatic re-baseline that skipped changes, say): it is stored with its time on
    the job's state and shown beside ``last_error`` in ``list``, the admin and the API.
    """

    next_cursor: bytes | None = None
    next_interval_hint: timedelta | None = None
    items_seen: int = 0
    items_dispatched: int = 0
    notice: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A poller-specific LLM tool: a JSON-schema'd function the agent may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[dict[str, Any]], Any] = field(compare=False)


class Poller:
    """Base class for poll modules (any object with these attributes also works)."""

    kind: str = ""
    description: str = ""

    def validate(self, config: dict[str, Any]) -> None:
        """Raise :class:`ConfigError` when ``config`` is not valid for this kind."""

    def tick(self, ctx: PollContext) -> TickAck:
        raise NotImplementedError

    def custom_tools(self) -> list[ToolSpec]:
        return []


def check_kind(kind: object) -> str:
    """Return ``kind`` if it is a valid poller kind name, else raise ConfigError."""
    if not isinstance(kind, str) or not KIND_RE.fullmatch(kind):
        raise ConfigError(f"invalid poller kind {kind!r}: must match {KIND_RE.pattern}")
    return kind
