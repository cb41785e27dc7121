"""A raw Celery no-op task on nexopoll's app: the floor a nexopoll tick is compared to.

Workers load it with ``-I bench.rawtask`` (``celery worker --include``).
"""

from __future__ import annotations

from nexopoll.celery import app


@app.task(name="bench.noop", ignore_result=True)
def noop() -> None:
    return None


_session = None


def _get(url: str):
    global _session
    if _session is None:
        import requests

        _session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=100, pool_maxsize=64)
        _session.mount("http://", adapter)
    return _session.get(url, timeout=30)


@app.task(name="bench.fetch", ignore_result=True)
def fetch(url: str) -> None:
    """The raw baseline of an I/O-bound tick: one GET on a shared, pooled Session."""
    _get(url).json()


@app.task(name="bench.fetch_feed", ignore_result=True)
def fetch_feed(url: str) -> None:
    """The raw baseline of an rss tick: one GET and feedparser on its body."""
    import feedparser

    feedparser.parse(_get(url).content)
