"""What the provider channels (telegram, whatsapp, slack) share: base URLs, the text,
and one request through the shared HTTP layer.

A provider's base URL comes from the settings (``NEXOPOLL_<NAME>_API_BASE`` in the
environment), through :func:`nexopoll.net.api_base` at send time, else the
provider's public default. A base URL set there is operator-trusted: it may
point at a private or loopback address (a proxy, a test server). Every request
still goes through :func:`nexopoll.net.http.fetch` (its deadline, byte cap and
address guard for metadata addresses) and never follows a redirect: a 3xx is a
permanent failure naming the status.
"""

from __future__ import annotations

import json
from typing import Any

from nexopoll.core import markup
from nexopoll.core.errors import ConfigError, PermanentError
from nexopoll.net import http

from .message import OutboundMessage

MAX_RESPONSE_BYTES = 256 * 1024


def message_text(message: OutboundMessage, limit: int, escape: markup.Escape | None = None) -> str:
    """The text to send: the payload's ``text``, else the payload as JSON; capped.

    With ``escape`` (the channel's markup), every part of the text outside the
    payload's ``text_trusted`` spans is escaped (see :mod:`nexopoll.core.markup`);
    the payload as JSON is untrusted as a whole.
    """
    text = message.payload.get("text")
    spans: list[tuple[int, int]] = []
    if not isinstance(text, str) or not text:
        text = json.dumps(message.payload, ensure_ascii=False, sort_keys=True)
    else:
        spans = markup.trusted_spans(message.payload.get("text_trusted"), len(text))
    if escape is None:
        return text if len(text) <= limit else text[: limit - 1] + "…"
    return markup.compose(text, spans, escape, limit)


def post_json(
    url: str,
    doc: dict[str, Any],
    message: OutboundMessage,
    *,
    deadline_secs: float,
    trusted: bool,
    headers: dict[str, str] | None = None,
    what: str,
) -> http.Response:
    """POST ``doc`` with the delivery id header; a redirect is refused, never followed."""
    send = {"X-Nexopoll-Delivery-Id": message.delivery_id, **(headers or {})}
    try:
        resp = http.fetch(
            "POST",
            url,
            headers=send,
            secret_headers=("Authorization",),
            json=doc,
            allow_private=trusted,
            max_bytes=MAX_RESPONSE_BYTES,
            deadline_secs=deadline_secs,
            max_redirects=0,
        )
    except (http.InvalidURLError, http.BlockedURLError) as exc:
        raise ConfigError(f"{what}: {exc}") from exc
    if 300 <= resp.status < 400:
        raise PermanentError(f"{what} answered {resp.status}: redirect refused for deliveries")
    return resp


def json_body(resp: http.Response) -> dict[str, Any]:
    """The response's JSON object, or ``{}`` when it is not one."""
    try:
        doc = json.loads(resp.body.decode("utf-8", "replace") or "{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
