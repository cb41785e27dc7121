"""The six built-in tools' JSON schemas, and the shapes LLM APIs want them in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
JOB_ID = {
    "type": "string",
    "pattern": JOB_ID_PATTERN,
    "maxLength": 100,
    "description": "the job's id, exactly as pollers_list shows it",
}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any] = field(compare=False)
    kind: str | None = None  # a poller kind's custom tool: its jobs only

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


ONE_JOB = _object({"id": JOB_ID}, ("id",))

BUILTIN_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "pollers_list": (
        "List the poll jobs you may see, with their status (paged by job id).",
        _object(
            {
                "kind": {"type": "string", "maxLength": 64},
                "status": {"enum": ["ok", "transient", "permanent", "skipped", "never"]},
                "paused": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "after": {**JOB_ID, "description": "next_after of the previous page"},
            }
        ),
    ),
    "pollers_show": (
        "Inspect one job: schedule, state, last error, cursor and config (secrets masked).",
        ONE_JOB,
    ),
    "pollers_run": (
        "Tick one job now, out of band. dry_run=true runs the poller and commits nothing.",
        _object({"id": JOB_ID, "dry_run": {"type": "boolean", "default": False}}, ("id",)),
    ),
    "pollers_pause": ("Pause one job (it keeps its state and cursor).", ONE_JOB),
    "pollers_resume": ("Resume one paused job (errors and breaker cleared).", ONE_JOB),
    "pollers_reset": (
        "Ask to reset one job: wipes its cursor and errors (destructive). A human operator "
        "must confirm; the tool never resets on its own say-so.",
        ONE_JOB,
    ),
}


def openai_shape(spec: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's function-calling shape (Chat Completions ``tools``)."""
    return {"type": "function", "function": dict(spec)}


def anthropic_shape(spec: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's tool shape (Messages API ``tools``)."""
    return {
        "name": spec["name"],
        "description": spec["description"],
        "input_schema": spec["parameters"],
    }
