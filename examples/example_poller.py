"""``incidents``: deliver each new incident of a JSON status page once (a toolkit example).

    kind: incidents
    config: {url: https://status.example.com/incidents.json,
             deliver: {channel: telegram, to: "1194292426"}}

The page answers ``{"incidents": [{"id": "…", "title": "…"}, …]}``, newest first.
Register it with ``NEXOPOLL_EXTRA_POLLERS=example_poller:IncidentPoller``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from nexopoll.core.contract import PollContext, TickAck
from nexopoll.core.errors import TransientError
from nexopoll.net import http
from pollers._base import ConfiguredPoller, CursorCodec, DeliverTarget, HttpURL

CODEC = CursorCodec("incidents")  # the cursor: {"v": 1, "seen": [ids, oldest first]}


class IncidentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: HttpURL
    deliver: DeliverTarget
    seen_capacity: int = Field(500, ge=1, le=10_000)
    allow_private_networks: bool = False


class IncidentPoller(ConfiguredPoller):
    kind = "incidents"
    description = "Deliver each new incident of a JSON status page once."
    config_model = IncidentsConfig

    def __init__(self, fetch: Callable[..., http.Response] = http.fetch) -> None:
        self._fetch = fetch  # tests pass fetch with allow_addresses for a local server

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = self.parse_config(ctx.config)
        seen = CODEC.seen(CODEC.decode(ctx.cursor), cfg.seen_capacity)
        resp = self._fetch(
            "GET",
            cfg.url,
            allow_private=cfg.allow_private_networks,
            deadline_secs=20,
            cancel=ctx.cancel,
        )
        http.classify_status(resp.status, resp.headers, now=ctx.now)  # 5xx/429: retried
        try:
            doc = json.loads(resp.body)["incidents"]
            incidents = [i for i in doc if isinstance(i, dict) and "id" in i]
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientError(f"not a status page ({type(exc).__name__})") from None
        fresh = [i for i in reversed(incidents) if str(i["id"]) not in seen]  # oldest first
        for item in fresh:
            text = f"🚨 {item.get('title', '(untitled)')}"
            payload = {"text": text, "item_id": str(item["id"]), "job_id": ctx.job_id}
            ctx.host.deliver(cfg.deliver.channel, cfg.deliver.to, payload)
        ring = seen.remember(str(i["id"]) for i in fresh)
        return TickAck(
            next_cursor=CODEC.encode({"seen": ring}) if fresh else None,
            items_seen=len(incidents),
            items_dispatched=len(fresh),
        )
