"""The seen-id ring of ``webhook_poll``: its cursor, capacity and trimming.

The cursor is ``{"v": 1, "seen": [...]}``, oldest id first, with ``etag`` /
``last_modified`` beside it once an answer was fully delivered (conditional GET).
The ring (:class:`pollers._base.SeenRing`) covers the listing: see
:func:`ring_capacity` and :func:`remember`.
"""

from __future__ import annotations

from nexopoll.core.errors import PermanentError

from ._base import CursorCodec, SeenRing, covering_capacity, seen_key

__all__ = [
    "CODEC",
    "MAX_LISTING",
    "decode_cursor",
    "decode_validators",
    "encode_cursor",
    "remember",
    "ring_capacity",
    "seen_key",
]

MAX_LISTING = 10_000
"""A listing with more items stops the job (``PermanentError``) instead of looping."""
CODEC = CursorCodec("webhook_poll")


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
    return covering_capacity(seen_capacity, listed, held, MAX_LISTING)


def remember(
    seen: list[str], new_ids: list[str], capacity: int, keep: frozenset[str] = frozenset()
) -> list[str]:
    """Append ``new_ids`` to the ring and trim it to ``capacity``, oldest first.

    Entries in ``keep`` (the ids still in the listing) are never dropped; with
    ``capacity`` at least ``len(keep)`` there are always enough others to drop.
    """
    return list(SeenRing(capacity, tuple(seen)).remember(new_ids, keep=keep).keys)


def decode_cursor(raw: bytes | None) -> list[str]:
    """The seen-id ring stored in ``raw``; ``[]`` for a first run.

    Raises:
        PermanentError: the cursor is corrupt or has an unknown version
            (an operator reset re-baselines the job).
    """
    return list(CODEC.seen(CODEC.decode(raw), 0).keys)


def decode_validators(raw: bytes | None) -> tuple[str | None, str | None]:
    """``(etag, last_modified)`` stored beside the ring for conditional GET, else Nones.

    A cursor written before they existed has neither; a malformed value is ignored
    (the next answer stores fresh ones).
    """
    try:
        doc = CODEC.decode(raw) or {}
    except PermanentError:  # decode_cursor reports a bad cursor
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
    doc: dict[str, object] = {"seen": seen}
    if etag:
        doc["etag"] = etag
    if last_modified:
        doc["last_modified"] = last_modified
    return CODEC.encode(doc)
