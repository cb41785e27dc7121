"""The ``slack`` channel: an incoming webhook, or ``chat.postMessage`` with a bot token.

- **Incoming webhook** (binding ``webhook_url``, a secret reference): ``POST`` of
  ``{"text": ...}`` to that URL; the delivery's ``to`` is only a label (the webhook
  decides the channel). Slack answers ``ok`` (200) or a status with an error word
  (``invalid_payload`` 400, ``no_service`` 404, ``channel_is_archived`` 410…).
- **Bot token** (binding ``token``): ``POST <base>/chat.postMessage`` with
  ``Authorization: Bearer <token>`` and ``{"channel": <to>, "text": ...}``. Base URL
  ``NEXOPOLL_SLACK_API_BASE`` (default ``https://slack.com/api``). Slack answers
  200 with ``{"ok": false, "error": "..."}``, mapped by :data:`TRANSIENT_ERRORS` and
  :data:`CONFIG_ERRORS`; every other error word is permanent.

429 is transient with ``Retry-After``; 5xx transient; ``X-Nexopoll-Delivery-Id`` is
sent (Slack ignores it). Rate limit: ``max_per_channel_per_second`` (default 1)
per channel (per webhook for webhooks).

The text is Slack mrkdwn: untrusted parts are escaped (``&``, ``<``, ``>``) so a
polled ``<!channel>`` or ``<https://evil|bank>`` shows as literal text; the
template's own text and ``{path|raw}`` values are sent as written
(:mod:`nexopoll.core.markup`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from nexopoll.core.bindings import SlackBinding
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.core.markup import escape_slack
from nexopoll.net import api_base, http

from ._api import json_body, message_text, post_json
from .message import OutboundMessage

DEFAULT_BASE = "https://slack.com/api"
# Slack's error words ("no_service"); any other answer text is dropped, never quoted
ERROR_WORD_RE = re.compile(r"[a-z_]{1,64}", re.ASCII)
MAX_TEXT = 40_000
TRANSIENT_ERRORS = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "service_unavailable",
        "internal_error",
        "fatal_error",
        "request_timeout",
        "team_added_to_org",
    }
)
CONFIG_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "missing_scope",
        "not_allowed_token_type",
        "no_permission",
        "invalid_token",
        "no_service",
        "no_active_hooks",
        "action_prohibited",
        "ekm_access_denied",
    }
)


class SlackChannel:
    name = "slack"
    binding_schema = SlackBinding

    def rate_limits(self, message: OutboundMessage, binding: dict[str, Any]) -> list:
        b = SlackBinding.model_validate(binding)
        if b.webhook_url:  # the URL is a secret: key on a digest of it
            scope = "hook:" + hashlib.sha256(b.webhook_url.encode()).hexdigest()[:24]
        else:
            scope = f"channel:{b.account or 'bot'}:{message.recipient}"
        return [(scope, b.max_per_channel_per_second)]

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        b = SlackBinding.model_validate(binding)
        text = message_text(message, MAX_TEXT, escape_slack)
        if b.webhook_url:
            try:
                resp = post_json(
                    b.webhook_url,
                    {"text": text},
                    message,
                    deadline_secs=deadline_secs,
                    trusted=b.allow_private_networks,
                    what="slack webhook",
                )
            except http.FetchError as exc:  # its text names the URL: a secret here
                raise TransientError(f"slack webhook: {type(exc).__name__}") from None
            except ConfigError:
                raise ConfigError("slack webhook_url refused (a private address?)") from None
            if 200 <= resp.status < 300:
                return
            word = resp.body[:100].decode("utf-8", "replace").strip()
            raise classify(resp, word if ERROR_WORD_RE.fullmatch(word) else "")
        base, trusted = api_base("slack", DEFAULT_BASE)
        resp = post_json(
            f"{base}/chat.postMessage",
            {"channel": message.recipient, "text": text},
            message,
            deadline_secs=deadline_secs,
            trusted=trusted,
            headers={"Authorization": f"Bearer {b.token}"},
            what="slack chat.postMessage",
        )
        answer = json_body(resp)
        if 200 <= resp.status < 300 and answer.get("ok") is True:
            return
        raise classify(resp, str(answer.get("error") or ""))


def classify(resp: http.Response, word: str) -> Exception:
    """The error for a Slack answer: its status and its error word (``channel_not_found``)."""
    word = word if ERROR_WORD_RE.fullmatch(word) else ""
    text = f"slack answered {resp.status}" + (f": {word}" if word else "")
    if resp.status == 429 or resp.status >= 500 or word in TRANSIENT_ERRORS:
        return TransientError(text, http.parse_retry_after(resp.headers.get("Retry-After")))
    if resp.status == 401 or word in CONFIG_ERRORS:
        return ConfigError(f"{text} (check the slack binding's token or webhook_url)")
    if 200 <= resp.status < 300 and not word:
        return TransientError(f"{text}: an answer without ok")
    return PermanentError(text)
