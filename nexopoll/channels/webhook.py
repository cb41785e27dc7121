"""The ``webhook`` channel: a JSON POST to the agent binding's URL.

Headers: ``X-Nexopoll-Delivery-Id`` (the outbox row id: the same on every retry, so
receivers can drop duplicates), ``X-Nexopoll-Job`` and, when the binding has a
``secret``, ``X-Nexopoll-Timestamp`` and ``X-Nexopoll-Signature: sha256=<hex>``,
an HMAC-SHA256 over ``"<timestamp>.<body>"``. Redirects are never followed.

Binding (``agents.<id>.webhook``): ``url`` (required), ``secret`` (``${VAR}``),
``allow_private_networks`` (default false: the URL must be a public address).
A missing ``url``, an invalid one or one the address guard refuses is a
configuration problem: the delivery is held (see ``runtime/delivery.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    PermanentError,
    TransientError,
)
from nexopoll.net import http

from .message import OutboundMessage


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookChannel:
    name = "webhook"

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        url = binding.get("url")
        if not url:
            raise CredentialsMissingError(
                f"agent {message.agent!r} has no webhook binding with a url"
            )
        body = json.dumps(
            {
                "delivery_id": message.delivery_id,
                "job_id": message.job_id,
                "agent": message.agent,
                "recipient": message.recipient,
                "payload": message.payload,
            },
            ensure_ascii=False,
            sort_keys=True,
        ).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Nexopoll-Delivery-Id": message.delivery_id,
            "X-Nexopoll-Job": message.job_id,
        }
        secret = binding.get("secret")
        if secret:
            ts = str(int(time.time()))
            headers["X-Nexopoll-Timestamp"] = ts
            headers["X-Nexopoll-Signature"] = sign(secret, ts, body)
        try:
            resp = http.fetch(
                "POST",
                url,
                headers=headers,
                body=body,
                allow_private=bool(binding.get("allow_private_networks", False)),
                max_bytes=64 * 1024,
                deadline_secs=deadline_secs,
                max_redirects=0,
            )
        except (http.InvalidURLError, http.BlockedURLError) as exc:
            # the URL is the binding's (redirects are not followed): a configuration
            # problem, so the delivery is held until the binding is fixed, not dead
            fix = (
                f"; to deliver to it, set `allow_private_networks: true` in "
                f"agents.{message.agent}.webhook"
                if getattr(exc, "private_opt_in", False)
                else ""
            )
            raise ConfigError(f"agent {message.agent!r} webhook binding: {exc}{fix}") from exc
        if 300 <= resp.status < 400:
            raise PermanentError(f"webhook answered {resp.status}: redirect refused for deliveries")
        if resp.status >= 400:
            http.classify_status(resp.status, resp.headers)
        if not 200 <= resp.status < 300:
            raise TransientError(f"webhook answered {resp.status}")
