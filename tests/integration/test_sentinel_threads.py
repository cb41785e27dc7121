"""The Redis primary SIGKILLed while a ``-P threads`` worker has messages in flight.

The chaos run's Sentinel step once lost every worker here: the consumer's reconnect
collects the broker connection (kombu clears the transport's client), then closes the
channel, whose QoS restores its unacked messages through that cleared client
(``AttributeError: 'NoneType' object has no attribute 'hostname'`` from
``_connparams``), outside Celery's recoverable errors: "Unrecoverable error", the
worker exits. The slow sink keeps deliveries in flight (delivered to the worker, not
yet acked) at the kill, so the restore always has work to do.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.invariants import assert_no_loss
from tests.support.procs import wait_for
from tests.support.sink import PATH

from .conftest import job
from .faults import scaled
from .test_reliability_sentinel import (
    pids,
    sentinel_stack,  # noqa: F401 (the fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

JOBS = [f"t{i:02d}" for i in range(8)]
THREADS = ("-P", "threads", "-c", "8")


class SlowHook:
    """The sink's handler, answering after ``secs``; counts requests in progress."""

    def __init__(self, secs: float) -> None:
        self.secs = secs
        self.in_flight = 0
        self.lock = threading.Lock()

    def __call__(self, req):
        with self.lock:
            self.in_flight += 1
        try:
            time.sleep(self.secs)  # a slow receiver, not a wait for an event
            return 200, {}, b""
        finally:
            with self.lock:
                self.in_flight -= 1


def test_primary_killed_with_messages_in_flight_threads_worker_survives(sentinel_stack):  # noqa: F811
    st = sentinel_stack
    group = st.redis_server
    hook = SlowHook(1.5)
    st.sink.server.route("POST", PATH, hook)
    st.write([job(j, every=2) for j in JOBS])
    st.reload()
    for j in JOBS:
        st.publish(j, 1, 2, 3)
    worker = st.worker(extra=THREADS)
    st.beat("a")
    wait_for(lambda: any(st.sink.item_ids(j) for j in JOBS), scaled(40), what="a delivery")
    wait_for(lambda: hook.in_flight >= 2, scaled(30), interval=0.02, what="deliveries in flight")
    worker_pids = pids(worker)
    assert st.redis.wait(1, 5000) == 1, "the replica has caught up"

    old = group.kill_primary()
    wait_for(lambda: group.promoted(old), scaled(30), interval=0.1, what="promotion")
    for j in JOBS:
        st.publish(j, 4, 5, 6)

    def all_delivered() -> bool:
        assert worker.proc.poll() is None, f"the worker exited:\n{worker.text()[-4000:]}"
        return all(set(range(1, 7)) <= set(st.sink.item_ids(j)) for j in JOBS)

    wait_for(all_delivered, scaled(120), 0.2, what="items 1-6 of every job")
    log = worker.text()
    assert "Unrecoverable error" not in log, log[-4000:]
    assert worker.proc.poll() is None and pids(worker) == worker_pids, "worker restarted"
    for j in JOBS:
        assert_no_loss(st.sink, j, range(1, 7))  # every item, duplicates under one id
