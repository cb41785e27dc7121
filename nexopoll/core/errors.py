"""The three error classes a Poller may raise, and the one place that classifies them."""

from __future__ import annotations

import enum
from datetime import timedelta


class PollerError(Exception):
    """Base of every error a poller or the runtime raises on purpose."""


class ConfigError(PollerError):
    """The job's configuration is invalid.

    At load time the job is rejected (its siblings still load); at tick time the
    job is paused with the reason.
    """

    def __init__(self, reason: str, job: str | None = None, path: str | None = None) -> None:
        self.reason = reason
        self.job = job
        self.path = path
        where = ".".join(p for p in (f"jobs[{job}]" if job else "", path or "") if p)
        super().__init__(f"{where}: {reason}" if where else reason)


class TransientError(PollerError):
    """A failure worth retrying: counts toward the breaker, retried with backoff.

    ``retry_after`` carries a server's ``Retry-After`` hint when there was one.
    """

    def __init__(self, message: str, retry_after: timedelta | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(PollerError):
    """A failure that will not heal by itself: the job is paused and an alert is sent."""


class CredentialsMissingError(PermanentError):
    """The agent has no binding (or secret) for a channel the job needs."""


class ErrorClass(enum.Enum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    CONFIG = "config"


def classify(exc: BaseException) -> ErrorClass:
    """Map any exception raised by ``Poller.tick`` to its class.

    Anything that is not a :class:`PollerError` is transient: an unexpected bug
    must not pause a job, but the runtime logs it with its traceback.
    """
    if isinstance(exc, ConfigError):
        return ErrorClass.CONFIG
    if isinstance(exc, PermanentError):
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT
