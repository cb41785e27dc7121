"""The ``log`` channel: writes each delivery to the ``nexopoll.delivery`` logger."""

from __future__ import annotations

import json
import logging
from typing import Any

from .message import OutboundMessage

log = logging.getLogger("nexopoll.delivery")


class LogChannel:
    name = "log"

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        log.info(
            "delivery.log job=%s to=%s id=%s payload=%s",
            message.job_id,
            message.recipient,
            message.delivery_id,
            json.dumps(message.payload, ensure_ascii=False, sort_keys=True)[:4000],
        )
