"""Reading one Gmail ``messages.get?format=full`` resource (pure: no I/O).

- **Body**: the first ``text/plain`` part, depth first through nested
  multiparts; else the first ``text/html`` part with tags stripped. Part data is
  base64url; a part whose own headers still say ``Content-Transfer-Encoding:
  quoted-printable`` (or ``base64``) and whose data is still in that encoding
  (7-bit ASCII for quoted-printable) is decoded once more, then the bytes are
  decoded with the part's charset (UTF-8 by default, undecodable bytes replaced).
  Attachments (``body.attachmentId``, no inline data) are skipped.
- **Headers**: case-insensitive; RFC 2047 encoded words (``=?UTF-8?B?...?=``)
  are decoded.
- **Sender**: ``From`` parsed as an RFC 5322 address list. The allowlist
  compares the parsed address (exactly) or its domain (exactly: ``@example.com``
  does not admit ``example.com.evil`` nor ``sub.example.com``); a From with no
  address, several addresses or parse defects matches nothing.
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import html
import quopri
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from email.parser import HeaderParser
from typing import Any

MAX_BODY_CHARS = 256 * 1024
_TAG_RE = re.compile(r"<[^>]*>")
_DROP_RE = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.I | re.S)
_BREAK_RE = re.compile(r"<(br|/p|/div|/li|/tr|/h[1-6])\b[^>]*>", re.I)
_QP_HINT_RE = re.compile(rb"=(\r?\n|[0-9A-F]{2})")
_B64_RE = re.compile(rb"^[A-Za-z0-9+/=\r\n]+$")


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
    {"id", "thread_id", "subject", "from", "from_address", "from_name", "to", "date",
     "snippet", "body", "labels"}
)  # fmt: skip


def parse_message(doc: Mapping[str, Any]) -> MailMessage:
    """Turn a ``format=full`` message resource into a :class:`MailMessage`."""
    payload = doc.get("payload") if isinstance(doc.get("payload"), dict) else {}
    headers = _headers(payload)
    from_header = headers.get("from", "")
    name, address = parse_from(from_header)
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


def _headers(part: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in part.get("headers") or []:
        if isinstance(h, dict) and isinstance(h.get("name"), str):
            name = h["name"].lower()
            if name not in out:
                out[name] = _decode_words(str(h.get("value") or ""))
    return out


def parse_from(value: str) -> tuple[str, str]:
    """``(display name, address)`` of a From header; address "" unless exactly one, clean."""
    if not value or "\n" in value or "\r" in value:
        return "", ""
    try:
        header = HeaderParser(policy=email.policy.default).parsestr(f"From: {value}\n\n")["from"]
        addresses = header.addresses
    except (ValueError, IndexError, TypeError, AttributeError):
        return "", ""
    if len(addresses) != 1 or getattr(header, "defects", ()):
        return "", ""
    addr = addresses[0]
    spec = (addr.addr_spec or "").lower()
    if spec.count("@") != 1 or not addr.domain or not addr.username:
        return "", ""
    return addr.display_name or "", spec


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


def _walk(part: Mapping[str, Any], depth: int = 0) -> Iterator[Mapping[str, Any]]:
    if depth > 20:
        return
    yield part
    for sub in part.get("parts") or []:
        if isinstance(sub, dict):
            yield from _walk(sub, depth + 1)


def message_body(payload: Mapping[str, Any]) -> str:
    """The readable text of a message: text/plain first, else stripped text/html."""
    for want in ("text/plain", "text/html"):
        for part in _walk(payload):
            if str(part.get("mimeType") or "").lower() != want:
                continue
            text = part_text(part)
            if text is None:
                continue
            return html_to_text(text) if want == "text/html" else text
    return ""


def part_text(part: Mapping[str, Any]) -> str | None:
    """Decode one part's ``body.data``; None for an attachment or an undecodable part."""
    body = part.get("body") if isinstance(part.get("body"), dict) else {}
    data = body.get("data")
    if not isinstance(data, str) or not data:
        return None
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return None
    headers = _headers(part)
    cte = headers.get("content-transfer-encoding", "").strip().lower()
    if cte == "quoted-printable" and raw.isascii() and _QP_HINT_RE.search(raw):
        raw = quopri.decodestring(raw)
    elif cte == "base64" and _B64_RE.match(raw):
        try:
            raw = base64.b64decode(raw, validate=False)
        except (binascii.Error, ValueError):
            pass
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
