"""The poller kinds as operators reach them: each kind's own tools (``custom_tools``,
callable on one of its jobs) and the subprocess plugins' state."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from nexopoll.models import PollJob
from nexopoll.plugins.status import problems, rows
from nexopoll.runtime.host import call_job_tool
from nexopoll.runtime.redis import get_redis
from nexopoll.runtime.registry import builtin_sources, get_registry


def jobs_of(agent: str | None) -> Any:
    """The jobs ``agent`` may reach (None: every job), as a ``PollJob`` queryset."""
    jobs = PollJob.objects.all()
    return jobs if agent is None else jobs.filter(agent=agent)


def custom_tools() -> list[tuple[str, Any]]:
    """``(kind, ToolSpec)`` for every tool a registered kind offers, by kind."""
    registry = get_registry()
    return [
        (k, spec) for k in sorted(registry.validators()) for spec in registry.get(k).custom_tools()
    ]


def call_custom_tool(job_id: str, name: str, args: dict[str, Any]) -> Any:
    """Run the job's kind's tool ``name`` on it (the result is the poller's: mask it)."""
    return call_job_tool(job_id, name, args)


def plugin_rows() -> list[dict[str, Any]]:
    """Each plugin manifest in ``NEXOPOLL_PLUGINS_DIR`` with its kinds and live state."""
    return rows(settings.NEXOPOLL_PLUGINS_DIR, builtin_sources(), get_redis())


def plugin_problems() -> list[str]:
    """What is wrong with the plugin manifests (none: all valid)."""
    return problems(settings.NEXOPOLL_PLUGINS_DIR, builtin_sources())
