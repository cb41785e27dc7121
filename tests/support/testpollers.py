"""A scripted poller for integration tests, driven through Redis keys by the test.

Source items are the ints in the list ``test:src:<job>`` (monotonic ids); the
cursor is the last id delivered. ``test:mode:<job>`` makes the tick fail
(``transient`` / ``permanent``; ``raise`` raises ``test:raise:<job>``'s text as a
TransientError, ``raise-permanent`` as a PermanentError, ``raise-bug`` as a
RuntimeError); while ``test:block:<job>`` exists the tick stops
after fetching (before the runtime commits), announcing itself in
``test:blocked:<job>`` — the barrier the kill -9 and zombie tests use. With
``test:block_once:<job>`` set, only the next tick stops, until ``test:hold:<job>``
is deleted. ``test:raw_recipient:<job>`` puts that recipient in the outbox past the
host's checks (a value only the DB refuses). A stopped tick reads ``test:mode:<job>``
again when let go (``transient``: it fails then, a failing tick in flight). Each name in
``test:metric:<job>`` is counted with ``host.metric_inc`` (``source="scripted"``; an
entry ``{"name": …, "labels": {…}}`` brings its own labels); the ``scripted_peek``
custom tool counts the source items; ``scripted_sample`` (a schema without
``additionalProperties``) lists its first ``count`` items, or raises
``test:tool_raise:<job>``'s text as a TransientError (a source's error).

Faults of a batch's tick: ``test:ignore_cancel:<job>`` makes the barrier ignore the
tick's deadline (a poller that hangs); ``raise-undecodable`` raises an error whose text
holds a lone surrogate (bytes decoded with ``surrogateescape``), which no DB driver can
encode; with ``test:hook_hold:<job>`` set, the tick's after-commit hook waits until it
is deleted, then appends to ``test:hook_done:<job>``.

A source that answers slowly: ``test:sleep_ms:<job>`` makes each tick wait that long
(as on a network reply), counting the ticks waiting at once in ``test:inflight`` and
the most there ever were in ``test:inflight_max``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

from nexopoll.core.contract import PollContext, Poller, TickAck, ToolSpec
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.runtime.host import PendingDelivery


def _client() -> redis.Redis:
    if os.environ.get("NEXOPOLL_REDIS_SENTINELS"):  # follow the master, as nexopoll does
        from nexopoll.runtime.redis import get_redis

        return get_redis()
    return redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)


class ScriptedPoller(Poller):
    kind = "scripted"
    description = "test poller scripted through Redis keys"

    def validate(self, config: dict[str, Any]) -> None:
        deliver = config.get("deliver")
        if not isinstance(deliver, dict) or not {"channel", "to"} <= set(deliver):
            raise ConfigError("deliver: {channel, to} is required", path="deliver")

    def tick(self, ctx: PollContext) -> TickAck:
        r = _client()
        job = ctx.job_id
        r.incr(f"test:ticks:{job}")
        r.rpush(f"test:now:{job}", ctx.now.timestamp())
        mode = r.get(f"test:mode:{job}") or "ok"
        if mode == "transient":
            raise TransientError("scripted transient failure")
        if mode == "permanent":
            raise PermanentError("scripted permanent failure")
        if mode.startswith("raise"):
            text = r.get(f"test:raise:{job}") or ""
            exc = {"raise": TransientError, "raise-permanent": PermanentError}
            if mode == "raise-undecodable":  # a server's reply decoded with surrogateescape
                raise TransientError("bad reply: " + b"\xff\xfe".decode("utf-8", "surrogateescape"))
            raise exc.get(mode, RuntimeError)(text)
        if wait_ms := int(r.get(f"test:sleep_ms:{job}") or 0):
            _wait_on_source(r, wait_ms / 1000)
        last = int(ctx.cursor) if ctx.cursor else 0
        ids = sorted(int(i) for i in r.lrange(f"test:src:{job}", 0, -1))
        new = [i for i in ids if i > last][: int(ctx.config.get("max_per_tick", 100))]
        target = ctx.config["deliver"]
        to = r.get(f"test:recipient:{job}") or target["to"]  # a poller may pick recipients
        raw_to = r.get(f"test:raw_recipient:{job}")  # past the host's checks: the DB refuses
        for i in new:
            payload = {"text": f"item {i}", "item_id": i}
            if raw_to:
                ctx.host.deliveries.append(PendingDelivery(target["channel"], raw_to, payload))
            else:
                ctx.host.deliver(target["channel"], to, payload)
        barrier = f"test:block:{job}"
        if r.delete(f"test:block_once:{job}"):  # only this tick waits, on test:hold:<job>
            barrier = f"test:hold:{job}"
        if r.exists(barrier):
            r.set(f"test:blocked:{job}", os.getpid())
            hangs = f"test:ignore_cancel:{job}"
            while r.exists(barrier) and (not ctx.cancel.cancelled or r.exists(hangs)):
                time.sleep(0.02)
            if r.get(f"test:mode:{job}") == "transient":  # made to fail while it waited
                raise TransientError("scripted transient failure")
        if r.exists(f"test:hook_hold:{job}"):
            ctx.host.after_commit(lambda: _slow_hook(job))
        for name in r.lrange(f"test:metric:{job}", 0, -1):  # host.metric_inc, once per entry
            if name.startswith("{"):  # {"name": …, "labels": {…}}: labels of the test's own
                call = json.loads(name)
                ctx.host.metric_inc(call["name"], **call["labels"])
            else:
                ctx.host.metric_inc(name, source="scripted")
        r.rpush(f"test:done:{job}", os.getpid())
        return TickAck(
            next_cursor=str(new[-1]).encode() if new else None,
            items_seen=len(ids),
            items_dispatched=len(new),
        )

    def custom_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name="scripted_peek",
                description="How many source items a scripted job has (test tool).",
                parameters={
                    "type": "object",
                    "properties": {"job_id": {"type": "string"}},
                    "required": ["job_id"],
                    "additionalProperties": False,
                },
                handler=self.peek,
            ),
            ToolSpec(
                name="scripted_sample",
                description="The first items of a scripted job's source (test tool).",
                parameters={  # no additionalProperties: the dispatcher closes it anyway
                    "type": "object",
                    "properties": {
                        "job_id": {"type": "string"},
                        "count": {"type": "integer", "minimum": 1, "maximum": 10},
                        "newest": {"type": "boolean"},
                    },
                    "required": ["job_id"],
                },
                handler=self.sample,
            ),
        ]

    def sample(self, args: dict[str, Any]) -> dict[str, Any]:
        r = _client()
        failure = r.get(f"test:tool_raise:{args['job_id']}")
        if failure is not None:
            raise TransientError(failure)
        items = r.lrange(f"test:src:{args['job_id']}", 0, -1)
        if args.get("newest") is True:
            items.reverse()
        return {"items": items[: args.get("count", 3)]}  # a float count: TypeError

    def peek(self, args: dict[str, Any]) -> dict[str, Any]:
        """Echoes the job's expanded config: the dispatcher must mask its secrets."""
        n = _client().llen(f"test:src:{args['job_id']}")
        return {"job_id": args["job_id"], "items": n, "config": args["job"]["config"]}


def _slow_hook(job: str) -> None:
    """An after-commit hook that waits (at most 30 s) while ``test:hook_hold:<job>`` exists."""
    r = _client()
    deadline = time.monotonic() + 30
    while r.exists(f"test:hook_hold:{job}") and time.monotonic() < deadline:
        time.sleep(0.02)
    r.rpush(f"test:hook_done:{job}", os.getpid())


_RAISE_MAX = "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then \
redis.call('SET', KEYS[1], ARGV[1]) end"


def _wait_on_source(r: redis.Redis, secs: float) -> None:
    """Wait as on a slow reply, counting how many ticks wait at once."""
    n = r.incr("test:inflight")
    try:
        r.eval(_RAISE_MAX, 1, "test:inflight_max", n)
        time.sleep(secs)
    finally:
        r.decr("test:inflight")
