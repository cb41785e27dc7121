"""Loaded with ``-p tests.bootstrap`` (see pyproject): sets the environment before
pytest-django imports the Django settings, so the suite never touches the
machine's own Redis on 6379 and uses a private data directory.

Every temporary file of a test session lives under one folder,
``$TMPDIR/nexopoll-test-*``: the data directory (SQLite test DB, pollers.yaml),
the redis-server directories, the Celery logs, pytest's ``tmp_path`` folders, and
whatever the worker and beat subprocesses create (they inherit ``TMPDIR``). The
folder is removed when the session finishes; folders left by a session that was
killed (its owner PID is gone) are removed when the next one starts.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

PREFIX = "nexopoll-test-"
OWNER = "owner.pid"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process not yet reaped by its parent is a zombie: dead all the same
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_orphans(parent: Path) -> list[Path]:
    """Remove session folders whose owner process is gone (a killed earlier run)."""
    removed = []
    for folder in parent.glob(PREFIX + "*"):
        try:
            pid = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not ours to judge (no owner file), or kept on purpose: leave it
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


_PARENT = Path(tempfile.gettempdir())
remove_orphans(_PARENT)
SESSION_TMP = Path(tempfile.mkdtemp(prefix=PREFIX, dir=_PARENT))
(SESSION_TMP / OWNER).write_text(str(os.getpid()))
# tempfile.mkdtemp/mkstemp in this process and TMPDIR in every child land in SESSION_TMP
tempfile.tempdir = str(SESSION_TMP)
os.environ["TMPDIR"] = str(SESSION_TMP)

REDIS_PORT = _free_port()
os.environ["REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
os.environ["NEXOPOLL_DATA_DIR"] = str(SESSION_TMP)
os.environ["NEXOPOLL_EXTRA_POLLERS"] = "tests.support.testpollers:ScriptedPoller"
os.environ["NEXOPOLL_CONFIG"] = str(SESSION_TMP / "pollers.yaml")
os.environ["NEXOPOLL_LEASE_MIN_SECS"] = "3"


def pytest_sessionfinish(session, exitstatus):
    """Runs after every fixture (the session's redis-server included) was torn down."""
    if os.environ.get("NEXOPOLL_KEEP_TEST_TMP"):
        print(f"\nnexopoll: kept the session's temporary files in {SESSION_TMP}")
        (SESSION_TMP / OWNER).unlink(missing_ok=True)  # kept: no later session removes it
        return
    shutil.rmtree(SESSION_TMP, ignore_errors=True)
