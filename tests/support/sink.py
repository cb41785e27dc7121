"""A webhook receiver on loopback that records every delivery it is sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink:
    """Records ``(delivery_id, body)`` for each POST; answers ``status`` (default 200)."""

    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.status = 200
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with sink._lock:
                    sink.hits.append({
                        "delivery_id": self.headers.get("X-Nexopoll-Delivery-Id"),
                        "signature": self.headers.get("X-Nexopoll-Signature"),
                        "timestamp": self.headers.get("X-Nexopoll-Timestamp"),
                        "body": json.loads(body or b"{}"),
                        "raw": body,
                    })  # fmt: skip
                    status = sink.status
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def items(self, job_id: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                h for h in self.hits
                if h["body"].get("payload", {}).get("item_id") is not None
                and (job_id is None or h["body"].get("job_id") == job_id)
            ]  # fmt: skip

    def item_ids(self, job_id: str | None = None) -> list[int]:
        return [h["body"]["payload"]["item_id"] for h in self.items(job_id)]

    def purposes(self, text: str) -> list[dict[str, Any]]:
        with self._lock:
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
