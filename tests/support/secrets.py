"""Assertions for the redaction rule: no run of 8+ characters of a secret, in any
normalisation (case-folded, percent-decoded or -encoded), appears in a text."""

from __future__ import annotations

from urllib.parse import quote, unquote

WINDOW = 8


def windows(secret: str) -> set[str]:
    forms = {secret, unquote(secret), quote(secret, safe=""), quote(secret, safe="/")}
    return {f.lower()[i : i + WINDOW] for f in forms for i in range(max(len(f) - WINDOW + 1, 0))}


def leaks(text: str, *secrets: str) -> list[str]:
    """The secret windows found in ``text`` (also after percent-decoding it)."""
    low = text.lower()
    decoded = unquote(text).lower()
    return sorted({w for s in secrets for w in windows(s) if w in low or w in decoded})


def assert_no_secret(text: str, *secrets: str) -> None:
    found = leaks(text, *secrets)
    assert not found, f"secret fragments {found[:5]} leaked in: {text[:600]!r}"
