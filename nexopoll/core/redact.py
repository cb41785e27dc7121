"""Keep secret values out of error messages, logs and the DB.

A secret is the value of any ``${VAR}`` a job's config or its agent's binding
references. Error text from a fetch can carry one, whole or in part and
normalised: a webhook URL whose host was lower-cased, whose query was dropped,
whose path was percent-decoded or re-encoded, or split by urllib3 into
``host='…', port=…`` and ``url: /path``. Every message the runtime stores or
logs passes through :func:`redact` first.

The rule :func:`redact` enforces: no run of :data:`WINDOW` or more characters
of any secret, or of one of its normalised forms (:func:`variants`: percent-,
form-, JSON-, repr- and HTML-escaped, base64 at any alignment, the host in
punycode), survives, compared case-insensitively, in the text as written and in
every decoded reading of it (:func:`_views`: escapes undone wherever they sit,
wholly or partly, ``S3cr%65tP4t%68Part42`` read as ``S3cretP4thPart42``, twice
for double encoding, ``+`` as a space). Secrets shorter than :data:`WINDOW` are
masked where they occur whole.
"""

from __future__ import annotations

import base64
import functools
import html
import html.entities
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

from .envrefs import env_refs

MIN_SECRET_CHARS = 4  # shorter values would blank out ordinary words
WINDOW = 8  # no run this long of a secret (in any normalisation) survives
MASK = "***"
PUBLIC_VARS = "NEXOPOLL_PUBLIC_VARS"  # the variable listing the public ones
ALWAYS_PUBLIC = frozenset({"NEXOPOLL_DEMO_BASE"})  # the demo jobs' base URL
_SAFE_URL = ":/?#[]@!$&'()*+,;=~"  # what requests leaves unencoded in a URL


def secret_values(value: Any, env: Mapping[str, str]) -> frozenset[str]:
    """The values of the ``${VAR}`` and ``${file:/path}`` references in ``value`` (long
    enough to mask); ``env`` answers ``file:/path`` names (see ``runtime/secretenv.py``).
    Variables declared public (:func:`public_names`) are not secrets."""
    public = public_names(env)
    return frozenset(
        env[name]
        for name in env_refs(value)
        if name not in public and len(env.get(name, "")) >= MIN_SECRET_CHARS
    )


def public_names(env: Mapping[str, str]) -> frozenset[str]:
    """Variables whose values are not secret (base URLs, …): :data:`ALWAYS_PUBLIC` and
    the names listed in ``env[PUBLIC_VARS]`` (comma- or space-separated). A
    ``${file:…}`` reference is never public."""
    listed = re.split(r"[\s,]+", env.get(PUBLIC_VARS, "") or "")
    return ALWAYS_PUBLIC | frozenset(n for n in listed if n and not n.startswith("file:"))


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
        forms |= {
            quote(form, safe=""),
            quote(form, safe="/"),
            quote(form, safe=_SAFE_URL),
            quote_plus(form),
            json.dumps(form)[1:-1],
            repr(form)[1:-1],
            html.escape(form),
        }
        forms |= _url_parts(form)
    forms |= _base64_forms(secret)
    return {_lower(f) for f in forms if f}


def _base64_forms(secret: str) -> set[str]:
    """The base64 characters that spell ``secret`` wherever it sits in encoded data
    (``Authorization: Basic`` of ``user:secret``): one form per alignment, standard
    and URL-safe, without the edge characters its neighbours share."""
    raw = secret.encode("utf-8")
    forms: set[str] = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii")
        first, end = -(-8 * shift // 6), (8 * (shift + len(raw))) // 6
        middle = encoded[first:end]
        forms |= {middle, middle.replace("+", "-").replace("/", "_")}
    return forms


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
        self._mark(_lower(text), span, span, masked)
        for decoded, starts, ends in _views(text):  # mapped back to positions in text
            self._mark(_lower(decoded), starts, ends, masked)
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


_ESCAPES = re.compile(
    r"(?:%[0-9a-fA-F]{2})+"  # percent-encoding, a run (UTF-8 sequences span several)
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a JSON surrogate pair
    r"|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\x[0-9a-fA-F]{2}"  # JSON / Python escapes
    r"|&#[0-9]{1,7};|&#[xX][0-9a-fA-F]{1,6};|&[A-Za-z][A-Za-z0-9]{1,31};"  # HTML references
)
_ESCAPE_CHARS = frozenset("%\\&")
MAX_UNESCAPE_ROUNDS = 3  # a secret encoded twice (%2565) or escaped inside an escape


def _views(text: str) -> Iterator[tuple[str, Sequence[int], Sequence[int]]]:
    """Decoded readings of ``text``, each with where its chars start and end in ``text``.

    Every escape a URL, a log line or an error text may hold is undone, partial or
    whole, upper- or lower-case hex: percent-encoding (UTF-8 aware), JSON ``\\u``
    and Python ``\\x`` escapes, HTML character references; again on the result
    (double encoding); and ``+`` read as a space (form encoding).
    """
    current: tuple[str, Sequence[int], Sequence[int]] = (text, range(len(text)), range(len(text)))
    for _ in range(MAX_UNESCAPE_ROUNDS):
        if not _ESCAPE_CHARS.intersection(current[0]):
            break
        decoded, starts, ends = _unescape(current[0])
        if decoded == current[0]:
            break
        current = (decoded, [current[1][a] for a in starts], [current[2][b] for b in ends])
        yield current
    decoded, starts, ends = current
    if "+" in decoded:  # only a "+" written as such, not one decoded from %2B
        yield (
            "".join(" " if c == "+" and starts[i] == ends[i] else c for i, c in enumerate(decoded)),
            starts,
            ends,
        )


def _unescape(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` with one layer of escapes undone, and each char's first and last source index."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in _ESCAPES.finditer(text):
        for i in range(pos, m.start()):
            out.append(text[i])
            starts.append(i)
            ends.append(i)
        for char, a, b in _decode_escape(m.group(), m.start()):
            out.append(char)
            starts.append(a)
            ends.append(b)
        pos = m.end()
    for i in range(pos, len(text)):
        out.append(text[i])
        starts.append(i)
        ends.append(i)
    return "".join(out), starts, ends


def _decode_escape(esc: str, at: int) -> Iterator[tuple[str, int, int]]:
    """``(char, first, last)`` source indexes for the chars one escape stands for."""
    last = at + len(esc) - 1
    if esc[0] == "%":
        yield from _percent_run(esc, at)
    elif esc[0] == "&":
        if esc[1] == "#":
            code = int(esc[3:-1], 16) if esc[2] in "xX" else int(esc[2:-1])
            text = chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else esc
        else:
            text = html.entities.html5.get(esc[1:], esc)
        yield from ((c, at, last) for c in text) if text != esc else _literal(esc, at)
    elif len(esc) == 12:  # a surrogate pair
        high, low = int(esc[2:6], 16), int(esc[8:12], 16)
        yield chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), at, last
    else:
        code = int(esc[2:], 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            yield from _literal(esc, at)
        else:
            yield chr(code), at, last


def _percent_run(run: str, at: int) -> Iterator[tuple[str, int, int]]:
    """A run of ``%XX``: UTF-8 sequences as one char each, other bytes < 0x80 as chars."""
    data = bytes(int(run[i + 1 : i + 3], 16) for i in range(0, len(run), 3))
    i = 0
    while i < len(data):
        byte = data[i]
        size = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
        try:
            char = data[i : i + size].decode("utf-8") if byte >= 0x80 else chr(byte)
        except UnicodeDecodeError:
            char = ""
        if len(char) == 1:
            yield char, at + 3 * i, at + 3 * (i + size) - 1
            i += size
        else:  # not UTF-8: the %XX stays as written
            yield from _literal(run[3 * i : 3 * i + 3], at + 3 * i)
            i += 1


def _literal(text: str, at: int) -> Iterator[tuple[str, int, int]]:
    return ((c, at + k, at + k) for k, c in enumerate(text))


def _lower(text: str) -> str:
    """``text.lower()``, one char for one (a few chars lower to two: kept as they are)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


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
