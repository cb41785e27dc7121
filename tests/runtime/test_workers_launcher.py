"""``python -m nexopoll.workers``: N worker processes, signals passed on, one death ends all.

The supervision is tested with stand-in children (small Python processes that record
the signal they got), the command line with ``--dry-run``, and one real start of two
Celery workers against a private Redis (node names ``worker1@``/``worker2@``, both
ready, SIGTERM stops both and the launcher exits 0).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from nexopoll import workers
from tests.support.procs import ROOT, wait_for

# a child that writes "ready" to its file, then the name of the signal it gets, and exits
CHILD = """
import signal, sys, time
out = sys.argv[1]
def stop(signum, frame):
    open(out, "a").write(signal.Signals(signum).name + "\\n")
    sys.exit(0)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
    signal.signal(s, stop)
open(out, "a").write("ready\\n")
while True:
    time.sleep(0.05)
"""

LAUNCH = "import sys; from nexopoll.workers import supervise; sys.exit(supervise({cmds!r}))"


def launch(tmp_path: Path, n: int) -> tuple[subprocess.Popen, list[Path]]:
    files = [tmp_path / f"child{i}" for i in range(n)]
    cmds = [[sys.executable, "-c", CHILD, str(f)] for f in files]
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH.format(cmds=cmds)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as under honcho or a terminal
    )
    wait_for(
        lambda: all(f.exists() and "ready" in f.read_text() for f in files),
        20,
        what="every child started",
    )
    return proc, files


def children(proc: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_starts_n_children_and_passes_the_signal_on_to_each(tmp_path, sig):
    proc, files = launch(tmp_path, 3)
    assert len(children(proc)) == 3
    proc.send_signal(sig)
    assert proc.wait(20) == 0
    for f in files:
        assert f.read_text().split() == ["ready", sig.name]
    assert "started 3 worker processes" in proc.stderr.read()


def test_a_signal_to_the_whole_group_reaches_each_child_once(tmp_path):
    """Ctrl-C in a terminal, or a supervisor's killpg: one SIGINT per worker (Celery's
    warm shutdown), not the group's and the launcher's (two would be a cold shutdown)."""
    proc, files = launch(tmp_path, 2)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(20) == 0
    for f in files:
        assert f.read_text().split() == ["ready", "SIGINT"]


def test_a_killed_launcher_takes_its_children_with_it(tmp_path):
    proc, files = launch(tmp_path, 2)
    kids = children(proc)
    proc.kill()  # SIGKILL: nothing forwarded; PR_SET_PDEATHSIG sends each SIGTERM
    proc.wait(10)
    wait_for(
        lambda: all(f.read_text().split() == ["ready", "SIGTERM"] for f in files),
        20,
        what="every child got SIGTERM",
    )
    psutil.wait_procs(kids, timeout=10)


def test_a_child_that_dies_is_reported_and_ends_the_group(tmp_path):
    proc, files = launch(tmp_path, 3)
    victim, *others = children(proc)
    victim.kill()
    assert proc.wait(20) != 0
    err = proc.stderr.read()
    assert f"(pid {victim.pid}) exited with status -9: stopping the others" in err, err
    for other in others:
        assert not other.is_running() or other.status() == psutil.STATUS_ZOMBIE
    # the survivors got SIGTERM (Celery's warm shutdown), the victim nothing
    assert sorted(f.read_text().split() for f in files) == [
        ["ready"],
        ["ready", "SIGTERM"],
        ["ready", "SIGTERM"],
    ]


def test_the_command_line_per_process(settings, capsys):
    # the sizes are settings (NEXOPOLL_WORKER_PROCESSES / _THREADS in the environment)
    settings.NEXOPOLL_WORKER_PROCESSES = "3"
    settings.NEXOPOLL_WORKER_THREADS = "16"
    assert workers.main(["--dry-run", "-Q", "nexopoll"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines, 1):
        assert f" -P threads -c 16 -n worker{i}@%h " in line and line.endswith(" -Q nexopoll")
    settings.NEXOPOLL_WORKER_PROCESSES = ""
    assert workers.main(["--dry-run"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == workers.cores()
    settings.NEXOPOLL_WORKER_PROCESSES = "0"
    with pytest.raises(SystemExit, match="NEXOPOLL_WORKER_PROCESSES must be"):
        workers.main(["--dry-run"])


def test_the_procfile_worker_is_the_launcher():
    line = next(x for x in (ROOT / "Procfile").read_text().splitlines() if x.startswith("worker:"))
    assert "python -m nexopoll.workers" in line


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_two_real_celery_workers_start_and_stop_on_sigterm(redis_server, tmp_path):
    from tests.support.procs import stack_env

    log = tmp_path / "workers.log"
    db = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    env = stack_env(
        redis_server.url,
        db,
        str(tmp_path / "p.yaml"),
        NEXOPOLL_WORKER_PROCESSES="2",
        NEXOPOLL_WORKER_THREADS="2",
    )
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nexopoll.workers"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: log.read_text().count(" ready.") >= 2 or proc.poll() is not None,
            90,
            what="both workers ready",
        )
        text = log.read_text()
        assert proc.poll() is None, text[-3000:]
        assert "worker1@" in text and "worker2@" in text
        assert len(children(proc)) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            for child in children(proc):
                child.kill()
            proc.kill()
