"""A loopback HTTP/1.1 server that answers every request after a fixed delay.

``python -m bench.slowserver PORT DELAY_MS [HOSTS]``: listens on PORT of 127.0.0.1 …
127.0.0.HOSTS (default 1; every loopback address is the machine's own, so HOSTS
addresses are HOSTS distinct hosts to the per-host politeness caps). ``GET /j/<job_id>``
answers ``[]`` (application/json, keep-alive) after DELAY_MS, ``GET /f/<job_id>`` the
same RSS feed of FEED_ITEMS items (no validators: every poll is a full fetch and parse),
and both record ``(job_id, arrival time)``;
``GET /__stats`` returns ``{"records": [[job_id, ts], ...], "max_in_flight": n,
"requests": n}`` and ``GET /__reset`` clears them. asyncio, one process: thousands of
requests wait together for almost no CPU (the bench measures the worker, not this).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

state = {"records": [], "in_flight": 0, "max_in_flight": 0, "requests": 0}


FEED_ITEMS = 10
FEED = (
    '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><title>Bench</title>'
    "<link>https://bench.example.com/</link>"
    + "".join(
        f"<item><title>Item {i}</title><link>https://bench.example.com/{i}</link>"
        f"<guid>bench-{i}</guid><pubDate>Thu, 01 Jan 2026 {i:02d}:00:00 GMT</pubDate></item>"
        for i in range(FEED_ITEMS)
    )
    + "</channel></rss>"
).encode()


def response(body: bytes, status: str = "200 OK", kind: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            path = line.split(" ")[1] if " " in line else "/"
            length = 0
            for h in head.split(b"\r\n"):
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if path == "/__stats":
                body = json.dumps(
                    {k: state[k] for k in ("records", "max_in_flight", "requests")}
                ).encode()
                writer.write(response(body))
            elif path == "/__reset":
                state.update(records=[], max_in_flight=state["in_flight"], requests=0)
                writer.write(response(b"{}"))
            else:
                state["requests"] += 1
                state["records"].append((path.rsplit("/", 1)[-1], time.time()))
                state["in_flight"] += 1
                state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
                try:
                    await asyncio.sleep(delay)
                finally:
                    state["in_flight"] -= 1
                if path.startswith("/f/"):
                    writer.write(response(FEED, kind="application/rss+xml"))
                else:
                    writer.write(response(b"[]"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port: int, delay: float, hosts: int = 1) -> None:
    addresses = [f"127.0.0.{i}" for i in range(1, hosts + 1)]
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delay), addresses, port, backlog=4096
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    hosts = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]) / 1000, hosts))
