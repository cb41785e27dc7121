"""What a poller hands the host at tick time, checked as the config is (pure).

``deliver`` / ``publish`` targets and payloads, and ``log`` lines: a recipient or a
log text with a control or line-separator character could forge log lines or
split a header; a payload value that is not JSON would fail at the commit, far
from the poller that made it. Each check raises :class:`ConfigError` naming the
field (``deliver.to``, ``payload.items[2].when``).
"""

from __future__ import annotations

import math
from typing import Any

from .errors import ConfigError
from .limits import CHANNEL_RE, MAX_RECIPIENT, is_name, must_match, unsafe_char

MAX_JSON_DEPTH = 64
MAX_LOG_MESSAGE = 2000
MAX_LOG_FIELDS = 32
MAX_LOG_FIELD_NAME = 64
MAX_LOG_VALUE = 500
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with every control, format and line-separator character escaped
    (``\\n`` → ``\\\\n``), cut to ``limit`` characters: safe on one log line.

    >>> printable("ok\\nFORGED line")
    'ok\\\\nFORGED line'
    """
    if unsafe_char(text) is not None:
        text = "".join(c if unsafe_char(c) is None else ascii(c)[1:-1] for c in text)
    return text if limit is None or len(text) <= limit else text[:limit] + "…"


def check_channel(channel: Any) -> str:
    if not is_name(CHANNEL_RE, channel):
        shown = printable(channel, 64) if isinstance(channel, str) else type(channel).__name__
        raise ConfigError(f"deliver.channel {shown!r}: {must_match('channel name', CHANNEL_RE)}")
    return channel


def check_recipient(to: Any, field: str = "deliver.to") -> str:
    """A recipient as the outbox keeps it: 1..500 characters, none unsafe (an int is
    written as a string, as in the config)."""
    if isinstance(to, int) and not isinstance(to, bool):
        to = str(to)
    if not isinstance(to, str):
        raise ConfigError(f"{field} must be a string, got {type(to).__name__}")
    if not 1 <= len(to) <= MAX_RECIPIENT:
        raise ConfigError(f"{field} must be 1..{MAX_RECIPIENT} characters, got {len(to)}")
    bad = unsafe_char(to)
    if bad is not None:
        raise ConfigError(f"{field} contains the control or format character {bad!a}")
    return to


def check_json(value: Any, path: str = "payload") -> None:
    """Raise ConfigError naming the first value under ``path`` that is not JSON.

    >>> from datetime import datetime
    >>> check_json({"text": "hi", "when": datetime(2026, 1, 1)})
    Traceback (most recent call last):
    ...
    nexopoll.core.errors.ConfigError: payload.when: datetime is not JSON
    """
    problem = _json_problem(value, path, 0)
    if problem is not None:
        raise ConfigError(problem)


def _json_problem(value: Any, path: str, depth: int) -> str | None:
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path}: string with a lone surrogate is not UTF-8 JSON"
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"{path}: {'NaN' if math.isnan(value) else 'Infinity'} is not JSON"
    if isinstance(value, dict | list | tuple) and depth >= MAX_JSON_DEPTH:
        return f"{path}: nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                shown = printable(repr(key), 64)
                return f"{path}: key {shown} is {type(key).__name__}, not a string"
            problem = _json_problem(item, f"{path}.{printable(key, 64)}", depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{i}]", depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{path}: {type(value).__name__} is not JSON"


def check_log(level: Any, message: Any, fields: Any) -> tuple[str, str, dict[str, str]]:
    """A plugin's ``log`` call: a known level, a one-line message of at most 2000
    characters, at most 32 fields named like config keys with one-line values of at
    most 500 characters. Returns (level, message, fields as strings)."""
    if level not in LOG_LEVELS:
        raise ConfigError(f"log.level must be one of {', '.join(LOG_LEVELS)}")
    text = _line("log.message", message, MAX_LOG_MESSAGE)
    if not isinstance(fields, dict):
        raise ConfigError("log.fields must be an object")
    if len(fields) > MAX_LOG_FIELDS:
        raise ConfigError(f"log.fields: {len(fields)} fields, at most {MAX_LOG_FIELDS}")
    out = {}
    for name, value in fields.items():
        if not isinstance(name, str) or not name.isidentifier() or len(name) > MAX_LOG_FIELD_NAME:
            shown = printable(str(name), 64)
            raise ConfigError(f"log.fields: {shown!r} is not a name (letters, digits, _)")
        if value is None or isinstance(value, bool | int | float):
            value = str(value)
        out[name] = _line(f"log.fields.{name}", value, MAX_LOG_VALUE)
    return level, text, out


def _line(field: str, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{field} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise ConfigError(f"{field} is {len(value)} characters, at most {limit}")
    bad = unsafe_char(value)
    if bad is not None:
        raise ConfigError(f"{field} contains the control or format character {bad!a}")
    return value
