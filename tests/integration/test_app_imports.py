"""The pure core loads no framework; ``celery -A nexopoll`` and shared_task still bind our app.

Each check runs in a fresh interpreter: the test process has long imported Django
and Celery, so ``sys.modules`` here says nothing about what one import pulls in.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import ROOT

FORBIDDEN = ("celery", "django", "redis", "kombu", "redbeat", "requests", "urllib3")


def run(code: str, **env: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize(
    "module",
    ["nexopoll.core.schedule", "nexopoll.core", "nexopoll.core.config", "nexopoll.core.breaker"],
)
def test_importing_the_core_loads_no_framework(module):
    out = run(
        f"import {module}, sys\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith('nexopoll.')"
        " and not m.startswith('nexopoll.core')))"
    )
    loaded, ours = out.splitlines()
    assert loaded == "[]", f"importing {module} loaded {loaded}"
    assert ours == "[]", f"importing {module} loaded {ours}"


def test_the_documented_one_liner_holds():
    run(
        "import nexopoll.core.schedule, sys; "
        "assert 'celery' not in sys.modules and 'django' not in sys.modules"
    )


def test_celery_dash_a_nexopoll_finds_our_app():
    """What ``celery -A nexopoll worker|beat`` does: find_app('nexopoll')."""
    out = run(
        "from celery.app.utils import find_app\n"
        "app = find_app('nexopoll')\n"
        "print(app.main, app.conf.task_default_queue, app.conf.redbeat_key_prefix)\n",
        DJANGO_SETTINGS_MODULE="nexopoll.settings",
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert out.split() == ["nexopoll", "nexopoll", "nexopoll:redbeat:"]


def test_shared_tasks_bind_to_our_app_in_a_django_process():
    """A web/management process (no ``-A``) sends tasks through the configured app."""
    out = run(
        "import django; django.setup()\n"
        "from nexopoll import tasks\n"
        "from celery import current_app\n"
        "print(tasks.tick.app.main, tasks.tick.app.conf.broker_url, current_app.main)\n"
        "import nexopoll\n"
        "print(tasks.tick.app is nexopoll.celery_app, tasks.deliver.app is nexopoll.celery_app)\n",
        DJANGO_SETTINGS_MODULE="nexopoll.settings",
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert out.split() == ["nexopoll", "redis://127.0.0.1:1/0", "nexopoll", "True", "True"]
