"""Moved to :mod:`nexopoll.services.runs`; kept for the JSON API's import until it is
rewritten on the services alone."""

from nexopoll.services.runs import (
    MARK_PREFIX,
    RUN_NOW_TASK,
    QueueUnavailable,
    RunStatus,
    outcome_of,
    start,
    status,
    wait,
)

__all__ = [
    "MARK_PREFIX",
    "RUN_NOW_TASK",
    "QueueUnavailable",
    "RunStatus",
    "outcome_of",
    "start",
    "status",
    "wait",
]
