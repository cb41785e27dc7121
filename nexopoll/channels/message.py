"""What a channel is given (``OutboundMessage``) and what it is (``Channel``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class OutboundMessage:
    delivery_id: str
    job_id: str
    agent: str
    channel: str
    recipient: str
    payload: dict[str, Any]
    attempt: int
    purpose: str = "item"  # item | alert | recovery | publish


class Channel(Protocol):
    name: str

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        """Send one message; raise TransientError to retry later, PermanentError to give up,
        ConfigError for a problem in the binding (the delivery is held, not dead)."""
