"""The ``telegram`` channel: Bot API ``sendMessage`` to the delivery's ``to`` (a chat id).

Request: ``POST <base>/bot<token>/sendMessage`` with ``chat_id``, ``text`` (the
payload's ``text``, at most 4,096 characters) and the binding's ``parse_mode`` and
``disable_web_page_preview``. With a ``parse_mode``, untrusted parts of the text
are escaped for it (MarkdownV2, HTML or legacy Markdown:
:mod:`nexopoll.core.markup`); without one Telegram shows the text as is. Base URL
``NEXOPOLL_TELEGRAM_API_BASE`` (default ``https://api.telegram.org``). The token
sits in the URL path: every error message is redacted before it is stored or
logged.

Outcomes:

==============================================  ===========================================
answer                                          outcome
==============================================  ===========================================
200 ``{"ok": true}``                            sent
429 (``parameters.retry_after``)                transient, retried after that many seconds
5xx, timeout, connection error                  transient
401, 404 (the token is wrong)                   ConfigError: the row is held
"chat not found", "bot was blocked", other 4xx  permanent: the row is dead with the reason
==============================================  ===========================================

Telegram has no idempotency key: when a response is lost after Telegram accepted
the message, the retry sends it again (the chat sees it twice).

Rate limits (held across every worker through Redis): the binding's
``max_per_second`` per bot (default 30) and ``max_per_chat_per_second`` per chat
(default 1).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nexopoll.core.bindings import TelegramBinding
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.core.markup import TELEGRAM_ESCAPES
from nexopoll.net import api_base

from ._api import json_body, message_text, post_json
from .message import OutboundMessage

DEFAULT_BASE = "https://api.telegram.org"
MAX_TEXT = 4096


class TelegramChannel:
    name = "telegram"
    binding_schema = TelegramBinding

    def rate_limits(self, message: OutboundMessage, binding: dict[str, Any]) -> list:
        b = TelegramBinding.model_validate(binding)
        return [
            (f"bot:{b.account}", b.max_per_second),
            (f"chat:{b.account}:{message.recipient}", b.max_per_chat_per_second),
        ]

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        b = TelegramBinding.model_validate(binding)
        base, trusted = api_base("telegram", DEFAULT_BASE)
        doc: dict[str, Any] = {
            "chat_id": message.recipient,
            "text": message_text(message, MAX_TEXT, TELEGRAM_ESCAPES.get(b.parse_mode or "")),
        }
        if b.parse_mode:
            doc["parse_mode"] = b.parse_mode
        if b.disable_web_page_preview:
            doc["disable_web_page_preview"] = True
        resp = post_json(
            f"{base}/bot{b.token}/sendMessage",
            doc,
            message,
            deadline_secs=deadline_secs,
            trusted=trusted,
            what="telegram sendMessage",
        )
        answer = json_body(resp)
        if 200 <= resp.status < 300 and answer.get("ok") is True:
            return
        raise classify(resp.status, answer)


def classify(status: int, answer: dict[str, Any]) -> Exception:
    """The error for a Bot API answer that is not ``{"ok": true}``."""
    description = str(answer.get("description") or "")[:500]
    text = f"telegram answered {status}" + (f": {description}" if description else "")
    params = answer.get("parameters") if isinstance(answer.get("parameters"), dict) else {}
    retry_after = params.get("retry_after")
    if status == 429 or (isinstance(retry_after, int) and not isinstance(retry_after, bool)):
        secs = retry_after if isinstance(retry_after, int) and retry_after >= 0 else None
        return TransientError(text, None if secs is None else timedelta(seconds=min(secs, 3600)))
    if status >= 500 or status == 408 or (200 <= status < 300):
        return TransientError(text)  # a 2xx without "ok": true is a broken answer
    if status in (401, 404):
        return ConfigError(f"{text} (is the bot token right?)")
    if "migrate_to_chat_id" in params:
        return PermanentError(f"{text} (the group moved to chat {params['migrate_to_chat_id']})")
    return PermanentError(text)
