"""Make a value fit for the DB's text and JSON columns (pure).

PostgreSQL refuses U+0000 in ``text`` and ``jsonb`` and a lone surrogate in
``jsonb``, and ``jsonb`` refuses ``NaN`` and ``Infinity``; SQLite takes all of them. An
item from a feed (``&#0;``) or a JSON endpoint (``"\\u0000"``) may carry any of them,
and one such item used to fail the commit of every item of its tick. So what a tick
stores is passed through :func:`storable` first: NUL characters are removed, a lone
surrogate becomes U+FFFD and a non-finite float becomes ``null``, in strings and in
mapping keys alike, on both databases (the stored data does not depend on the backend).
"""

from __future__ import annotations

import math
import re
from typing import Any

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` without NUL characters, with lone surrogates replaced by U+FFFD.

    >>> storable_text("a\\x00b")
    'ab'
    >>> storable_text("x\\ud800y")
    'x\\ufffdy'
    """
    if _BAD_CHARS.search(text) is None:
        return text
    return _BAD_CHARS.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


def storable(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, scalars) made storable; unchanged parts are
    returned as they are (no copy when nothing needs fixing)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        fixed = {
            storable_text(str(k)) if isinstance(k, str) else k: storable(v)
            for k, v in value.items()
        }
        same = len(fixed) == len(value) and all(
            a is b and c is d for (a, c), (b, d) in zip(value.items(), fixed.items(), strict=True)
        )
        return value if same else fixed
    if isinstance(value, list | tuple):
        items = [storable(v) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else items
    return value
