"""Example long-lived plugin: each tick delivers the next `batch` numbers after the cursor.

config: {deliver: {channel, to}, batch: 1..100 (default 1), label: str (optional)}
"""

from __future__ import annotations

from nexopoll.plugin_sdk import ConfigError, Result, run


def handle(tick):
    target = tick.config.get("deliver")
    if not isinstance(target, dict) or not {"channel", "to"} <= set(target):
        raise ConfigError("deliver: {channel, to} is required")
    batch = tick.config.get("batch", 1)
    if not isinstance(batch, int) or not 1 <= batch <= 100:
        raise ConfigError("batch must be an integer in 1..100")
    last = int(tick.cursor or b"0")
    label = tick.config.get("label", tick.job_id)
    for n in range(last + 1, last + batch + 1):
        tick.deliver(target["channel"], target["to"], {"text": f"{label} #{n}", "item_id": n})
    tick.metric_inc("counter_py_items")
    tick.log("info", "counted", upto=last + batch)
    return Result(next_cursor=str(last + batch).encode(), items_seen=batch, items_dispatched=batch)


if __name__ == "__main__":
    run(handle, concurrency=2)
