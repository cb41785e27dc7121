"""`make stop` returns only once every `make run` process has exited, and `make run`
then ends with status 0 (no "Error 143"): nexopoll/devstack.py against real processes
under a real honcho."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

from nexopoll.devstack import descendants
from tests.support.procs import ROOT, free_port, wait_for

# a server that lingers after SIGTERM (like gunicorn and a Celery worker's warm
# shutdown): it stops its own child first, then keeps its port a while longer
LINGERING = textwrap.dedent(
    """
    import os, signal, socket, subprocess, sys, time
    port, linger = int(sys.argv[1]), float(sys.argv[2])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen()
    def bye(*_):
        child.terminate(); child.wait(); time.sleep(linger); srv.close(); sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    print("listening", flush=True)
    while True:
        time.sleep(1)
    """
)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # an unreaped zombie has exited
        return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"


def _start(tmp_path, port: int, linger: float) -> tuple[subprocess.Popen, object]:
    script = tmp_path / "lingering.py"
    script.write_text(LINGERING)
    (tmp_path / "Procfile").write_text(
        f"web: {sys.executable} {script} {port} {linger}\n"
        f"worker: {sys.executable} -c 'import time; time.sleep(600)'\n"
    )
    pidfile = tmp_path / "data" / "run.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nexopoll.devstack",
            "run",
            str(pidfile),
            "--",
            sys.executable,
            "-m",
            "honcho",
            "start",
            "-f",
            str(tmp_path / "Procfile"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_for(lambda: _listening(port) and pidfile.exists(), 30, what="the stack listening")
    return run, pidfile


def _stop(pidfile) -> subprocess.CompletedProcess:
    """`make stop`, run where `make run` keeps its data/ (the Makefile's own recipe)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "stop",
            f"PYTHON={sys.executable}",
        ],
        cwd=pidfile.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stop_waits_for_every_process_and_run_exits_0(tmp_path):
    port = free_port()
    run, pidfile = _start(tmp_path, port, linger=1.5)
    try:
        tree = descendants(run.pid)
        assert len(tree) >= 4  # honcho, its runners, the web, its child, the worker
        started = time.monotonic()
        stopped = _stop(pidfile)
        took = time.monotonic() - started
        assert stopped.returncode == 0, stopped.stderr
        # returned only once all had exited: the port is free for the next `make run`
        assert not [p for p in tree | {run.pid} if _alive(p)]
        assert _port_free(port)
        assert took >= 1.5  # it waited for the lingering server
        assert run.wait(10) == 0, run.stdout.read().decode()  # no "Error 143" from make
        assert not pidfile.exists()
        # and a second stop finds nothing to do
        assert "no make run processes" in _stop(pidfile).stdout
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)


def test_ctrl_c_ends_run_with_status_0(tmp_path):
    port = free_port()
    run, _ = _start(tmp_path, port, linger=0.2)
    try:
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        assert run.wait(30) == 0
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
