"""The ``whatsapp`` channel: a WhatsApp Cloud API text message to the delivery's ``to``.

Request: ``POST <base>/<phone_number_id>/messages`` with ``Authorization: Bearer
<token>`` and ``{"messaging_product": "whatsapp", "to": ..., "type": "text",
"text": {"body": ...}}`` (at most 4,096 characters), plus
``X-Nexopoll-Delivery-Id``. Base URL ``NEXOPOLL_WHATSAPP_API_BASE`` (default
``https://graph.facebook.com/v20.0``).

Outcomes: 2xx sent; 429, 5xx and the throttling error codes (4, 80007, 130429,
131048, 131056) transient (``Retry-After`` honoured); 401 or error code 190 (the
token) a ConfigError (the row is held); any other 4xx (a bad recipient: 131026,
100…) permanent. Rate limit: the binding's ``max_per_second`` per phone number.
"""

from __future__ import annotations

from typing import Any

from nexopoll.core.bindings import WhatsappBinding
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.net import api_base, http

from ._api import json_body, message_text, post_json
from .message import OutboundMessage

DEFAULT_BASE = "https://graph.facebook.com/v20.0"
MAX_TEXT = 4096
THROTTLED = frozenset({4, 80007, 130429, 131048, 131056})
TOKEN_CODES = frozenset({190})


class WhatsappChannel:
    name = "whatsapp"
    binding_schema = WhatsappBinding

    def rate_limits(self, message: OutboundMessage, binding: dict[str, Any]) -> list:
        b = WhatsappBinding.model_validate(binding)
        return [(f"phone:{b.phone_number_id}", b.max_per_second)]

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        b = WhatsappBinding.model_validate(binding)
        base, trusted = api_base("whatsapp", DEFAULT_BASE)
        doc = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": message.recipient,
            "type": "text",
            "text": {"preview_url": False, "body": message_text(message, MAX_TEXT)},
        }
        resp = post_json(
            f"{base}/{b.phone_number_id}/messages",
            doc,
            message,
            deadline_secs=deadline_secs,
            trusted=trusted,
            headers={"Authorization": f"Bearer {b.token}"},
            what="whatsapp messages",
        )
        if 200 <= resp.status < 300:
            return
        raise classify(resp, json_body(resp))


def classify(resp: http.Response, answer: dict[str, Any]) -> Exception:
    err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    code = err.get("code")
    detail = str(err.get("message") or "")[:500]
    text = f"whatsapp answered {resp.status}" + (f" (code {code}): {detail}" if err else "")
    if resp.status == 429 or resp.status >= 500 or code in THROTTLED:
        retry_after = http.parse_retry_after(resp.headers.get("Retry-After"))
        return TransientError(text, retry_after)
    if resp.status == 401 or code in TOKEN_CODES:
        return ConfigError(f"{text} (is the access token right?)")
    return PermanentError(text)
