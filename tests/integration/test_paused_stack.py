"""Paused jobs with a real beat and worker: beat sends a paused job nothing (its real
history stays), resume brings it back at its next slot; and a beat stopped (SIGSTOP)
past its lock timeout says, when it runs again, that its lock expired."""

from __future__ import annotations

import signal

import pytest

from nexopoll import services
from nexopoll.runtime import history, keys
from tests.support.procs import wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LOCK_TIMEOUT = 6.0  # tests.support.procs.stack_env


def test_a_real_beat_sends_a_paused_job_nothing(stack):
    stack.write([job("p"), job("clock")])
    stack.reload()
    stack.worker()
    stack.beat()
    wait_for(lambda: stack.ticks("p") >= 2, 40, what="p ticking")
    services.pause_job("p")
    polled = stack.ticks("p")
    total = len(history.entries(stack.redis, "p"))
    clock = stack.ticks("clock")
    # beat's resync (every 2 s here) runs twice meanwhile: it must not bring p back
    wait_for(lambda: stack.ticks("clock") >= clock + 5, 40, what="five more intervals")
    assert stack.ticks("p") == polled
    entries = history.entries(stack.redis, "p")
    # at most one message was already on its way when the pause landed
    assert len(entries) <= total + 1 and all(e.status == "ok" for e in entries[-total:])
    services.resume_job("p")
    wait_for(lambda: stack.ticks("p") > polled, 20, what="p ticks again after resume")


def test_a_beat_stopped_past_its_lock_timeout_says_its_lock_expired(stack):
    stack.write([job("clock")])
    stack.reload()
    beat = stack.beat()
    lock = keys.key_prefix() + ":lock"  # RedBeat's lock key
    wait_for(lambda: stack.redis.exists(lock), 20, what="beat holds its lock")
    beat.signal_group(signal.SIGSTOP)  # hung: nothing refreshes the lock
    try:
        wait_for(lambda: not stack.redis.exists(lock), LOCK_TIMEOUT + 10, what="lock expired")
    finally:
        beat.signal_group(signal.SIGCONT)
    wait_for(lambda: "beat.lock_reacquired" in beat.text(), 20, what="beat notices")
    line = next(x for x in beat.text().splitlines() if "beat.lock_reacquired" in x)
    assert "the lock expired: this beat had not refreshed it for" in line
    assert "(lock timeout 6s; the process was stalled)" in line
    assert "flushed" not in line
