"""The four invariants every fault test asserts (RELIABILITY.md).

- **no loss**: every published item has a delivery row and reached the receiver;
- **dup-safe**: every receiver hit for one item carries the same delivery id;
- **cursor monotonic**: the cursor (an item id) never moves backwards — ``CursorWatch``
  samples it whenever a test waits, so every poll of a wait is a sample;
- **no secret**: the canary value of a ``${VAR}`` is in no DB row, log or request body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

from django.core import serializers

from nexopoll.models import Agent, Delivery, PollJob, PollState

from .procs import wait_for
from .sink import Sink, assert_no_loss_dup_safe

CANARY_VAR = "NEXOPOLL_TEST_CANARY"
CANARY = "canary-7f3a9c1e5b2d4-secret"


def cursor_of(job_id: str) -> int | None:
    raw = PollState.objects.filter(job_id=job_id).values_list("cursor", flat=True).first()
    return None if raw is None else int(bytes(raw))


class CursorWatch:
    """Samples the cursors of ``job_ids``; ``until`` waits and samples on every poll."""

    def __init__(self, *job_ids: str) -> None:
        self.job_ids = job_ids
        self.seen: dict[str, list[int]] = {j: [] for j in job_ids}

    def sample(self) -> None:
        for job_id in self.job_ids:
            value = cursor_of(job_id)
            if value is not None:
                self.seen[job_id].append(value)

    def until(self, cond: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
        def polled() -> Any:
            self.sample()
            return cond()

        return wait_for(polled, timeout, interval=0.05, what=what)

    def assert_monotonic(self) -> None:
        self.sample()
        for job_id, values in self.seen.items():
            backwards = [(a, b) for a, b in pairwise(values) if b < a]
            assert not backwards, f"cursor of {job_id} moved backwards: {backwards}"


def assert_no_loss(sink: Sink, job_id: str, published: Iterable[int]) -> None:
    published = list(published)
    assert_no_loss_dup_safe(sink, job_id, published)
    rows: dict[int, set[str]] = {}
    for d in Delivery.objects.filter(job_id=job_id, purpose="item"):
        rows.setdefault(d.payload.get("item_id"), set()).add(d.status)
    missing = [i for i in published if i not in rows]
    assert not missing, f"items without a delivery row: {missing}"
    lost = {i: s for i, s in rows.items() if not s & {"sent", "pending", "held"}}
    assert not lost, f"items whose rows are neither sent nor pending/held: {lost}"


def assert_no_secret(secret: str, logs: Iterable[Path | str] = (), sink: Sink | None = None):
    dump = serializers.serialize(
        "json",
        [
            *PollJob.objects.all(),
            *PollState.objects.all(),
            *Delivery.objects.all(),
            *Agent.objects.all(),
        ],
    )
    assert secret not in dump, "the secret is in the DB"
    for log in logs:
        text = Path(log).read_text(errors="replace") if isinstance(log, Path) else log
        assert secret not in text, f"the secret is in a log: {log}"
    if sink is not None:
        for hit in sink.hits:
            assert secret.encode() not in hit["raw"], "the secret is in a delivered body"


def assert_invariants(stack: Any, job_id: str, published: Iterable[int], watch: CursorWatch):
    """All four, for one job of a running ``Stack``."""
    assert_no_loss(stack.sink, job_id, published)
    watch.assert_monotonic()
    assert_no_secret(CANARY, [p.log for p in stack.procs], stack.sink)
