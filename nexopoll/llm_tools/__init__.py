"""LLM control tools: ``pollers_list``, ``pollers_show``, ``pollers_run``,
``pollers_pause``, ``pollers_resume``, ``pollers_reset`` and every poller's
``custom_tools()``, as JSON-schema function specs with one dispatcher.

    >>> from nexopoll.llm_tools import openai_tools, call_tool
    >>> tools = openai_tools(agent="ana")          # pass to the model
    >>> call_tool("pollers_list", {}, agent="ana")  # run what the model asked for

There is no create, edit or delete: operators own pollers.yaml. An agent sees
and controls only its own jobs (``NEXOPOLL_TOOLS_ALL_JOBS=true`` lifts that).
``manage.py pollers mcp [--agent NAME]`` serves the same tools over MCP (stdio).
"""

from __future__ import annotations

from typing import Any

from .dispatch import DATA_NOTICE, ToolError, call_tool, redact_tree, tool_specs
from .specs import anthropic_shape, openai_shape


def openai_tools(*, agent: str | None = None) -> list[dict[str, Any]]:
    return [openai_shape(s) for s in tool_specs(agent=agent)]


def anthropic_tools(*, agent: str | None = None) -> list[dict[str, Any]]:
    return [anthropic_shape(s) for s in tool_specs(agent=agent)]


__all__ = [
    "DATA_NOTICE",
    "ToolError",
    "anthropic_tools",
    "call_tool",
    "openai_tools",
    "redact_tree",
    "tool_specs",
]
