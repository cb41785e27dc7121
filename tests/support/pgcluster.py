"""A private PostgreSQL cluster (``initdb`` + ``pg_ctl`` as the postgres user, on a free
port, in a temp dir): the DB restart test (RELIABILITY row 17) and the chaos run stop it
hard and start it again, never the machine's server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .procs import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivateCluster:
    """``initdb`` + ``pg_ctl`` as the postgres user in a temp dir, on a free port."""

    def __init__(self) -> None:
        # not under the session's private temp folder (mode 0700, owned by root): the
        # postgres user must reach its data directory; destroy() removes it
        self.dir = Path(tempfile.mkdtemp(prefix="nexopoll-pg-", dir="/tmp"))
        shutil.chown(self.dir, "postgres")
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/nexopoll"

    def _pg(self, tool: str, *args: str) -> None:
        cmd = ["runuser", "-u", "postgres", "--", str(PG_BIN / tool), *args]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE nexopoll")

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg(
            "pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"
        )

    def crash(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.crash()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def pg_tools_available() -> bool:
    if not shutil.which("runuser") or not (PG_BIN / "initdb").exists():
        return False
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return os.geteuid() == 0
