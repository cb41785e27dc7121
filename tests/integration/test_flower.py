"""Flower beside a real worker: the worker sends task events, Flower shows each
``nexopoll.tick`` with its job id, and only to a caller with credentials."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from nexopoll.flower import FlowerSettings, flower_command
from tests.support.procs import ROOT, CeleryProc, answers_200, wait_for

from .conftest import job, start_flower

pytestmark = pytest.mark.integration


def test_flower_shows_ticks_to_authenticated_callers_only(stack):
    stack.write([job("a", every=3600)])
    stack.reload()
    # as the Procfile starts it: with task events (-E)
    worker = CeleryProc("worker", stack.env(), "fw", extra=("-E",)).start()
    stack.procs.append(worker)
    flower, port = start_flower(stack.env(), "flower-pw-1")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers_200(f"{base}/healthcheck"), 60, what="flower up")
        from nexopoll.celery import app

        def seen() -> dict:
            r = requests.get(f"{base}/api/tasks", auth=("ops", "flower-pw-1"), timeout=5)
            r.raise_for_status()
            return {k: v for k, v in r.json().items() if v.get("name") == "nexopoll.tick"}

        def tick_seen() -> bool:
            # Flower's event receiver may connect after /healthcheck answers: tick until
            # one tick's events reach it
            if any(t.get("state") == "SUCCESS" for t in seen().values()):
                return True
            app.send_task("nexopoll.tick", args=["a"])
            return False

        wait_for(tick_seen, 60, interval=2, what="flower saw a tick succeed")
        assert stack.ticks("a") >= 1
        task = next(t for t in seen().values() if t.get("state") == "SUCCESS")
        assert "'a'" in task["args"]
        assert requests.get(f"{base}/api/tasks", timeout=5).status_code == 401
        wrong = requests.get(f"{base}/api/tasks", auth=("ops", "nope"), timeout=5)
        assert wrong.status_code == 401
    finally:
        flower.terminate()
        flower.wait(10)


def test_launcher_refuses_to_start_without_credentials():
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "nexopoll.flower"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "NEXOPOLL_FLOWER_BASIC_AUTH" in done.stderr
    cmd, child = flower_command(FlowerSettings(basic_auth="u:p"), {}, [])
    assert "--address=127.0.0.1" in cmd and child["FLOWER_BASIC_AUTH"] == "u:p"
    assert not any("u:p" in part for part in cmd)  # never on the command line
    with pytest.raises(SystemExit, match="user:password"):
        flower_command(FlowerSettings(basic_auth="no-colon"), {}, [])
