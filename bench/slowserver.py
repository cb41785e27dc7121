"""A loopback HTTP/1.1 server that answers every request after a fixed delay.

``python -m bench.slowserver PORT DELAY_MS``: ``GET /j/<job_id>`` answers ``[]``
(application/json, keep-alive) after DELAY_MS and records ``(job_id, arrival time)``;
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


def response(body: bytes, status: str = "200 OK") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
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
                writer.write(response(b"[]"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port: int, delay: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delay), "127.0.0.1", port, backlog=4096
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]) / 1000))
