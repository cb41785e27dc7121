"""RELIABILITY.md row 57 on real processes: every nexopoll process is non-dumpable.

A worker (main and prefork child), beat, the web process (``nexopoll.wsgi``), the CLI
(``manage.py``) and Flower's launcher each start with a canary secret in their
environment, every one of them as root *without capabilities* (``setpriv``), which is
what a plugin of a root worker is: then only the non-dumpable flag can keep a probe
of the same uid and capabilities out. The probe (a plugin's view) opens
``/proc/<pid>/environ``, ``maps`` and ``mem`` of each; a control process started the
same way but without nexopoll is readable (the probe works).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from nexopoll.flower import FlowerSettings, flower_command
from tests.integration.conftest import stack  # noqa: F401  (the fixture)

# ruff: noqa: F811  (test functions take the imported ``stack`` fixture)
from tests.support.procs import CeleryProc, free_port, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("setpriv"),
        reason="drops capabilities with setpriv: needs root",
    ),
]
CANARY = "NEXOPOLL-CANARY-" + "3f5d2a7e91bc40d8a6c1e2f3b4a5c6d7"
ROOT = Path(__file__).resolve().parents[2]
CAPLESS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
PROBE = """
import sys
pid, needle = sys.argv[1], sys.argv[2].encode()
for what in ("environ", "maps", "mem"):
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            data = f.read(1 << 20) if what != "mem" else b""
        print(what, "FOUND" if needle in data else "read")
    except OSError as exc:
        print(what, "denied", exc.errno)
"""


def probe(pid: int) -> dict[str, str]:
    out = subprocess.run(
        [*CAPLESS, sys.executable, "-c", PROBE, str(pid), CANARY],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}


def started(cmd: list[str], env: dict[str, str], ready: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*CAPLESS, *cmd],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # up to the "ready" line the process prints when it is up
        if line.strip() == ready:
            return proc
    raise AssertionError(f"{cmd} exited before it was ready: {proc.wait()}")


def test_57_every_nexopoll_process_is_closed_to_a_same_uid_plugin(stack):
    env = stack.env(
        DJANGO_SECRET_KEY=CANARY, NEXOPOLL_API_TOKEN=CANARY, NEXOPOLL_METRICS_TOKEN=CANARY
    )
    stack.write([])
    stack.reload()
    stack.env_extra.update(DJANGO_SECRET_KEY=CANARY, NEXOPOLL_API_TOKEN=CANARY)  # worker, beat
    worker = stack.worker(prefix=CAPLESS)
    beat = CeleryProc("beat", stack.env(), "beat", prefix=CAPLESS).start()
    stack.procs.append(beat)
    port = free_port()
    cmd, flower_env = flower_command(FlowerSettings(basic_auth="ops:pw", port=port), env, [])
    flower = subprocess.Popen(
        [*CAPLESS, *cmd],
        cwd=ROOT,
        env=flower_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: psutil.Process(worker.proc.pid).children(), 30, what="pool child")
    (child,) = psutil.Process(worker.proc.pid).children()
    hold = "import sys; print('ready', flush=True); sys.stdin.read()"
    others = {
        "web": started([sys.executable, "-c", f"import nexopoll.wsgi; {hold}"], env, "ready"),
        "cli": started([sys.executable, "manage.py", "shell", "-c", hold], env, "ready"),
        "control": started([sys.executable, "-c", hold], env, "ready"),
    }
    try:
        wait_for(lambda: _listening(port), 60, what="flower up")
        pids = {
            "worker": worker.proc.pid,
            "pool child": child.pid,
            "beat": beat.proc.pid,
            "flower": flower.pid,
            **{k: p.pid for k, p in others.items()},
        }
        seen = {name: probe(pid) for name, pid in pids.items()}
        assert seen.pop("control")["environ"] == "FOUND", "the probe cannot read a plain process"
        for name, result in seen.items():
            assert set(result.values()) == {"denied"}, (name, result)
    finally:
        for p in (*others.values(), flower):
            p.kill()
            p.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
