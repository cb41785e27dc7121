"""Memory a block of test code takes, traced with ``tracemalloc``."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """Traces the block's allocations; the list it yields holds their peak (bytes) once
    the block has ended without an error."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
