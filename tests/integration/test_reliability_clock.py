"""RELIABILITY.md row 16: clock skew between workers.

Worker w2 runs under ``faketime -f +300s`` (libfaketime from Debian's ``faketime``
package): its wall clock is five minutes ahead of beat's and w1's. Leases expire on
Redis' clock and slots are decided by beat alone, so both workers must process
ticks, and every slot beat dispatches is ticked exactly once (no tick dropped as
"expired" by the fast clock, none run twice).
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.support.invariants import CursorWatch, assert_invariants
from tests.support.procs import wait_for

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
        watch.until(lambda n=i: len(set(st.sink.item_ids("c16"))) >= n, scaled(30), f"item {i}")
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
        assert "expired" not in w.text().lower(), "a tick was discarded as expired"
    assert_invariants(st, "c16", published, watch)
