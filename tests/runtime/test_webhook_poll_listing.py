"""Issue 5, break 6: a ``webhook_poll`` listing larger than ``seen_capacity`` is
delivered completely, each item once, through the real tick and outbox.

The old ring kept the newest ``seen_capacity`` delivered ids and dropped the
oldest, which were still in the listing: they looked new again and went out
under new delivery ids, round after round, while items past the ring size never
went out at all. Now the ring grows to cover the listing and never evicts an id
the listing still holds; a listing beyond the hard cap stops the job (permanent
error: paused, reason in its status, alert through ``failure_to``).

Outbox rows are counted per item id: "once" means one ``Delivery`` row per id.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, json_reply
from tests.support.jobs import webhook_poll_job

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
MAX_LISTING = 10_000  # the number: a listing up to this size is delivered completely


def poll_job(url: str, **config) -> dict:
    oncall = {"channel": "log", "to": "oncall"}
    return webhook_poll_job("w", url, template="item {id}", failure_to=oncall, **config)


class Listing:
    """The source's current listing, served as ``{"items": [{"id": ...}, ...]}``."""

    def __init__(self, ids: range | list[int]) -> None:
        self.ids = list(ids)

    def doc(self) -> dict:
        return {"items": [{"id": i} for i in self.ids]}


def delivered() -> Counter[str]:
    rows = Delivery.objects.filter(job_id="w", purpose="item").values_list("payload", flat=True)
    return Counter(p["item_id"] for p in rows)


def tick_until_quiet(max_ticks: int) -> list[int]:
    """Tick until a tick dispatches nothing; return the per-tick dispatch counts."""
    counts = []
    for _ in range(max_ticks):
        report = tick_job("w", now=NOW)
        assert report.status == "ok", report.error
        counts.append(report.items_dispatched)
        if report.items_dispatched == 0:
            return counts
    raise AssertionError(f"still dispatching after {max_ticks} ticks: {counts}")


def start(cfg, api: TestHTTPServer, listing: Listing, **config) -> None:
    api.route("GET", "/items", json_reply(listing.doc))
    cfg.write([poll_job(api.url("/items"), **config)])
    cfg.reload()


def test_1500_items_with_seen_capacity_1000_go_out_once_each(cfg) -> None:
    listing = Listing(range(1500))
    with TestHTTPServer() as api:
        start(cfg, api, listing, seen_capacity=1000, max_per_tick=100)
        counts = tick_until_quiet(30)
        assert counts == [100] * 15 + [0]
        got = delivered()
        assert set(got) == {str(i) for i in range(1500)}
        assert max(got.values()) == 1
        for _ in range(3):  # further ticks deliver nothing
            assert tick_job("w", now=NOW).items_dispatched == 0
        assert sum(delivered().values()) == 1500


def test_a_listing_of_10000_items_is_delivered_completely(cfg) -> None:
    listing = Listing(range(MAX_LISTING))
    with TestHTTPServer() as api:
        start(cfg, api, listing, max_per_tick=1000)  # seen_capacity: the default 1000
        counts = tick_until_quiet(15)
        assert counts == [1000] * 10 + [0]
        got = delivered()
        assert len(got) == MAX_LISTING and set(got.values()) == {1}
        assert tick_job("w", now=NOW).items_dispatched == 0


def test_a_listing_over_the_hard_cap_stops_the_job_with_the_reason(cfg) -> None:
    listing = Listing(range(MAX_LISTING + 1))
    with TestHTTPServer() as api:
        start(cfg, api, listing, max_per_tick=1000)
        report = tick_job("w", now=NOW)
        assert report.status == "permanent"
        state = PollState.objects.get(job_id="w")
        assert state.paused
        for text in (state.paused_reason, state.last_error):
            assert f"{MAX_LISTING + 1} items" in text and f"hard cap of {MAX_LISTING}" in text
        alert = Delivery.objects.get(job_id="w", purpose="alert")
        assert f"{MAX_LISTING + 1} items" in alert.payload["text"]
        assert alert.recipient == "oncall"
        assert delivered() == Counter()  # nothing half-delivered
        assert tick_job("w", now=NOW).status == "skipped"  # paused: no silent loop
        assert api.hits("/items") == 1


def test_a_listing_that_shrinks_and_grows_again_repeats_nothing(cfg) -> None:
    listing = Listing(range(1500))
    with TestHTTPServer() as api:
        start(cfg, api, listing, seen_capacity=1000, max_per_tick=400)
        assert tick_until_quiet(10) == [400, 400, 400, 300, 0]
        # shrink: 1000-1499 stay, 50 new ones arrive
        listing.ids = list(range(1000, 1550))
        assert tick_until_quiet(5) == [50, 0]
        # grow: most of the old ones come back, with 500 new ones
        listing.ids = list(range(2049, 1549, -1)) + list(range(50, 1550))
        assert tick_until_quiet(5) == [400, 100, 0]
        got = delivered()
        assert set(got) == {str(i) for i in range(2050)}
        assert max(got.values()) == 1


def test_a_listing_that_grows_while_it_drains_delivers_each_item_once(cfg) -> None:
    listing = Listing(range(500))
    with TestHTTPServer() as api:
        start(cfg, api, listing, seen_capacity=300, max_per_tick=250)
        for size in (500, 1200, 2000, 2600, 2600):  # newest first, as feeds list them
            listing.ids = list(range(size - 1, -1, -1))
            assert tick_job("w", now=NOW).status == "ok"
        tick_until_quiet(20)
        got = delivered()
        assert set(got) == {str(i) for i in range(2600)}
        assert max(got.values()) == 1
