"""``example_sequence``: each tick delivers the next number of an arithmetic sequence."""

from __future__ import annotations

from typing import Any

from nexopoll.core.contract import PollContext, Poller, TickAck
from nexopoll.core.errors import ConfigError


class SequencePoller(Poller):
    kind = "example_sequence"
    description = "delivers start, start+step, … one per tick (an entry-point example)"

    def validate(self, config: dict[str, Any]) -> None:
        deliver = config.get("deliver")
        if not isinstance(deliver, dict) or not {"channel", "to"} <= set(deliver):
            raise ConfigError("deliver: {channel, to} is required", path="deliver")
        for key in ("start", "step"):
            value = config.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key} must be an integer", path=key)

    def tick(self, ctx: PollContext) -> TickAck:
        self.validate(ctx.config)
        start, step = ctx.config.get("start", 1), ctx.config.get("step", 1)
        value = int(ctx.cursor) + step if ctx.cursor else start
        target = ctx.config["deliver"]
        ctx.host.deliver(target["channel"], target["to"], {"text": f"next: {value}", "n": value})
        return TickAck(next_cursor=str(value).encode(), items_seen=1, items_dispatched=1)
