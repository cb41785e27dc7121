"""Keep secret values out of error messages, logs and the DB.

A secret is the value of any ``${VAR}`` a job's config or its agent's binding
references. Error text from a fetch can carry one, whole or in part and
normalised: a webhook URL whose host was lower-cased, whose query was dropped,
whose path was percent-decoded or re-encoded, or split by urllib3 into
``host='…', port=…`` and ``url: /path``. Every message the runtime stores or
logs passes through :func:`redact` first.

The rule :func:`redact` enforces: no run of :data:`WINDOW` or more characters
of any secret, or of one of its normalised forms (:func:`variants`), survives,
compared case-insensitively and also after percent-decoding the text. Secrets
shorter than :data:`WINDOW` are masked where they occur whole.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

from .envrefs import env_refs

MIN_SECRET_CHARS = 4  # shorter values would blank out ordinary words
WINDOW = 8  # no run this long of a secret (in any normalisation) survives
MASK = "***"
_SAFE_URL = ":/?#[]@!$&'()*+,;=~"  # what requests leaves unencoded in a URL


def secret_values(value: Any, env: Mapping[str, str]) -> frozenset[str]:
    """The values of the ``${VAR}`` and ``${file:/path}`` references in ``value`` (long
    enough to mask); ``env`` answers ``file:/path`` names (see ``runtime/secretenv.py``)."""
    return frozenset(
        env[name] for name in env_refs(value) if len(env.get(name, "")) >= MIN_SECRET_CHARS
    )


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every run of a secret of :data:`WINDOW` or more characters masked.

    >>> redact("GET /bot12345:abcdefgh/getUpdates failed", {"12345:abcdefgh"})
    'GET /bot***/getUpdates failed'
    >>> redact("url: /services/T0/B0/XyZ (host='hooks.example.com')",
    ...        {"https://Hooks.Example.com/services/T0/B0/XyZ?k=1"})
    "url: *** (host='***')"
    """
    if not text:
        return text
    matcher = _matcher(secrets if isinstance(secrets, frozenset) else frozenset(secrets))
    return matcher.redact(text) if matcher is not None else text


def variants(secret: str) -> set[str]:
    """Lower-cased forms a secret may take in an error text (each a whole string)."""
    forms = {secret, unquote(secret), unquote_plus(secret), unquote(unquote(secret))}
    for form in list(forms):
        forms |= {quote(form, safe=""), quote(form, safe="/"), quote(form, safe=_SAFE_URL),
                  quote_plus(form), json.dumps(form)[1:-1], repr(form)[1:-1],
                  html.escape(form)}  # fmt: skip
        forms |= _url_parts(form)
    return {f.lower() for f in forms if f}


def _url_parts(value: str) -> set[str]:
    """The IDNA (punycode) spelling of a URL's host, which the URL does not contain."""
    try:
        host = urlsplit(value.strip()).hostname
        return {host.encode("idna").decode("ascii")} if host else set()
    except (ValueError, UnicodeError):
        return set()


class _Matcher:
    """Masks, for each text position, the longest run found in any variant (if long enough)."""

    def __init__(self, long_forms: set[str], short_forms: set[str]) -> None:
        self.haystack = "\x00".join(sorted(long_forms))
        self.grams = {f[i : i + WINDOW] for f in long_forms for i in range(len(f) - WINDOW + 1)}
        self.short = sorted(short_forms, key=len, reverse=True)

    def redact(self, text: str) -> str:
        masked = bytearray(len(text))
        span = range(len(text))
        self._mark(text.lower(), span, span, masked)
        if "%" in text:  # also compare the percent-decoded text, mapped back to positions
            decoded, starts, ends = _percent_decoded(text)
            self._mark(decoded.lower(), starts, ends, masked)
        return _apply(text, masked)

    def _mark(self, low: str, starts, ends, masked: bytearray) -> None:
        """Mark in ``masked`` the original chars (``starts[i]..ends[i]``) of each run found."""
        n, reach = len(low), 0
        for i in range(n):
            if self.grams and low[i : i + WINDOW] in self.grams:
                end = max(i + WINDOW, reach)  # what matched from i-1 also matches from i
                while end < n and low[end] != "\x00" and low[i : end + 1] in self.haystack:
                    end += 1
                reach = end
                masked[starts[i] : ends[end - 1] + 1] = b"\x01" * (ends[end - 1] + 1 - starts[i])
            for form in self.short:
                if low.startswith(form, i):
                    last = ends[i + len(form) - 1]
                    masked[starts[i] : last + 1] = b"\x01" * (last + 1 - starts[i])
                    break


def _percent_decoded(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` with each ASCII ``%XX`` decoded, and where each char starts and ends in ``text``."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        code = _hex(text[i + 1 : i + 3]) if text[i] == "%" else None
        if code is not None and code < 0x80:
            out.append(chr(code))
            starts.append(i)
            ends.append(i + 2)
            i += 3
        else:
            out.append(text[i])
            starts.append(i)
            ends.append(i)
            i += 1
    return "".join(out), starts, ends


def _hex(s: str) -> int | None:
    if len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s):
        return int(s, 16)
    return None


def _apply(text: str, masked: bytearray) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if masked[i]:
            while i < n and masked[i]:
                i += 1
            out.append(MASK)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _matcher(secrets: frozenset[str]) -> _Matcher | None:
    long_forms: set[str] = set()
    short_forms: set[str] = set()
    for secret in secrets:
        if not secret:
            continue
        for form in variants(secret):
            if len(form) >= WINDOW:
                long_forms.add(form)
            elif len(form) >= MIN_SECRET_CHARS:
                short_forms.add(form)
    if not long_forms and not short_forms:
        return None
    return _Matcher(long_forms, short_forms)
