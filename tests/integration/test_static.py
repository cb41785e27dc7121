"""The admin is styled under gunicorn with DEBUG off: the web process serves the
static files itself (WhiteNoise), after `collectstatic` as `make run` does it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from tests.support.procs import ROOT, answers_200, free_port, start_gunicorn, wait_for

pytestmark = pytest.mark.integration


def test_gunicorn_serves_the_admin_css_with_debug_off(tmp_path):
    port = free_port()
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "NEXOPOLL_DATA_DIR": str(tmp_path),
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "static-test-" + "k" * 40,
        "NEXOPOLL_CONFIG": str(tmp_path / "none.yaml"),
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    assert (tmp_path / "static" / "admin" / "css" / "base.css").exists()
    assert (tmp_path / "static" / "admin_ext" / "nexopoll.css").exists()
    log = tempfile.TemporaryFile()
    web = start_gunicorn(env, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers_200(f"{base}/admin/login/"), 60, what="gunicorn up")
        login = requests.get(f"{base}/admin/login/", timeout=5)
        assert "/static/admin/css/base.css" in login.text
        css = requests.get(f"{base}/static/admin/css/base.css", timeout=5)
        assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
        assert "body" in css.text
        ours = requests.get(f"{base}/static/admin_ext/nexopoll.css", timeout=5)
        assert ours.status_code == 200 and ".np-strip" in ours.text
    finally:
        web.terminate()
        web.wait(10)
