"""rss bench: worker CPU and throughput of rss ticks beside no-op ticks, in one run.

Run from the repo root: ``PYTHONPATH=. .venv/bin/python -m bench.rss [--feeds N]``.

Three rows, each on a fresh private Redis + SQLite stack (bench/stack.py), one worker
``-P prefork -c 1``, ROUNDS tick messages per job queued round-robin before the worker
starts (as bench/run.py's worker part does). The first round is warm-up (definition
cache, connection pool, the rss jobs' first full fetch with ``first_run: skip``) and is
left out; CPU is the worker's process tree (psutil), ticks are counted in the DB
(``ticks_total``) over the measured window.

- ``noop``: N ``noop`` jobs (bench/noop.py): the runtime's own cost per tick.
- ``rss 304``: N ``rss`` jobs against a loopback feed server answering 304 to the
  stored ETag: conditional GET through nexopoll.net (SSRF guard on), no parse, no
  outbox row.
- ``rss changed``: the same, but every request gets a feed of FEED_ITEMS entries with
  one new entry on top (a new ETag): full GET, hostile-XML scan, feedparser, dedup
  against the ring, one outbox row and its delivery through the ``log`` channel (the
  deliver task runs on the same worker and is counted in the CPU).

The feed server runs in this process (threads), so its CPU is not the worker's.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.pollers.rss_fixtures import FeedSite, rss
from tests.support.httpserver import Handler, RecordedRequest, Reply

from .common import RESULTS, JobDBs, publish
from .stack import Stack, job_id, migrated_template, wait_for, worker_args

ROUNDS = 3
FEED_ITEMS = 20


class FeedServer:
    """Loopback HTTP/1.1 keep-alive server for the feed routes, one ``send`` per response.

    tests.support's TestHTTPServer writes headers and body separately; on a kept-alive
    connection Nagle's algorithm then holds the body until the client's delayed ACK
    (~40 ms), which would measure the loopback, not the poller.
    """

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.routes = routes
        self.hits = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> FeedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with outer._lock:
                    outer.hits += 1
                req = RecordedRequest(
                    "GET",
                    self.path,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    b"",
                    time.monotonic(),
                )
                handler = outer.routes.get(self.path)
                status, headers, body = handler(req) if handler else (404, {}, b"")
                head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

            def log_message(self, *args: Any) -> None:
                pass

        return _Handler


class ChangingFeed:
    """Every request sees one more entry on top (and so a new ETag): never a 304."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = FEED_ITEMS
        self.lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Reply:
        with self.lock:
            self.count += 1
            top = self.count
        items = [(f"{self.name}-{k}", f"entry {k}") for k in range(top, top - FEED_ITEMS, -1)]
        body = rss(*items, title=self.name)
        return 200, {"Content-Type": "application/rss+xml", "ETag": f'"{top}"'}, body


def rss_jobs(n: int, server: FeedServer) -> list[dict[str, Any]]:
    return [
        {
            "id": job_id(i),
            "kind": "rss",
            "agent": "bench",
            "schedule": {"every_secs": 3600},
            "config": {
                "feed_url": server.url(f"/f{i}.xml"),
                "allow_private_networks": True,
                "first_run": "skip",
                "deliver": {"channel": "log", "to": "bench"},
            },
        }
        for i in range(n)
    ]


def ticks_total(stack: Stack) -> int:
    ((total,),) = stack.sql("SELECT COALESCE(SUM(ticks_total), 0) FROM poll_state")
    return int(total)


def measure(stack: Stack, jobs: int) -> dict[str, Any]:
    """Queue ROUNDS ticks per job, start one worker, measure after the first round."""
    calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
    publish(stack, "nexopoll.tick", calls)
    worker = stack.start("worker", worker_args(1, "rss"), "rss")
    total = len(calls)
    wait_for(lambda: stack.queued() <= total - jobs or not worker.alive(), 300, 0.002, "warm-up")
    t0, cpu0, n0 = time.monotonic(), worker.cpu(), ticks_total(stack)
    done = wait_for(
        lambda: (stack.queued() == 0 and stack.unacked() == 0) or not worker.alive(),
        600,
        0.01,
        "queue drained",
    )
    t1, cpu1, n1 = time.monotonic(), worker.cpu(), ticks_total(stack)
    assert done and worker.alive(), f"worker died:\n{worker.text()[-2000:]}"
    worker.stop()
    ticks, secs, cpu = n1 - n0, t1 - t0, cpu1 - cpu0
    statuses = dict(stack.sql("SELECT last_status, COUNT(*) FROM poll_state GROUP BY 1"))
    ((items,),) = stack.sql("SELECT COUNT(*) FROM poll_outbox WHERE purpose = 'item'")
    return {
        "ticks": ticks,
        "secs": secs,
        "cpu_s": cpu,
        "ticks_per_s": ticks / secs,
        "cpu_ms_per_tick": 1000 * cpu / ticks,
        "status": statuses,
        "outbox_items": items,
    }


def rss_row(template: Path, n: int, changing: bool) -> dict[str, Any]:
    routes: dict[str, Handler] = {}
    for i in range(n):
        items = [(f"f{i}-{k}", f"entry {k}") for k in range(FEED_ITEMS, 0, -1)]
        routes[f"/f{i}.xml"] = ChangingFeed(f"f{i}") if changing else FeedSite(rss(*items))
    with FeedServer(routes) as server:
        stack = Stack(template)
        try:
            doc = {
                "pollers": {"default_jitter_ms": 0, "jobs": rss_jobs(n, server)},
                "agents": {"bench": {"log": {}}},
            }
            stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
            stack.manage("pollers", "reload")
            res = measure(stack, n)
        finally:
            stack.close()
        res["http_requests"] = server.hits
    res["not_modified"] = sum(getattr(h, "not_modified", 0) for h in routes.values())
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--feeds", type=int, default=300, help="N jobs per row")
    args = p.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.monotonic()
    template = migrated_template()
    noop_stack = Stack(JobDBs(template).get(args.feeds, 3600))
    try:
        rows = {"noop": measure(noop_stack, args.feeds)}
    finally:
        noop_stack.close()
    rows["rss 304"] = rss_row(template, args.feeds, changing=False)
    rows["rss changed"] = rss_row(template, args.feeds, changing=True)
    base = rows["noop"]["cpu_ms_per_tick"]
    out = [
        f"nexopoll rss bench {started}  (N={args.feeds} jobs per row, {ROUNDS} ticks each, "
        f"first round warm-up; worker prefork -c 1)",
        f"   {'':12}{'ms CPU/tick':>12}{'ticks/s':>9}{'ticks':>7}{'x noop':>8}"
        f"{'304s':>6}{'outbox':>8}",
    ]
    for name, r in rows.items():
        out.append(
            f"   {name:12}{r['cpu_ms_per_tick']:12.3f}{r['ticks_per_s']:9.0f}{r['ticks']:7d}"
            f"{r['cpu_ms_per_tick'] / base:8.2f}{r.get('not_modified', 0):6d}"
            f"{r['outbox_items']:8d}"
        )
    out.append(f"   total bench time {time.monotonic() - t_start:.0f} s")
    print("\n".join(out))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench-rss-{started.replace(':', '')}.json"
    path.write_text(json.dumps({"started": started, "args": vars(args), "rows": rows}, indent=2))
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
