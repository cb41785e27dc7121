"""Beat failover (RELIABILITY row 5, issue 6): SIGKILL the beat that holds the lock
while a standby runs. Dispatch stops for less than the lock timeout + 2 s, and every
slot that fell into the outage runs once, late rather than never."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest

from nexopoll.core.schedule import EverySchedule, stagger_offset
from nexopoll.runtime import keys
from tests.support.procs import CeleryProc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

EVERY = 15.0  # longer than the outage, so each job misses at most one slot
LOCK_TIMEOUT = 6.0  # tests.support.procs.stack_env
JOBS = 30  # phase-spread over the interval: about two slots due every second


def spec(job_id: str) -> dict:
    return {
        "id": job_id,
        "kind": "scripted",
        "agent": "ana",
        "schedule": {"every_secs": EVERY, "stagger_jitter_ms": int(EVERY * 1000)},
        "config": {"deliver": {"channel": "webhook", "to": "ops"}},
    }


def holder_pid(stack) -> int | None:
    beat = stack.redis.get(keys.heartbeat_key())
    return int(beat.split(":")[1]) if beat else None


def test_a_standby_beat_takes_over_within_the_lock_timeout_and_runs_missed_slots(stack):
    ids = [f"f{i:02d}" for i in range(JOBS)]
    stack.write([spec(j) for j in ids])
    stack.reload()
    stack.worker(extra=("-P", "threads", "-c", "8"))
    a = stack.beat()
    wait_for(lambda: holder_pid(stack) == a.proc.pid, 30, what="beat A holds the lock")
    b = CeleryProc("beat", stack.env(), "standby").start(wait=False)
    stack.procs.append(b)
    started = time.time()
    wait_for(lambda: sum(stack.ticks(j) for j in ids) >= 10, 40, what="ticks flowing")
    a.kill()  # SIGKILL, lock held: it expires after LOCK_TIMEOUT
    killed = time.time()
    wait_for(lambda: holder_pid(stack) == b.proc.pid, 30, what="standby B takes over")
    time.sleep(EVERY + 3)  # every job reaches a slot after the takeover (event: the clock)
    end = time.time() - 3  # ticks of slots before `end` have started by now

    sched = EverySchedule(timedelta(seconds=EVERY))
    starts = []
    for j in ids:
        offset = stagger_offset(j, timedelta(seconds=EVERY), sched).total_seconds()
        nows = [float(x) for x in stack.redis.lrange(f"test:now:{j}", 0, -1)]
        starts += nows
        slots = [math.floor((t - offset) / EVERY) for t in nows if t >= started]
        assert len(slots) == len(set(slots)), f"{j}: a slot ran twice: {slots}"
        first = math.ceil((started + 1 - offset) / EVERY)
        last = math.floor((end - offset) / EVERY)
        missing = set(range(first, last + 1)) - set(slots)
        assert not missing, f"{j}: slots never ran: {sorted(missing)} of {first}..{last}"
    after = sorted(t for t in starts if t >= killed)
    before = max(t for t in starts if t < killed)
    outage = after[0] - max(before, killed)
    print(
        f"\nbeat failover: dispatch stopped {outage:.2f} s after SIGKILL "
        f"(lock timeout {LOCK_TIMEOUT:g} s)"
    )
    assert outage < LOCK_TIMEOUT + 2
    # the slots that fell into the outage ran late, within the outage, not never
    late = [t for t in after if t < killed + outage + 1]
    assert late, "no tick caught up right after the takeover"
