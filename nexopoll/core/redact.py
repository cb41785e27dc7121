"""Keep secret values out of error messages, logs and the DB.

A secret is the value of any ``${VAR}`` a job's config or its agent's binding
references. Error text from a fetch can carry one (a token in a URL path, say);
every message the runtime stores or logs passes through :func:`redact` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .envrefs import env_refs

MIN_SECRET_CHARS = 4  # shorter values would blank out ordinary words
MASK = "***"


def secret_values(value: Any, env: Mapping[str, str]) -> frozenset[str]:
    """The values of the environment variables ``value`` references (long enough to mask)."""
    return frozenset(
        env[name] for name in env_refs(value) if len(env.get(name, "")) >= MIN_SECRET_CHARS
    )


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``***`` (longest first).

    >>> redact("GET /bot12345:abc/getUpdates failed", {"12345:abc"})
    'GET /bot***/getUpdates failed'
    """
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
