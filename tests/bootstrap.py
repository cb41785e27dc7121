"""Loaded with ``-p tests.bootstrap`` (see pyproject): sets the environment before
pytest-django imports the Django settings, so the suite never touches the
machine's own Redis on 6379 and uses a private data directory.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REDIS_PORT = _free_port()
os.environ["REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
os.environ["NEXOPOLL_DATA_DIR"] = tempfile.mkdtemp(prefix="nexopoll-test-")
os.environ["NEXOPOLL_EXTRA_POLLERS"] = "tests.support.testpollers:ScriptedPoller"
os.environ["NEXOPOLL_CONFIG"] = str(Path(os.environ["NEXOPOLL_DATA_DIR"]) / "pollers.yaml")
os.environ["NEXOPOLL_LEASE_MIN_SECS"] = "3"
