"""``make run`` / ``make stop``: start the local stack, and stop it for good.

``python -m nexopoll.devstack run PIDFILE -- honcho start …`` runs honcho as a child
and records its own pid in PIDFILE. SIGTERM or SIGINT (``make stop``, Ctrl-C) is
passed on to honcho, which stops every process; the stack then exits 0, so ``make
run`` ends cleanly (honcho alone exits 143 or 130: make's "Error 143").

``python -m nexopoll.devstack stop PIDFILE`` signals that process and returns only
once it and every process under it (honcho, web, worker, beat, flower, their pool
children) have exited: it polls their pids (every 50 ms, at most ``--timeout``
seconds, then SIGKILLs what is left), so ``make stop && make run`` finds the ports
free. Standard library only: ``make stop`` needs no virtualenv.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_SECS = 0.05


# --- run ---------------------------------------------------------------------------
def run(pidfile: Path, command: list[str]) -> int:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{os.getpid()}\n")
    stopping: list[int] = []
    child = subprocess.Popen(command)

    def forward(signum: int, frame: object) -> None:
        stopping.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        rc = child.wait()
    finally:
        _remove_if_ours(pidfile)
    # stopped on purpose: a clean exit (honcho says 143 / 130 then)
    return 0 if stopping else rc


def _remove_if_ours(pidfile: Path) -> None:
    try:
        if pidfile.read_text().strip() == str(os.getpid()):
            pidfile.unlink()
    except OSError:
        pass


# --- stop --------------------------------------------------------------------------
def stop(pidfile: Path, timeout: float = 30.0) -> int:
    """Stop the stack of ``pidfile`` and wait for all its processes; 0 when none ran."""
    try:
        root = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        _say("no make run processes are running")
        return 0
    if not _alive(root):
        _say("no make run processes are running")
        pidfile.unlink(missing_ok=True)
        return 0
    started = time.monotonic()
    pids = {root} | descendants(root)
    os.kill(root, signal.SIGTERM)
    deadline = started + timeout
    while time.monotonic() < deadline:
        pids |= descendants(root) if _alive(root) else set()  # processes started meanwhile
        pids = {p for p in pids if _alive(p)}
        if not pids:
            break
        time.sleep(POLL_SECS)
    else:
        for pid in pids:
            _kill(pid)
        _say(f"killed {len(pids)} process(es) still running after {timeout:.0f} s")
        while any(_alive(p) for p in pids) and time.monotonic() < deadline + 5:
            time.sleep(POLL_SECS)
    pidfile.unlink(missing_ok=True)
    _say(f"stopped the make run processes ({time.monotonic() - started:.1f} s)")
    return 0


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (children, grandchildren, …), from ``ps``."""
    try:
        out = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    found: set[int] = set()
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """An exited child its parent has not reaped yet counts as gone (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run COMMAND, recording this process in PIDFILE")
    r.add_argument("pidfile", type=Path)
    r.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("stop", help="stop the processes of PIDFILE and wait for them")
    s.add_argument("pidfile", type=Path)
    s.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.verb == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run needs a command")
        return run(args.pidfile, command)
    return stop(args.pidfile, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
