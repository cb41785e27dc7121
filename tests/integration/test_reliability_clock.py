"""RELIABILITY.md row 16: clock skew between workers.

Worker w2 runs under ``faketime -f +300s`` (libfaketime from Debian's ``faketime``
package): its wall clock is five minutes ahead of beat's and w1's. Leases expire on
Redis' clock and slots are decided by beat alone, so both workers must process
ticks, and every slot beat dispatches is ticked exactly once (no tick dropped as
"expired" by the fast clock, none run twice). Outbox rows are due by the DB's clock
(``nexopoll.runtime.dbclock``), so rows the fast worker writes reach the receiver as
promptly as the others.
"""

from __future__ import annotations

import bisect
import shutil
import subprocess
import time

import pytest
import yaml

from nexopoll.models import Delivery
from nexopoll.runtime import dbclock, outbox
from tests.support.apibases import point_api
from tests.support.httpserver import TestHTTPServer, json_reply
from tests.support.invariants import CANARY, CursorWatch, assert_invariants, assert_no_secret
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import job
from .faults import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SKEW = 300


def faketime_prefix() -> list[str]:
    exe = shutil.which("faketime")
    if exe is None:
        pytest.skip(
            "ROW 16 NOT TESTED: `faketime` is not installed (apt-get install -y faketime)",
            allow_module_level=False,
        )
    out = subprocess.run(
        [exe, "-f", f"+{SKEW}s", "python3", "-c", "import time; print(time.time())"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    skew = float(out.stdout) - time.time()
    assert abs(skew - SKEW) < 30, f"faketime did not shift the clock: {skew}"
    return [exe, "-f", f"+{SKEW}s"]


def worker_ticks(proc, job_id: str) -> int:
    return proc.text().count(f"tick.done job={job_id} ")


def rows_for(job_id: str) -> set[int]:
    return {
        d.payload.get("item_id")
        for d in Delivery.objects.filter(job_id=job_id, purpose="item")
        if d.status in ("pending", "sent", "held")
    }


def test_row16_a_worker_300s_ahead_still_ticks_every_slot_once(fault_stack):
    prefix = faketime_prefix()
    st = fault_stack
    st.write([job("c16")])
    st.reload()
    watch = CursorWatch("c16")
    w1 = st.worker("w1")
    w2 = st.worker("w2", prefix=prefix)
    st.beat()
    published = []
    for i in range(1, 7):  # items arrive while the slots alternate between the workers
        st.publish("c16", i)
        published.append(i)
        watch.until(lambda n=i: n in rows_for("c16"), scaled(30), f"a delivery row for item {i}")
    wait_for(
        lambda: worker_ticks(w1, "c16") >= 2 and worker_ticks(w2, "c16") >= 2,
        scaled(60),
        what="both workers ticking",
    )
    # one tick per slot over a measured window (slots are 1 s, decided by beat's clock)
    t0, n0 = time.time(), st.ticks("c16")
    wait_for(lambda: time.time() - t0 >= 8, 20, what="an 8 s window")
    t1, n1 = time.time(), st.ticks("c16")
    slots = t1 - t0
    assert n1 - n0 >= int(slots) - 2, f"{n1 - n0} ticks in {slots:.1f} slots: ticks dropped"
    assert n1 - n0 <= int(slots) + 2, f"{n1 - n0} ticks in {slots:.1f} slots: ticks doubled"
    for w in (w1, w2):
        assert "discarding revoked task" not in w.text().lower(), "a tick was dropped as expired"
    assert rows_for("c16") >= set(published)
    assert_no_loss_dup_safe(st.sink, "c16", [])  # what arrived so far: one id per item
    watch.assert_monotonic()
    assert_no_secret(CANARY, [p.log for p in st.procs], st.sink)


def test_row16_items_reach_the_receiver_promptly_whichever_worker_wrote_them(fault_stack):
    prefix = faketime_prefix()
    st = fault_stack
    st.write([job("d16")])
    st.reload()
    watch = CursorWatch("d16")
    st.worker("w1")
    st.worker("w2", prefix=prefix)
    st.beat()
    for i in range(1, 7):
        st.publish("d16", i)
        # promptly: the sweeper runs every second here; a row stamped 300 s ahead waits 300 s
        watch.until(lambda n=i: n in st.sink.item_ids("d16"), scaled(15), f"item {i} delivered")
    assert_invariants(st, "d16", range(1, 7), watch)


def test_row55_one_bot_at_30_per_second_under_burst_with_a_worker_300s_fast(stack, monkeypatch):
    """RELIABILITY row 55: 60 chats, one bot at Telegram's default 30/s, every row due at
    once, two workers of which one runs 300 s fast: turns are spaced by Redis' clock,
    never skipped (≤ 31 sends in any 1 s window at the Bot API), and the rows the fast
    worker puts back on the queue are not held 300 s by the other one."""
    prefix = faketime_prefix()
    token = "555:ROW55-CANARY"
    server = TestHTTPServer().start()
    server.route("POST", f"/bot{token}/sendMessage", json_reply({"ok": True, "result": {}}))
    try:
        point_api(monkeypatch, "telegram", server.base_url)
        monkeypatch.setenv("TG_TOKEN", token)
        doc = {
            "pollers": {
                "default_jitter_ms": 0,
                "jobs": [
                    job("r55", every=3600, config={"deliver": {"channel": "telegram", "to": "1"}})
                ],
            },
            "agents": {"ana": {"telegram": {"account": "ana_bot", "token": "${TG_TOKEN}"}}},
        }
        stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert stack.reload().issues == []
        threads = ("-P", "threads", "-c", "16")  # as in production: many sends at once
        w1 = stack.worker("w1", extra=threads)
        w2 = stack.worker("w2", prefix=prefix, extra=threads)
        now = dbclock.now()
        rows = [
            Delivery(
                job_id="r55",
                agent="ana",
                epoch=1,
                channel="telegram",
                recipient=str(1000 + i),
                payload={"text": f"burst {i}"},
                next_attempt_at=now,
                created_at=now,
            )
            for i in range(60)
        ]
        Delivery.objects.bulk_create(rows)
        ids = [str(r.id) for r in rows]
        started = time.time()
        for i in ids:  # one message each: both workers take a share
            outbox.enqueue([i])

        def all_sent() -> bool:
            return Delivery.objects.filter(id__in=ids, status="sent").count() == len(ids)

        wait_for(all_sent, scaled(60), what="all 60 rows sent")
        took = time.time() - started
        times = sorted(r.at for r in server.requests)
        peak = max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))
        print(
            f"row 55: {len(times)} sends in {times[-1] - times[0]:.2f} s, peak {peak}/s, "
            f"all sent {took:.1f} s after enqueue"
        )
        assert len(times) == 60  # each once
        # promptly: 2 s at 30/s; a re-queued row's eta in the fast worker's clock was held
        # ~30 s here by the other worker (until the sweeper), 300 s without a sweeper
        assert took < scaled(15), f"60 rows took {took:.1f} s"
        assert peak <= 31
        assert times[-1] - times[0] >= 59 / 30 * 0.9  # spaced, not bunched
        assert "nexopoll.deliver" in w1.text() and "nexopoll.deliver" in w2.text()
        assert set(Delivery.objects.filter(id__in=ids).values_list("attempts", flat=True)) == {1}
    finally:
        server.stop()
