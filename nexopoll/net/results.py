"""What :func:`nexopoll.net.http.fetch` gives back: its :class:`Response`, its error
classes (the table in :mod:`nexopoll.net.http`), and the deadline of one fetch.

All are re-exported by :mod:`nexopoll.net.http` and :mod:`nexopoll.net`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from nexopoll.core.contract import CancelToken
from nexopoll.core.errors import PermanentError, TransientError
from nexopoll.core.ssrf import BlockedAddress


class FetchError(TransientError):
    """The request failed on the network or the response was unreadable."""


class DeadlineExceededError(FetchError):
    """The total deadline over connect, headers and body passed."""


class ResponseTooLargeError(FetchError):
    """The body (declared, on the wire, or decoded) exceeds the byte cap."""


class BlockedURLError(PermanentError):
    """A URL (or a redirect target) resolves to an address the guard refuses."""

    def __init__(self, url: str, blocked: BlockedAddress) -> None:
        self.url = url
        self.host = blocked.host
        self.ip = blocked.ip
        self.reason = blocked.reason
        # a job's allow_private_networks lets it through (never a metadata address)
        self.private_opt_in = not blocked.reason.startswith("metadata")
        super().__init__(f"{url}: host resolves to {blocked.ip} ({blocked.reason}): refused")


class TooManyRedirectsError(PermanentError):
    """The chain of redirects is longer than ``max_redirects``."""


class RedirectRefusedError(PermanentError):
    """A request other than GET/HEAD was redirected to another origin.

    Its body (and whatever secrets it carries) is never re-sent elsewhere; a
    redirect within the origin is followed.
    """


@dataclass(frozen=True)
class Response:
    """A fully read response.

    Attributes:
        status: the final hop's status code.
        headers: read-only, case-insensitive view of the final hop's headers.
        body: the decoded body (``Content-Encoding`` removed), at most the cap.
        url: the final URL, after redirects.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


class _Budget:
    """Deadline plus cancel token for one fetch (implements ``transport.ReadBudget``)."""

    def __init__(self, deadline_secs: float, cancel: CancelToken | None, label: str) -> None:
        self.label = label
        self.deadline_secs = deadline_secs
        self._cancel = cancel
        self._deadline = time.monotonic() + deadline_secs

    def remaining(self) -> float:
        left = self._deadline - time.monotonic()
        token_left = self._cancel.remaining() if self._cancel is not None else None
        return left if token_left is None else min(left, token_left)

    def check(self) -> float:
        if self._cancel is not None:
            self._cancel.raise_if_cancelled()
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceededError(
                f"{self.label}: deadline of {self.deadline_secs:g} s exceeded"
            )
        return left
