"""A webhook receiver on loopback that records every delivery it is sent.

Built on :class:`tests.support.httpserver.TestHTTPServer`: each POST to ``/hook``
is answered 200 and kept in the server's request log; ``hits`` reads it back as
``(delivery_id, signature, timestamp, body, raw)`` records.
"""

from __future__ import annotations

import json
from typing import Any

from .httpserver import TestHTTPServer, reply

PATH = "/hook"


class Sink:
    def __init__(self) -> None:
        self.server = TestHTTPServer().route("POST", PATH, reply(200))

    @property
    def url(self) -> str:
        return self.server.url(PATH)

    def __enter__(self) -> Sink:
        self.server.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.stop()

    @property
    def hits(self) -> list[dict[str, Any]]:
        return [
            {
                "delivery_id": r.header("X-Nexopoll-Delivery-Id"),
                "signature": r.header("X-Nexopoll-Signature"),
                "timestamp": r.header("X-Nexopoll-Timestamp"),
                "body": json.loads(r.body or b"{}"),
                "raw": r.body,
            }
            for r in self.server.requests
            if r.method == "POST" and r.path == PATH
        ]

    def items(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return [
            h
            for h in self.hits
            if h["body"].get("payload", {}).get("item_id") is not None
            and (job_id is None or h["body"].get("job_id") == job_id)
        ]

    def item_ids(self, job_id: str | None = None) -> list[int]:
        return [h["body"]["payload"]["item_id"] for h in self.items(job_id)]

    def purposes(self, text: str) -> list[dict[str, Any]]:
        return [h for h in self.hits if text in h["body"].get("payload", {}).get("text", "")]


def assert_no_loss_dup_safe(sink: Sink, job_id: str, published: list[int]) -> None:
    """Every published id arrived; all arrivals of one id share one delivery id."""
    by_item: dict[int, set[str]] = {}
    for h in sink.items(job_id):
        by_item.setdefault(h["body"]["payload"]["item_id"], set()).add(h["delivery_id"])
    missing = set(published) - set(by_item)
    assert not missing, f"items never delivered: {sorted(missing)}"
    split = {i: ids for i, ids in by_item.items() if len(ids) > 1}
    assert not split, f"items delivered under several delivery ids: {split}"
