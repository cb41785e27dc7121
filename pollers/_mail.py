"""Reading one Gmail ``messages.get?format=full`` resource (pure: no I/O).

- **Body**: the message's own text first (:func:`message_body`): its first
  ``text/plain`` part, else its first ``text/html`` part with tags stripped,
  attachments skipped; an attached or forwarded ``message/rfc822`` only when the
  message has no text of its own. Part data is base64url of the part already
  decoded from its transfer encoding (Gmail lists ``Content-Transfer-Encoding``
  as sent but has applied it): the bytes are decoded with the part's charset
  only (UTF-8 by default, undecodable bytes replaced).
- **Headers**: case-insensitive; RFC 2047 encoded words (``=?UTF-8?B?...?=``)
  are decoded, except in ``From``.
- **Sender**: the raw ``From`` parsed as an RFC 5322 address list *before* any
  encoded word is decoded; only the display name is decoded (:func:`parse_from`).
  The allowlist
  compares the parsed address (exactly) or its domain (exactly: ``@example.com``
  does not admit ``example.com.evil`` nor ``sub.example.com``); a From with no
  address, several addresses or parse defects, or a mail with two From headers,
  matches nothing.
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import html
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email import errors
from email.header import decode_header, make_header
from email.parser import HeaderParser
from typing import Any

MAX_BODY_CHARS = 256 * 1024
_TAG_RE = re.compile(r"<[^>]*>")
_DROP_RE = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.I | re.S)
_BREAK_RE = re.compile(r"<(br|/p|/div|/li|/tr|/h[1-6])\b[^>]*>", re.I)
MAX_DEPTH = 20
# one address: a dot-atom or quoted local part, a plain domain; nothing else around it
_ADDR_RE = re.compile(r'(?:[^\s"@<>()\[\],;:\\]+|"[^"\\\r\n]*")@[^\s"@<>()\\,;=?]+')
_WORD_DEFECTS = (
    errors.InvalidBase64CharactersDefect,
    errors.InvalidBase64PaddingDefect,
    errors.InvalidBase64LengthDefect,
    errors.UndecodableBytesDefect,
    errors.CharsetError,
)


@dataclass(frozen=True)
class MailMessage:
    id: str
    thread_id: str
    snippet: str
    subject: str
    from_header: str
    from_address: str  # the single parsed address, lower-cased; "" when unusable
    from_name: str
    to: str
    date: str
    internal_date: int
    labels: tuple[str, ...]
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """Template fields every gmail message offers."""
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "subject": self.subject,
            "from": self.from_header,
            "from_address": self.from_address,
            "from_name": self.from_name,
            "to": self.to,
            "date": self.date,
            "snippet": self.snippet,
            "body": self.body,
            "labels": list(self.labels),
        }


BUILTIN_FIELDS = frozenset(
    {
        "id",
        "thread_id",
        "subject",
        "from",
        "from_address",
        "from_name",
        "to",
        "date",
        "snippet",
        "body",
        "labels",
    }
)


def parse_message(doc: Mapping[str, Any]) -> MailMessage:
    """Turn a ``format=full`` message resource into a :class:`MailMessage`."""
    payload = doc.get("payload") if isinstance(doc.get("payload"), dict) else {}
    headers = _headers(payload)
    raw_from = _headers(payload, decode=False).get("from", "")
    name, address = parse_from(raw_from) if _count(payload, "from") == 1 else ("", "")
    from_header = from_display(raw_from)
    try:
        internal = int(doc.get("internalDate") or 0)
    except (TypeError, ValueError):
        internal = 0
    labels = doc.get("labelIds") if isinstance(doc.get("labelIds"), list) else []
    return MailMessage(
        id=str(doc.get("id") or ""),
        thread_id=str(doc.get("threadId") or ""),
        snippet=html.unescape(str(doc.get("snippet") or "")),
        subject=headers.get("subject", ""),
        from_header=from_header,
        from_address=address,
        from_name=name,
        to=headers.get("to", ""),
        date=headers.get("date", ""),
        internal_date=internal,
        labels=tuple(str(x) for x in labels),
        body=message_body(payload)[:MAX_BODY_CHARS],
        headers=headers,
    )


def _decode_words(value: str) -> str:
    if "=?" not in value:
        return value
    try:
        return str(make_header(decode_header(value)))
    except (ValueError, LookupError, UnicodeError):
        return value


def _headers(part: Mapping[str, Any], *, decode: bool = True) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in part.get("headers") or []:
        if isinstance(h, dict) and isinstance(h.get("name"), str):
            name = h["name"].lower()
            if name not in out:
                value = str(h.get("value") or "")
                out[name] = _decode_words(value) if decode else value
    return out


def _count(part: Mapping[str, Any], name: str) -> int:
    """How many ``name`` headers ``part`` has (RFC 5322: exactly one From)."""
    headers = part.get("headers") or []
    return sum(1 for h in headers if isinstance(h, dict) and str(h.get("name")).lower() == name)


def parse_from(value: str) -> tuple[str, str]:
    """``(display name, address)`` of a raw From header; address "" unless exactly one, clean.

    ``value`` is the header as sent, encoded words and all: the address is parsed
    first, and only the display name's encoded words are decoded, so an encoded
    word can never supply or hide an address (``=?utf-8?Q?boss@mycompany.com_=28?=
    <attacker@evil.com>`` is from ``attacker@evil.com``). The address must be
    written literally in the header (not decoded from an encoded word, not
    assembled around comments); group syntax, several addresses and structural
    parse defects give ``""``. Defects of the display name's encoding alone (a bad
    charset, a missing space after an encoded word) are tolerated.
    """
    value = _unfold(value)
    header = _address_header(value)
    if header is None or len(header.addresses) != 1:
        return "", ""
    if any(g.display_name is not None for g in header.groups):
        return "", ""  # RFC 5322: From is a mailbox list, never a group
    if any(not _display_name_defect(d) for d in header.defects):
        return "", ""
    addr = header.addresses[0]
    spec = (addr.addr_spec or "").lower()
    if not _ADDR_RE.fullmatch(spec) or _written_spec(value) != spec:
        return "", ""
    return _clean(_display_name(value, spec, addr.display_name or "")), spec


def _written_spec(value: str) -> str:
    """The address as written: inside the last ``<…>``, else the whole value less a
    trailing comment; lower-cased. The parsed address must be exactly this."""
    angle = value.rfind("<")
    if angle >= 0:
        close = value.find(">", angle)
        return value[angle + 1 : close].strip().lower() if close > 0 else ""
    return re.sub(r"\s*\([^()]*\)\s*$", "", value).strip().lower()


def _display_name(value: str, spec: str, parsed: str) -> str:
    """The name before ``<spec>``, its encoded words decoded as RFC 2047 says.

    The stdlib parser keeps the space between two adjacent encoded words, which
    RFC 2047 drops (``=?x?Q?a?= =?x?Q?b?=`` is ``ab``): the phrase is decoded
    here with :func:`email.header.decode_header`; ``parsed`` is the fallback.
    """
    angle = value.rfind("<")
    tail_re = r"<\s*" + re.escape(spec) + r"\s*>\s*(?:\([^()]*\)\s*)?"
    tail = re.fullmatch(tail_re, value[angle:], re.I)
    phrase = value[:angle].strip() if angle > 0 and tail else ""
    if not phrase:
        return parsed
    if len(phrase) >= 2 and phrase[0] == phrase[-1] == '"':
        phrase = re.sub(r"\\(.)", r"\1", phrase[1:-1])
    return _decode_words(phrase)


def from_display(value: str) -> str:
    """The From header for people to read: display names decoded and re-quoted."""
    value = _unfold(value)
    header = _address_header(value)
    if header is None or any(not _display_name_defect(d) for d in header.defects):
        return _clean(value)  # as sent: decoding a broken header could mislead
    return _clean(str(header))


def _unfold(value: str) -> str:
    """A folded header on one line (RFC 5322 2.2.3); a bare line break stays (refused)."""
    return re.sub(r"\r?\n(?=[ \t])", "", value)


def _address_header(value: str) -> Any:
    if not value or "\n" in value or "\r" in value:
        return None
    try:
        header = HeaderParser(policy=email.policy.default).parsestr(f"From: {value}\n\n")["from"]
        header.addresses  # noqa: B018 - parsing errors surface here
    except (ValueError, IndexError, TypeError, AttributeError):
        return None
    return header


def _display_name_defect(defect: Exception) -> bool:
    if isinstance(defect, _WORD_DEFECTS):
        return True
    text = str(defect)
    return "encoded word" in text or "encoded-word" in text


def _clean(text: str) -> str:
    """Undecodable bytes (lone surrogates) as U+FFFD."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def sender_allowed(address: str, allowlist: list[str]) -> bool:
    """True if ``address`` equals an entry, or its domain equals an ``@domain`` entry."""
    if not allowlist:
        return True
    if not address or "@" not in address:
        return False
    domain = address.rpartition("@")[2]
    for entry in allowlist:
        entry = entry.strip().lower()
        if entry.startswith("@"):
            if domain == entry[1:]:
                return True
        elif "@" in entry:
            if address == entry:
                return True
        elif domain == entry:
            return True
    return False


def message_body(payload: Mapping[str, Any]) -> str:
    """The readable text of a message: its own body first, forwarded mail last.

    The message's own tree is read by structure: a ``text/plain`` part as is, a
    ``text/html`` one with tags stripped; a ``multipart/alternative`` gives its
    plain version, else its HTML one; any other multipart (``mixed``,
    ``related``…) its first part that has text, in order. Attachments (a
    filename, ``Content-Disposition: attachment`` or an ``attachmentId``) are
    never read, and an attached or forwarded ``message/rfc822`` is read (the same
    way) only when the message has no text of its own.
    """
    found = _own_text(payload, 0)
    if found is not None:
        mime, text = found
        return html_to_text(text) if mime == "text/html" else text
    for inner in _forwarded(payload, 0):
        text = message_body(inner)
        if text:
            return text
    return ""


def _mime(part: Mapping[str, Any]) -> str:
    return str(part.get("mimeType") or "").lower()


def _subparts(part: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    subs = part.get("parts")
    return [p for p in subs if isinstance(p, dict)] if isinstance(subs, list) else []


def _is_attachment(part: Mapping[str, Any]) -> bool:
    if part.get("filename"):
        return True
    body = part.get("body") if isinstance(part.get("body"), dict) else {}
    if body.get("attachmentId") and not body.get("data"):
        return True
    disposition = _headers(part, decode=False).get("content-disposition", "")
    return disposition.strip().lower().startswith("attachment")


def _own_text(part: Mapping[str, Any], depth: int) -> tuple[str, str] | None:
    """``(mime, text)`` of this message's own body (no attachment, no rfc822), or None."""
    mime = _mime(part)
    if depth > MAX_DEPTH or mime == "message/rfc822" or _is_attachment(part):
        return None
    if mime in ("text/plain", "text/html"):
        text = part_text(part)
        return None if text is None else (mime, text)
    found = (_own_text(sub, depth + 1) for sub in _subparts(part))
    if mime == "multipart/alternative":
        versions = [f for f in found if f is not None]
        plain = [f for f in versions if f[0] == "text/plain"]
        return (plain or versions or [None])[0]
    return next((f for f in found if f is not None), None)


def _forwarded(part: Mapping[str, Any], depth: int) -> Iterator[Mapping[str, Any]]:
    """The payloads of the ``message/rfc822`` parts in this message's own tree, in order."""
    if depth > MAX_DEPTH:
        return
    for sub in _subparts(part):
        if _mime(sub) == "message/rfc822":
            yield from (p for p in _subparts(sub)[:1])
        else:
            yield from _forwarded(sub, depth + 1)


def part_text(part: Mapping[str, Any]) -> str | None:
    """Decode one part's ``body.data``; None for an attachment or an undecodable part.

    Gmail's ``body.data`` is base64url of the part's content already decoded from
    its ``Content-Transfer-Encoding`` (the header is still listed, as sent): it
    is never decoded a second time (``phone=34612345678`` stays as written).
    """
    body = part.get("body") if isinstance(part.get("body"), dict) else {}
    data = body.get("data")
    if not isinstance(data, str) or not data:
        return None
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return None
    headers = _headers(part)
    return raw.decode(_charset(headers.get("content-type", "")), errors="replace")


def _charset(content_type: str) -> str:
    match = re.search(r'charset\s*=\s*"?([A-Za-z0-9_.:-]+)"?', content_type, re.I)
    name = match.group(1).lower() if match else "utf-8"
    try:
        "".encode(name)
    except LookupError:
        return "utf-8"
    return name


def html_to_text(text: str) -> str:
    text = _DROP_RE.sub(" ", text)
    text = _BREAK_RE.sub("\n", text)
    text = _TAG_RE.sub("", text)
    text = html.unescape(text)
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "\n".join(line for line in lines if line)
