"""The seen-id ring of ``webhook_poll``: its cursor encoding, capacity and trimming.

The cursor is ``{"v": 1, "seen": [...]}``, oldest id first, with ``etag`` /
``last_modified`` beside it once an answer was fully delivered (conditional GET).
The ring covers the listing: see :func:`ring_capacity` and :func:`remember`.
"""

from __future__ import annotations

import hashlib
import json

from nexopoll.core.errors import PermanentError

MAX_ID_CHARS = 200
MAX_LISTING = 10_000
"""A listing with more items stops the job (``PermanentError``) instead of looping."""
CURSOR_VERSION = 1


def ring_capacity(seen_capacity: int, listed: int, held: int) -> int:
    """How many ids the ring may hold after this tick.

    At least ``seen_capacity`` and the ``listed`` ids of the current listing (at
    most ``MAX_LISTING``), and not less than the ``held`` ids it already has, up to
    ``max(seen_capacity, MAX_LISTING)``: a listing that shrinks for a while does
    not make the ring forget the ids it may list again.

    Examples:
        ``ring_capacity(1000, 1500, 0)`` → 1500; ``ring_capacity(1000, 550, 1500)``
        → 1500; ``ring_capacity(1000, 10, 50_000)`` → 10,000.
    """
    return max(seen_capacity, listed, min(held, max(seen_capacity, MAX_LISTING)))


def remember(
    seen: list[str], new_ids: list[str], capacity: int, keep: frozenset[str] = frozenset()
) -> list[str]:
    """Append ``new_ids`` to the ring and trim it to ``capacity``, oldest first.

    Entries in ``keep`` (the ids still in the listing) are never dropped; with
    ``capacity`` at least ``len(keep)`` there are always enough others to drop.
    """
    ring = seen + [seen_key(i) for i in new_ids]
    excess = len(ring) - capacity
    if excess <= 0:
        return ring
    kept: list[str] = []
    for key in ring:
        if excess > 0 and key not in keep:
            excess -= 1
            continue
        kept.append(key)
    return kept


def decode_cursor(raw: bytes | None) -> list[str]:
    """The seen-id ring stored in ``raw``; ``[]`` for a first run.

    Raises:
        PermanentError: the cursor is corrupt or has an unknown version
            (an operator reset re-baselines the job).
    """
    if raw is None:
        return []
    try:
        doc = json.loads(raw)
    except ValueError:
        raise PermanentError("webhook_poll cursor is not valid JSON; reset the job") from None
    version = doc.get("v") if isinstance(doc, dict) else None
    if version != CURSOR_VERSION:
        raise PermanentError(f"unsupported webhook_poll cursor version {version!r}; reset the job")
    seen = doc.get("seen")
    if not isinstance(seen, list) or not all(isinstance(s, str) for s in seen):
        raise PermanentError("webhook_poll cursor has no valid 'seen' list; reset the job")
    return seen


def decode_validators(raw: bytes | None) -> tuple[str | None, str | None]:
    """``(etag, last_modified)`` stored beside the ring for conditional GET, else Nones.

    A cursor written before they existed has neither; a malformed value is ignored
    (the next answer stores fresh ones).
    """
    if raw is None:
        return None, None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    etag, modified = doc.get("etag"), doc.get("last_modified")
    return (
        etag if isinstance(etag, str) else None,
        modified if isinstance(modified, str) else None,
    )


def encode_cursor(
    seen: list[str], etag: str | None = None, last_modified: str | None = None
) -> bytes:
    """``{"v": 1, "seen": [...]}``, plus ``etag`` / ``last_modified`` when stored."""
    doc: dict[str, object] = {"v": CURSOR_VERSION, "seen": seen}
    if etag:
        doc["etag"] = etag
    if last_modified:
        doc["last_modified"] = last_modified
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def seen_key(ident: str) -> str:
    if len(ident) <= MAX_ID_CHARS:
        return ident
    return "sha256:" + hashlib.sha256(ident.encode()).hexdigest()
