"""What a job's RedBeat entry holds: ``NexoSchedule`` (a nexopoll core schedule plus
the job's stagger), carried through an extended JSON encoder and decoder, and the
entry class that stores it (``NexoEntry``). Stock RedBeat stores only interval,
crontab and rrule schedules, and drops seconds and time zones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import BaseSchedule, schedstate
from redbeat.decoder import RedBeatJSONDecoder, RedBeatJSONEncoder
from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

from nexopoll.core.schedule import next_slot, schedule_from_dict


class NexoSchedule(BaseSchedule):
    """A Celery schedule over a nexopoll core schedule plus the job's stagger offset."""

    def __init__(self, spec: dict[str, Any], offset_ms: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = dict(spec)
        self.offset_ms = int(offset_ms)
        self.core = schedule_from_dict(self.spec)
        self.offset = timedelta(milliseconds=self.offset_ms)

    def next_after(self, after: datetime) -> datetime | None:
        return next_slot(self.core, after=after.astimezone(UTC), offset=self.offset)

    def remaining_estimate(self, last_run_at: datetime) -> timedelta | None:
        nxt = self.next_after(self.maybe_make_aware(last_run_at))
        if nxt is None:
            return None
        return nxt - self.maybe_make_aware(self.now())

    def is_due(self, last_run_at: datetime) -> schedstate:
        rem = self.remaining_estimate(last_run_at)
        if rem is None:
            return schedstate(False, None)
        if rem.total_seconds() <= 0:
            nxt = self.remaining_estimate(self.now())
            return schedstate(True, None if nxt is None else max(nxt.total_seconds(), 0.0))
        return schedstate(False, rem.total_seconds())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NexoSchedule)
            and other.spec == self.spec
            and other.offset_ms == self.offset_ms
        )

    def __hash__(self) -> int:
        return hash((json.dumps(self.spec, sort_keys=True), self.offset_ms))

    def __repr__(self) -> str:
        return f"<NexoSchedule {self.spec} +{self.offset_ms}ms>"

    def __reduce__(self):
        return (self.__class__, (self.spec, self.offset_ms))


class NexoJSONEncoder(RedBeatJSONEncoder):
    def default(self, obj: Any) -> Any:
        if isinstance(obj, NexoSchedule):
            return schedule_json(obj.spec, obj.offset_ms)
        return super().default(obj)


class NexoJSONDecoder(RedBeatJSONDecoder):
    def dict_to_object(self, d: dict[str, Any]) -> Any:
        if d.get("__type__") == "nexopoll":
            return NexoSchedule(d["schedule"], d.get("offset_ms", 0))
        return super().dict_to_object(d)


def schedule_json(spec: dict[str, Any], offset_ms: int) -> dict[str, Any]:
    return {"__type__": "nexopoll", "schedule": spec, "offset_ms": offset_ms}


class NexoEntry(RedBeatSchedulerEntry):
    @staticmethod
    def decode_definition(definition: str) -> dict[str, Any]:
        return json.loads(definition, cls=NexoJSONDecoder)

    @property
    def score(self) -> float:
        due = self.due_at
        return -1 if due is None else due.timestamp()

    def save(self) -> NexoEntry:
        definition = {
            "name": self.name,
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "options": self.options,
            "schedule": self.schedule,
            "enabled": self.enabled,
        }
        meta = {"last_run_at": self.last_run_at}
        client = get_redis(self.app)
        with client.pipeline() as pipe:
            pipe.hset(self.key, "definition", json.dumps(definition, cls=NexoJSONEncoder))
            pipe.hsetnx(self.key, "meta", json.dumps(meta, cls=RedBeatJSONEncoder))
            pipe.zadd(self.app.redbeat_conf.schedule_key, {self.key: self.score})
            pipe.execute()
        return self
