"""RELIABILITY.md rows 57-58: a plugin reads no nexopoll process; its whole tree is reaped.

Row 57 runs a real plugin that opens ``/proc/<pid>/environ``, ``maps`` and ``mem`` of
every ancestor (the launcher, this test process: the worker that runs the tick)
and of a nexopoll process started with a canary secret in its environment, next to
a control process without the hardening (which the plugin *can* read when it runs
as the same uid: the probe works). As root the plugin runs without capabilities,
or as ``NEXOPOLL_PLUGIN_USER``; as a plain user it runs as that user and the
non-dumpable flag is what keeps it out (checked with a worker running as nobody).
Row 58 runs 50 ticks of a plugin that double-forks and calls ``setsid``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from nexopoll.core.errors import TransientError
from nexopoll.hardening import is_dumpable
from nexopoll.plugins import poller as plugin_poller
from nexopoll.plugins.poller import Options
from nexopoll.plugins.process import Limits
from nexopoll.plugins.session import PluginTimeout
from nexopoll.plugins.spawn import privilege_args
from tests.support.procs import wait_for

from .conftest import MISBEHAVE, make_ctx
from .test_reliability import LIFECYCLES, gone

ROOT = os.geteuid() == 0
CANARY = "NEXOPOLL-CANARY-" + "7c1e0b9d44aa"
REPO = Path(__file__).resolve().parents[2]
PLUGIN_ENV = {"PLUGIN_CANARY": CANARY}
HOLDER = textwrap.dedent("""
    import sys
    if sys.argv[1] == "harden":
        from nexopoll.hardening import make_undumpable
        assert make_undumpable()
    secret = "kept in memory: " + sys.argv[2]
    print("ready", flush=True)
    sys.stdin.read()
""")


def holder(harden: bool, **popen) -> subprocess.Popen:
    """A process with CANARY in its environment and memory (a nexopoll one, or not)."""
    env = {
        "PATH": os.defpath,
        "PYTHONPATH": str(REPO),
        "DJANGO_SECRET_KEY": CANARY,
        "NEXOPOLL_API_TOKEN": CANARY,
    }
    proc = subprocess.Popen(
        [
            popen.pop("python", sys.executable),
            "-c",
            HOLDER,
            "harden" if harden else "plain",
            CANARY,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        **popen,
    )
    assert proc.stdout.readline() == b"ready\n"
    return proc


@pytest.fixture
def holders():
    made: list[subprocess.Popen] = []

    def start(harden: bool, **popen) -> int:
        made.append(holder(harden, **popen))
        return made[-1].pid

    yield start
    for p in made:
        p.kill()
        p.wait()


def snoop(p, pids: list[int]) -> dict:
    ack = p.tick(make_ctx("misbehave", {"mode": "snoop", "needle": CANARY, "pids": pids}))
    report = json.loads(ack.next_cursor)
    assert report[f"{report['self']}/environ"] == "FOUND"  # its own (manifest env): the probe works
    return report


def found(report: dict, *but: int) -> list[str]:
    """The probes that found the canary, except in the plugin itself and ``but``."""
    skip = (report["self"], *but)
    return [k for k, v in report.items() if v == "FOUND" and int(k.split("/")[0]) not in skip]


def denied(report: dict, pid: int) -> bool:
    return all(report[f"{pid}/{w}"].startswith("denied") for w in ("environ", "maps", "mem"))


# -- row 57 -----------------------------------------------------------------------------
def test_57_this_worker_process_is_not_dumpable():
    assert not is_dumpable()  # NexopollConfig.ready() ran in the test process


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_57_plugin_reads_no_nexopoll_process(plugin, holders, lifecycle):
    worker, control = holders(harden=True), holders(harden=False)
    report = snoop(plugin(lifecycle=lifecycle, env=PLUGIN_ENV), [worker, control])
    launcher, me = report["ancestors"][:2]
    assert me == os.getpid()  # the worker that runs the tick: the plugin's grandparent
    for pid in (launcher, me, worker):
        assert denied(report, pid), report
    if ROOT:  # without capabilities, root reads no process that has some, hardened or not
        assert report["uid"] == 0 and denied(report, control), report
        assert not found(report), report
    else:  # same uid: only the non-dumpable flag protects, and the control is readable
        assert not found(report, control), report


@pytest.mark.skipif(not ROOT, reason="switching users needs a root worker")
def test_57_plugin_user_runs_the_plugin_as_that_user(plugin, holders):
    options = Options(limits=Limits(user="nobody"), restart_base_secs=0.2, restart_cap_secs=1)
    worker, control = holders(harden=True), holders(harden=False)
    p = plugin(lifecycle="ephemeral", options=options, command="/usr/bin/python3", env=PLUGIN_ENV)
    report = snoop(p, [worker, control])
    assert report["uid"] == 65534
    assert not found(report), report
    for pid in (*report["ancestors"][:2], worker, control):
        assert denied(report, pid), report


@pytest.mark.skipif(
    not ROOT or not os.path.exists("/usr/bin/python3"),
    reason="runs a worker as nobody: needs root and a system python",
)
def test_57_a_worker_that_is_not_root_keeps_its_plugins_out_too(holders):
    """A whole worker as ``nobody``: its plugin runs as nobody as well (same uid), and
    reads neither the worker nor another nexopoll process of that uid."""
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    shared = Path(tempfile.mkdtemp(prefix="nexopoll-nobody-", dir="/tmp"))  # TMPDIR is 0700
    try:
        shared.chmod(0o755)
        (shared / "mis").mkdir(mode=0o755)
        (shared / "mis" / "nexopoll-plugin.toml").write_text(
            textwrap.dedent(f"""
            [plugin]
            id = "mis"
            [plugin.entrypoint]
            command = "{{python}}"
            args = ["{MISBEHAVE}"]
            env = {{ PLUGIN_CANARY = "{CANARY}" }}
            [plugin.poller]
            kinds = ["misbehave"]
            lifecycle = "ephemeral"
        """)
        )
        as_nobody = {
            "user": 65534,
            "group": 65534,
            "extra_groups": [],
            "python": "/usr/bin/python3",
        }
        other, control = holders(harden=True, **as_nobody), holders(harden=False, **as_nobody)
        script = textwrap.dedent(f"""
            import json, os, sys, time
            from nexopoll.hardening import make_undumpable
            make_undumpable()
            from nexopoll.plugins.manifest import parse_manifest
            from nexopoll.plugins.process import Limits, PluginProcess
            from nexopoll.plugins.session import run_tick
            from datetime import UTC, datetime, timedelta
            from nexopoll.core.contract import CancelToken, PollContext
            def make_ctx(kind, config):
                return PollContext(job_id="j", agent_id="a", kind=kind, config=config,
                                   cursor=None, now=datetime.now(UTC),
                                   interval_hint=timedelta(seconds=60), host=None,
                                   cancel=CancelToken(deadline=time.monotonic() + 30))
            path = "{shared}/mis/nexopoll-plugin.toml"
            proc = PluginProcess(parse_manifest(open(path).read(), path), Limits(), os.environ)
            cfg = {{"mode": "snoop", "needle": "{CANARY}", "pids": [{other}, {control}]}}
            ack = run_tick(proc, make_ctx("misbehave", cfg), 20)
            proc.stop()
            print(json.dumps({{"me": os.getpid(), "report": json.loads(ack.next_cursor)}}))
        """)
        env = {
            "PATH": os.defpath,
            "PYTHONPATH": f"{REPO}:{site}",
            "HOME": str(shared),
            "DJANGO_SECRET_KEY": CANARY,
        }
        out = subprocess.run(
            ["/usr/bin/python3", "-c", script],
            env=env,
            cwd=str(shared),
            user=65534,
            group=65534,
            extra_groups=[],
            capture_output=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        result = json.loads(out.stdout.decode().splitlines()[-1])
        report, worker = result["report"], result["me"]
        assert report["uid"] == 65534 and report["ancestors"][1] == worker
        for pid in (report["ancestors"][0], worker, other):
            assert denied(report, pid), report
        assert report[f"{control}/environ"] == "FOUND"  # same uid, not hardened: readable
        assert not found(report, control), report
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


# -- row 58 -----------------------------------------------------------------------------
def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _daemons(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []


@pytest.mark.parametrize("lifecycle", LIFECYCLES)
def test_58_setsid_daemons_holding_the_pipes_are_reaped_over_50_ticks(plugin, lifecycle, tmp_path):
    p = plugin(lifecycle=lifecycle, timeout=10)
    pidfile = tmp_path / "daemons"
    cfg = {"mode": "daemon", "pidfile": str(pidfile)}
    p.tick(make_ctx("misbehave", cfg))  # warm-up: the long-lived process, the first daemon
    threads, fds = threading.active_count(), _fds()
    took = []
    for _ in range(50):
        started = time.monotonic()
        p.tick(make_ctx("misbehave", cfg))
        took.append(time.monotonic() - started)
    assert threading.active_count() <= threads, threading.enumerate()
    assert _fds() <= fds + 4  # a leak is several per tick; Redis may open a connection
    # each tick used to wait ~4 s on the pipes' EOF; none does now, and none slows down
    # (bounds loose for a busy 2-core machine)
    assert max(took) < 3, f"slowest tick {max(took):.2f}s"
    assert sum(took[-10:]) < 2 * sum(took[:10]) + 3, took
    if lifecycle == "ephemeral":  # each tick's tree is reaped when its plugin exits
        wait_for(lambda: len(_daemons(pidfile)) == 51, 5, what="every tick's daemon")
        wait_for(lambda: all(gone(d) for d in _daemons(pidfile)), 5, what="daemons reaped")
    else:  # the daemons belong to the live process's tree until it stops
        plugin_poller.stop_all()
        wait_for(lambda: all(gone(d) for d in _daemons(pidfile)), 10, what="daemons reaped")
    assert threading.active_count() <= threads


def test_58_a_timed_out_tree_with_a_daemon_is_killed_whole(plugin, tmp_path):
    p = plugin(lifecycle="long_lived", timeout=1)
    pidfile = tmp_path / "daemons"
    p.tick(make_ctx("misbehave", {"mode": "daemon", "pidfile": str(pidfile)}))
    with pytest.raises(PluginTimeout):
        p.tick(make_ctx("misbehave", {"mode": "hang", "pidfile": str(tmp_path / "hang")}))
    leader, grandchild = map(int, (tmp_path / "hang").read_text().split())
    wait_for(
        lambda: all(gone(x) for x in (leader, grandchild, *_daemons(pidfile))),
        5,
        what="whole tree gone",
    )


def test_58_no_wait_on_pipe_eof_when_the_launcher_itself_is_killed(plugin, tmp_path):
    """Even with the launcher gone (so nothing reaps the daemon), the next tick finds the
    process dead at once and its reader thread stops: the pipes' EOF is never waited for."""
    p = plugin(lifecycle="long_lived", timeout=10)
    pidfile = tmp_path / "daemons"
    p.tick(make_ctx("misbehave", {"mode": "daemon", "pidfile": str(pidfile)}))
    proc = p.long_lived.proc
    threads = threading.active_count()
    os.kill(proc.pid, signal.SIGKILL)  # no sweep: the daemon keeps the pipes open
    try:
        started = time.monotonic()
        wait_for(lambda: proc.proc.poll() is not None, 5, what="launcher reaped")
        with pytest.raises(TransientError, match="restarting in"):
            p.tick(make_ctx("misbehave", {}))
        assert time.monotonic() - started < 3
        wait_for(lambda: threading.active_count() < threads, 5, what="reader thread stopped")
    finally:
        for d in _daemons(pidfile):
            try:
                psutil.Process(d).kill()
            except psutil.NoSuchProcess:
                pass


# -- the launcher's options and failures --------------------------------------------------
def test_plugin_user_options():
    assert privilege_args("", euid=0) == ["--no-caps"]  # root: no capabilities
    assert privilege_args("", euid=1000) == []  # a plain user: itself
    assert privilege_args("nobody", euid=0) == ["--uid", "65534", "--gid", "65534"]
    assert privilege_args("65534", euid=0) == ["--uid", "65534", "--gid", "65534"]
    assert privilege_args("root", euid=0) == ["--no-caps"]  # never full root
    with pytest.raises(TransientError, match="not root, so it cannot start plugins as"):
        privilege_args("nobody", euid=1000)
    with pytest.raises(TransientError, match="no such user"):
        privilege_args("no-such-user-here", euid=0)


def test_a_plugin_that_cannot_be_executed_fails_with_the_reason(plugin, tmp_path):
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    with pytest.raises(TransientError, match="not found"):
        plugin(lifecycle="ephemeral", command="/no/such/program").tick(make_ctx("misbehave"))
    p = plugin(lifecycle="ephemeral", command=str(script), args=[], plugin_id="noexec")
    with pytest.raises(TransientError, match=r"cannot start plugin .*Permission denied"):
        p.tick(make_ctx("misbehave"))
