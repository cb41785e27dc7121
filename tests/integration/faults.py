"""Helpers shared by the fault-injection tests (RELIABILITY.md rows)."""

from __future__ import annotations

import socket
import time

from nexopoll.runtime.beat import dispatched_key
from tests.support.procs import CeleryProc, fault_scale

LOCK_TIMEOUT = 3.0  # NEXOPOLL_BEAT_LOCK_TIMEOUT of fault_stack
LOOP = 0.5  # NEXOPOLL_BEAT_MAX_LOOP of fault_stack


def scaled(secs: float) -> float:
    return secs * fault_scale()


def beat_id(proc: CeleryProc) -> str:
    assert proc.proc is not None
    return f"{socket.gethostname()}:{proc.proc.pid}"


def dispatched(stack, proc: CeleryProc) -> int:
    """Ticks that this beat process dispatched (beat counts them in Redis)."""
    return int(stack.redis.hget(dispatched_key(), beat_id(proc)) or 0)


def tick_stamps(stack, job_id: str) -> list[float]:
    return [float(x) for x in stack.redis.lrange(f"test:now:{job_id}", 0, -1)]


def assert_at_most_one_tick_per_slot(
    stamps: list[float], every: float, since: float, extra: int = 1
) -> None:
    """Over [since, last tick], no more ticks than slots (+ ``extra`` for a handover)."""
    window = [s for s in stamps if s >= since]
    if len(window) < 2:
        return
    slots = int((window[-1] - window[0]) / every) + 1
    assert len(window) <= slots + extra, (
        f"{len(window)} ticks for {slots} slots of {every}s: a slot was dispatched twice"
    )


def wait_clock(secs: float) -> None:
    """Let ``secs`` of wall time pass while a fault is in place (the fault's duration)."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        time.sleep(0.05)
