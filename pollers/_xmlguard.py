"""Make fetched XML safe to hand to feedparser (pure: bytes in, bytes out).

feedparser blocks external entities and billion laughs, but it keeps "safe"
internal entities (a literal value, no nested reference) and expands them: a
70 KB feed declaring one 30 KB entity and referencing it 13,000 times grows to
about 1 GB. So a document that declares anything in a DTD is refused before any
parser sees it:

1. **Decode here, once.** The encoding comes from a BOM (UTF-8, UTF-16 LE/BE,
   UTF-32 LE/BE), else the NUL pattern of the first characters (UTF-16/32
   without a BOM) or ``<?xm`` in EBCDIC, else
   the XML declaration, else the HTTP ``charset``, else UTF-8 (windows-1252 when
   that fails).
2. **Scan the text.** ``<!ENTITY`` (any case, any spacing) and a ``<!DOCTYPE``
   with an internal subset (a ``[`` outside quotes) are refused anywhere before
   the root element — including after junk, inside comments or behind a fake
   root inside a comment, where feedparser's own prolog regexes look — and
   anywhere after it except inside CDATA sections (an article quoting XML).
   A plain DOCTYPE such as RSS 0.91's Netscape one passes.
3. **Re-encode as UTF-8** behind ``<?xml version="1.0" encoding="utf-8"?>``: the
   parser then reads exactly the text that was scanned, so no encoding trick
   (UTF-7, UTF-16 without BOM, a lying declaration) can show it something else.
"""

from __future__ import annotations

import codecs
import re

from nexopoll.core.errors import PermanentError

XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>'

_BOMS = (
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)
# Without a BOM, the NUL pattern of the first two ASCII characters (XML 1.0, appendix F,
# generalised from "<?" to any character) tells UTF-32 and UTF-16 and their byte order.
_WIDE_PATTERNS = (
    ((0, 0, 0, 1), "utf-32-be"),
    ((1, 0, 0, 0), "utf-32-le"),
    ((0, 1, 0, 1), "utf-16-be"),
    ((1, 0, 1, 0), "utf-16-le"),
)
_EBCDIC = b"\x4c\x6f\xa7\x94"  # "<?xm" in cp037
_WIDE = ("utf-16", "utf-32", "utf_16", "utf_32")
_DECL_ENCODING = re.compile(
    rb"""^\s*<\?xml\s[^>]{0,200}?\bencoding\s*=\s*["']([A-Za-z0-9._:-]{1,40})"""
)
_DECL = re.compile(r"^\s*<\?xml\s[^>]{0,400}>")
_DANGER = re.compile(r"<!\s*(ENTITY|DOCTYPE)", re.IGNORECASE)
_DECL_SPECIAL = re.compile(r"[\"'\[\]>]")
MAX_DOCTYPE_CHARS = 4096
MAX_PROLOG_PARTS = 10_000
_PROLOG_PART = re.compile(r"<[?!A-Za-z_:\u00c0-\uffff]")  # a "<" that is not junk text
_FEEDPARSER_HEAD = re.compile(r"<[A-Za-z0-9_]")  # feedparser's own end-of-prolog guess


class HostileFeedError(PermanentError):
    """The document declares entities or a DTD internal subset: refused unparsed."""


def sniff_encoding(body: bytes, http_charset: str | None = None) -> tuple[str, int]:
    """``(python codec name, bytes to skip)`` for ``body`` (see the module docstring)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    if len(body) >= 4:
        shape = tuple(int(b != 0) for b in body[:4])
        for pattern, name in _WIDE_PATTERNS:
            if shape == pattern:
                return name, 0
    if body.startswith(_EBCDIC):
        return "cp037", 0
    match = _DECL_ENCODING.match(body[:512])
    for candidate in (match.group(1).decode("ascii") if match else None, http_charset):
        name = _text_codec(candidate)
        if name and not name.startswith(_WIDE):  # wide encodings need a BOM or marker
            return name, 0
    return "utf-8", 0


def _text_codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        info = codecs.lookup(label.strip())
    except (LookupError, ValueError):
        return None
    # base64, zlib, rot13 … are codecs but not text encodings.
    return info.name if getattr(info, "_is_text_encoding", True) else None


def decode(body: bytes, http_charset: str | None = None) -> str:
    """The document as text, BOM removed; never raises on bad bytes."""
    name, skip = sniff_encoding(body, http_charset)
    data = body[skip:]
    try:
        text = data.decode(name)
    except (UnicodeError, LookupError):
        text = data.decode("windows-1252" if name == "utf-8" else name, errors="replace")
    return text.removeprefix("\ufeff")


def check(text: str) -> None:
    """Refuse entity declarations and DTD internal subsets (see the module docstring).

    Linear in the document's length, whatever it holds.

    Raises:
        HostileFeedError: naming what was found.
    """
    root = root_start(text)
    fp_head = _FEEDPARSER_HEAD.search(text)
    raw_until = max(root, fp_head.end() if fp_head else len(text))
    spans = _cdata_spans(text, root)
    span = 0
    for match in _DANGER.finditer(text):
        pos = match.start()
        while span < len(spans) and spans[span][1] <= pos:
            span += 1
        if pos >= raw_until and span < len(spans) and spans[span][0] < pos:
            continue  # inside a CDATA section of the document's body: text, not markup
        if match.group(1).upper() == "ENTITY":
            raise HostileFeedError(
                "feed refused: it declares an XML entity (<!ENTITY>), which can expand "
                "without bound (billion laughs, quadratic blow-up, external entities)"
            )
        if _has_internal_subset(text, match.end()):
            raise HostileFeedError(
                "feed refused: its <!DOCTYPE> has an internal subset ([...]) or does not "
                f"close within {MAX_DOCTYPE_CHARS} characters; only a plain DOCTYPE is accepted"
            )


def root_start(text: str) -> int:
    """Index of the root element's ``<`` by the XML prolog grammar, or ``len(text)``.

    Whitespace, ``<?…?>``, ``<!--…-->`` and ``<!…>`` declarations are skipped;
    stray text (a PHP warning, say) is skipped up to the next ``<``.

    Raises:
        HostileFeedError: more than :data:`MAX_PROLOG_PARTS` parts before the root.
    """
    pos, n = 0, len(text)
    for _ in range(MAX_PROLOG_PARTS):
        found = _PROLOG_PART.search(text, pos)
        if found is None:
            return n
        lt = found.start()
        if text.startswith("<?", lt):
            end = text.find("?>", lt + 2)
            pos = n if end < 0 else end + 2
        elif text.startswith("<!--", lt):
            end = text.find("-->", lt + 4)
            pos = n if end < 0 else end + 3
        elif text.startswith("<!", lt):
            pos = _declaration_end(text, lt + 2)
        else:
            return lt
        if pos >= n:
            return n
    raise HostileFeedError(
        f"feed refused: more than {MAX_PROLOG_PARTS} parts before the root element"
    )


def _declaration_end(text: str, pos: int) -> int:
    """Index just past the ``>`` closing a ``<!…>`` declaration (quotes and ``[]`` aware)."""
    depth, n = 0, len(text)
    while pos < n:
        match = _DECL_SPECIAL.search(text, pos)
        if match is None:
            return n
        ch, pos = match.group(), match.end()
        if ch in "\"'":
            close = text.find(ch, pos)
            pos = n if close < 0 else close + 1
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif depth == 0:  # ">"
            return pos
    return n


def _has_internal_subset(text: str, pos: int) -> bool:
    """True if the DOCTYPE starting before ``pos`` opens ``[`` or runs on too long."""
    window = text[pos : pos + MAX_DOCTYPE_CHARS]
    i = 0
    while True:
        match = _DECL_SPECIAL.search(window, i)
        if match is None:
            return len(window) == MAX_DOCTYPE_CHARS  # no ">" in sight: refuse
        ch, i = match.group(), match.end()
        if ch in "\"'":
            close = window.find(ch, i)
            if close < 0:
                return len(window) == MAX_DOCTYPE_CHARS
            i = close + 1
        elif ch == "[":
            return True
        elif ch == ">":
            return False


def _cdata_spans(text: str, start: int) -> list[tuple[int, int]]:
    """``(open, close)`` of each ``<![CDATA[ … ]]>`` section from ``start`` on, in order."""
    spans = []
    pos = start
    while True:
        opened = text.find("<![CDATA[", pos)
        if opened < 0:
            return spans
        closed = text.find("]]>", opened + 9)
        end = len(text) if closed < 0 else closed + 3
        spans.append((opened, end))
        pos = end


def sanitize(body: bytes, http_charset: str | None = None) -> bytes:
    """Decode, check and re-encode ``body`` as UTF-8 with a UTF-8 XML declaration.

    Raises:
        HostileFeedError: see :func:`check`.
    """
    text = decode(body, http_charset)
    check(text)
    decl = _DECL.match(text)
    rest = text[decl.end() :] if decl else "\n" + text
    return (XML_DECLARATION + rest).encode("utf-8", errors="replace")
