"""``python -m nexopoll.workers``: the Procfile's worker, one Celery worker process per core.

A ``-P threads`` worker keeps many ticks in flight but is bound by the GIL to one core,
so the Procfile starts this launcher instead of one ``celery worker``: it starts
``NEXOPOLL_WORKER_PROCESSES`` workers (default: the number of cores this process may
run on), each ``-P threads -c NEXOPOLL_WORKER_THREADS`` (default 64) with its own node
name ``worker<i>@%h``. Arguments after the launcher's own go to every worker (e.g.
``python -m nexopoll.workers -Q nexopoll`` for a tick-only pool).

SIGTERM, SIGINT and SIGQUIT are passed on to every worker (Celery's warm shutdown, a
second SIGINT its cold one); the launcher exits when they have all exited, with the
first non-zero exit status among them. Each worker runs in a process group of its own,
so a signal sent to the launcher's whole group (Ctrl-C in a terminal, a supervisor's
``killpg``) reaches it once, through the launcher, not twice (two SIGINTs would be a
cold shutdown); on Linux a worker also gets SIGTERM if the launcher itself dies.
A worker that exits on its own (crashed, killed) is reported and ends the group: the
others get SIGTERM, and the launcher exits non-zero, so the supervisor (honcho,
systemd, the container runtime) sees one failed process and restarts the whole worker,
as it would a single ``celery worker``.
Standard library only.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
POLL_SECS = 0.1
DEFAULT_THREADS = 64


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _positive(name: str, raw: str | None, default: int) -> int:
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SystemExit(f"nexopoll.workers: {name} must be a whole number >= 1, not {raw!r}")
    return value


def worker_commands(processes: int, threads: int, extra: Sequence[str] = ()) -> list[list[str]]:
    """The ``celery worker`` command line of each worker process."""
    return [
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "nexopoll",
            "worker",
            "-l",
            "info",
            "-P",
            "threads",
            "-c",
            str(threads),
            "-n",
            f"worker{i}@%h",
            "-E",
            "--without-gossip",
            "--without-mingle",
            *extra,
        ]
        for i in range(1, processes + 1)
    ]


def _own_group(parent: int) -> None:
    """In each worker before it runs: a process group of its own, and (Linux) SIGTERM
    when the launcher dies, so no worker outlives it unnoticed."""
    os.setpgid(0, 0)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the launcher's signals still reach it
        pass
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


def _say(text: str) -> None:
    sys.stderr.write(f"nexopoll.workers: {text}\n")
    sys.stderr.flush()


def supervise(commands: Sequence[Sequence[str]]) -> int:
    """Run ``commands`` side by side until all have exited; see the module doc."""
    children: list[subprocess.Popen] = []
    stopping: list[int] = []

    def forward(signum: int, frame: object) -> None:
        stopping.append(signum)
        for child in children:
            if child.poll() is None:
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}  # for the whole run
    setup = functools.partial(_own_group, os.getpid())
    try:
        for cmd in commands:
            if stopping:  # signalled while starting: start no more
                break
            children.append(subprocess.Popen(list(cmd), preexec_fn=setup))
        _say(f"started {len(children)} worker processes: {', '.join(str(c.pid) for c in children)}")
        status = 0
        reported: set[int] = set()
        while any(c.poll() is None for c in children):
            for i, child in enumerate(children, 1):
                rc = child.returncode
                if rc is None or child.pid in reported:
                    continue
                reported.add(child.pid)
                if rc != 0 and status == 0:
                    status = 1 if rc < 0 else rc
                if not stopping:  # exited on its own: the group ends
                    _say(
                        f"worker {i} (pid {child.pid}) exited with status {rc}: stopping the others"
                    )
                    forward(signal.SIGTERM, None)
                    status = status or 1
            time.sleep(POLL_SECS)
        for child in children:
            rc = child.wait()
            if rc != 0 and status == 0 and child.pid not in reported:
                status = 1 if rc < 0 else rc
        return status
    finally:
        # a late signal (a supervisor repeating its SIGTERM) must not kill the launcher
        # with the default action now that its workers are gone: ignore it
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nexopoll.workers",
        description="Start one Celery threads worker per core (NEXOPOLL_WORKER_PROCESSES, "
        "NEXOPOLL_WORKER_THREADS); other arguments go to every worker.",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the commands, start none")
    args, extra = ap.parse_known_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
    from django.conf import settings  # the sizes are settings; the launcher needs no app

    processes = _positive("NEXOPOLL_WORKER_PROCESSES", settings.NEXOPOLL_WORKER_PROCESSES, cores())
    threads = _positive(
        "NEXOPOLL_WORKER_THREADS", settings.NEXOPOLL_WORKER_THREADS, DEFAULT_THREADS
    )
    commands = worker_commands(processes, threads, extra)
    if args.dry_run:
        for cmd in commands:
            sys.stdout.write(" ".join(cmd) + "\n")
        return 0
    return supervise(commands)


if __name__ == "__main__":
    sys.exit(main())
