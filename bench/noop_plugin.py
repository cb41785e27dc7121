"""A no-op subprocess plugin speaking the raw wire (stdlib only): the bench's plugin kinds.

Every ``poll_tick`` gets an empty success reply; it serves until stdin closes.
"""

import json
import sys

for line in sys.stdin.buffer:
    msg = json.loads(line)
    if msg.get("method") == "poll_tick":
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"next_cursor": None}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
