"""Local servers speaking the providers' protocols, for the channel tests.

Each :class:`Provider` describes one HTTP channel as a test sees it: where its
local server answers (``path``), the agent binding pointing at it (secrets as
``${CANARY_TOKEN}``), and the provider's own replies for success, a server error,
a 429 with "retry after 5 s" and a bad recipient. ``point(monkeypatch, server)``
sets the channel's base-URL variable (or the binding's webhook URL) to the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.apibases import point_api

from .httpserver import Handler, TestHTTPServer, json_reply, reply

CANARY = "tok-CANARY-7f3a9"  # the secret every provider binding references


def _json(status: int, doc: Any, headers: dict[str, str] | None = None) -> Handler:
    return json_reply(doc, status=status, headers=headers)


@dataclass
class Provider:
    id: str
    channel: str
    path: str
    binding: Callable[[TestHTTPServer], dict[str, Any]]
    ok: Handler
    server_error: Handler
    too_many: Handler  # 429, "retry after 5 s" in the provider's own words
    bad_recipient: Handler
    fast: dict[str, Any] = field(default_factory=dict)  # binding fields lifting rate limits
    api: str | None = None  # its nexopoll.net.api_base name (NEXOPOLL_<API>_API_BASE)
    recipient: str = "42"
    text_of: Callable[[dict[str, Any]], str] = field(default=lambda doc: doc.get("text", ""))

    def point(self, monkeypatch, server: TestHTTPServer) -> None:
        if self.api:
            point_api(monkeypatch, self.api, server.base_url + "/api")

    def url_path(self) -> str:
        return self.path


TELEGRAM = Provider(
    id="telegram",
    channel="telegram",
    path=f"/api/bot{CANARY}/sendMessage",
    api="telegram",
    binding=lambda srv: {"account": "ana_bot", "token": "${CANARY_TOKEN}"},
    fast={"max_per_second": 1000, "max_per_chat_per_second": 1000},
    ok=_json(200, {"ok": True, "result": {"message_id": 7}}),
    server_error=_json(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}),
    too_many=_json(
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 5",
            "parameters": {"retry_after": 5},
        },
    ),
    bad_recipient=_json(
        400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
    ),
)

WHATSAPP = Provider(
    id="whatsapp",
    channel="whatsapp",
    path="/api/1234567890/messages",
    api="whatsapp",
    binding=lambda srv: {"phone_number_id": "1234567890", "token": "${CANARY_TOKEN}"},
    fast={"max_per_second": 1000},
    ok=_json(200, {"messaging_product": "whatsapp", "messages": [{"id": "wamid.X"}]}),
    server_error=_json(500, {"error": {"message": "Service temporarily unavailable", "code": 2}}),
    too_many=_json(
        429, {"error": {"message": "Rate limit hit", "code": 130429}}, {"Retry-After": "5"}
    ),
    bad_recipient=_json(
        400, {"error": {"message": "(#131026) Message undeliverable", "code": 131026}}
    ),
    recipient="573001112233",
    text_of=lambda doc: doc["text"]["body"],
)

SLACK_BOT = Provider(
    id="slack-bot",
    channel="slack",
    path="/api/chat.postMessage",
    api="slack",
    binding=lambda srv: {"account": "ana_ws", "token": "${CANARY_TOKEN}"},
    fast={"max_per_channel_per_second": 1000},
    ok=_json(200, {"ok": True, "channel": "C1", "ts": "1.2"}),
    server_error=_json(200, {"ok": False, "error": "internal_error"}),
    too_many=_json(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "5"}),
    bad_recipient=_json(200, {"ok": False, "error": "channel_not_found"}),
    recipient="C0123",
)

SLACK_WEBHOOK = Provider(
    id="slack-webhook",
    channel="slack",
    path=f"/services/T0/B0/{CANARY}",
    binding=lambda srv: {
        "webhook_url": "${CANARY_HOOK_URL}",
        "allow_private_networks": True,
    },
    fast={"max_per_channel_per_second": 1000},
    ok=reply(200, b"ok"),
    server_error=reply(500, b"internal_error"),
    too_many=reply(429, b"rate_limited", {"Retry-After": "5"}),
    bad_recipient=reply(410, b"channel_is_archived"),
    recipient="#ops",
)

HTTP_PROVIDERS = [TELEGRAM, WHATSAPP, SLACK_BOT, SLACK_WEBHOOK]


def point_all(monkeypatch, server: TestHTTPServer) -> None:
    """Every provider at ``server``, and the secrets the bindings reference set."""
    monkeypatch.setenv("CANARY_TOKEN", CANARY)
    monkeypatch.setenv("CANARY_HOOK_URL", server.url(SLACK_WEBHOOK.path))
    for p in HTTP_PROVIDERS:
        p.point(monkeypatch, server)


def sent_doc(server: TestHTTPServer, index: int = -1) -> dict[str, Any]:
    return json.loads(server.requests[index].body)
