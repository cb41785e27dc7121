"""Built-in poller kinds, one module per kind (framework-free: no Django, Celery, redis).

``BUILTINS`` lists the classes the runtime registers at start-up; each is
instantiated without arguments.
"""

from __future__ import annotations

from nexopoll.core.contract import Poller

from .agent_turn import AgentTurnPoller
from .gmail import GmailPoller
from .google_calendar import GoogleCalendarPoller
from .rss import RssPoller
from .webhook_poll import WebhookPollPoller

BUILTINS: list[type[Poller]] = [
    WebhookPollPoller,
    GmailPoller,
    GoogleCalendarPoller,
    RssPoller,
    AgentTurnPoller,
]

__all__ = [
    "BUILTINS",
    "AgentTurnPoller",
    "GmailPoller",
    "GoogleCalendarPoller",
    "RssPoller",
    "WebhookPollPoller",
]
