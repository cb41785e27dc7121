"""Lengths and name patterns shared by the DB columns and the config validation (pure).

``nexopoll.models`` takes its ``max_length`` values from here and the loader checks
every stored string against the same numbers, so a definition that loads is one the
DB can hold (PostgreSQL refuses a string longer than its column; SQLite would not).

Every pattern is ASCII-only and meant for ``fullmatch``: ``$`` alone would let a
trailing newline through (``"evil\\n"``).
"""

from __future__ import annotations

import re
import unicodedata

MAX_JOB_ID = 100
MAX_AGENT_ID = 100
MAX_KIND = 64
MAX_CHANNEL = 64
MAX_RECIPIENT = 500
MAX_HASH = 64  # a sha256 hex digest
MAX_STATUS = 16  # tick status, delivery status and purpose labels
MAX_BINDING_KEY = 64

JOB_ID_RE = re.compile(rf"^[a-z0-9][a-z0-9_.-]{{0,{MAX_JOB_ID - 1}}}$", re.ASCII)
AGENT_ID_RE = re.compile(rf"^[a-z0-9][a-z0-9_.-]{{0,{MAX_AGENT_ID - 1}}}$", re.ASCII)
CHANNEL_RE = re.compile(rf"^[a-z][a-z0-9_]{{0,{MAX_CHANNEL - 1}}}$", re.ASCII)
KIND_RE = re.compile(rf"^[a-z][a-z0-9_]{{1,{MAX_KIND - 1}}}$", re.ASCII)
BINDING_KEY_RE = re.compile(rf"^[A-Za-z_][A-Za-z0-9_-]{{0,{MAX_BINDING_KEY - 1}}}$", re.ASCII)

# Control (Cc: \x00-\x1f, \x7f, \x85…), format (Cf: bidi overrides, zero-width),
# surrogates and the line/paragraph separators (\u2028, \u2029): each can split or
# disguise a log line.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def is_name(pattern: re.Pattern[str], value: object) -> bool:
    """True if ``value`` is a string that ``pattern`` matches as a whole."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def unsafe_char(text: str) -> str | None:
    """The first control, format or line-separator character in ``text``, if any.

    >>> unsafe_char("ops@example.com")
    >>> unsafe_char("ops\\u2028evil")
    '\\u2028'
    """
    for char in text:
        if unicodedata.category(char) in _UNSAFE_CATEGORIES:
            return char
    return None


def must_match(what: str, pattern: re.Pattern[str]) -> str:
    """The message for a name that does not match ``pattern``."""
    return f"invalid {what} (must match {pattern.pattern})"
