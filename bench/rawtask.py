"""A raw Celery no-op task on nexopoll's app: the floor a nexopoll tick is compared to.

Workers load it with ``-I bench.rawtask`` (``celery worker --include``).
"""

from __future__ import annotations

from nexopoll.celery import app


@app.task(name="bench.noop", ignore_result=True)
def noop() -> None:
    return None
