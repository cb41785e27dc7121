"""`pip install .` gives a working install outside the checkout (issue 17).

The wheel is built from a copy of the sources, installed with ``--no-deps`` into a fresh
venv, and run from a ``NEXOPOLL_HOME`` outside the checkout: ``nexopoll migrate``,
``check``, ``pollers list``, one tick (``nexopoll run``), ``collectstatic`` and
``runserver`` serving the admin's CSS. The dependencies come from the development venv
through a ``.pth`` file naming its site-packages directory: a path line in a ``.pth``
adds that directory only, so the ``.pth`` files inside it, the editable install's finder
among them, are never run. The installed package is therefore the wheel alone, and a file
the wheel lacks fails here (``nexopoll.__file__`` is checked too).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.httpserver import TestHTTPServer, json_reply
from tests.support.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "nexopoll", "pollers", "admin_ext")
JOB = """\
pollers:
  jobs:
    - id: feed
      kind: webhook_poll
      agent: ops
      schedule: {{ every_secs: 60 }}
      config:
        url: "{url}"
        items_path: items
        id_field: id
        message_template: "New: {{title}}"
        deliver: {{ channel: log, to: operator }}
        allow_private_networks: true
agents:
  ops:
    log: {{}}
"""


def _clean_env() -> dict[str, str]:
    """This environment without what points Python at the checkout or the test settings."""
    drop = ("PYTHONPATH", "DJANGO_", "NEXOPOLL_", "DATABASE_URL", "PYTEST", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _pip(*args: str) -> None:
    """This Python's pip, in the clean environment; a failure fails the test."""
    subprocess.run(
        [sys.executable, "-m", "pip", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
        env=_clean_env(),
    )


def _build_wheel(tmp: Path) -> Path:
    """The wheel of a copy of the checkout's sources (a build writes build/ and egg-info)."""
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    dist = tmp / "dist"
    _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src))
    (wheel,) = dist.glob("nexopoll-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp: Path) -> Path:
    """A fresh venv holding the wheel; the dependencies visible through one .pth line."""
    venv = tmp / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=_clean_env()
    )
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel))
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=_clean_env(),
    ).stdout.strip()
    (Path(purelib) / "_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _env(home: Path, redis_url: str) -> dict[str, str]:
    env = _clean_env()
    env.update(REDIS_URL=redis_url, NEXOPOLL_HOME=str(home), NEXOPOLL_LEASE_MIN_SECS="3")
    return env


def _wait_for(url: str, deadline_secs: float = 30.0) -> tuple[int, bytes]:
    end = time.monotonic() + deadline_secs
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_the_wheel_alone_migrates_checks_ticks_and_serves_the_admin_css(tmp_path, redis_server):
    venv = _venv_with(_build_wheel(tmp_path), tmp_path)
    nexopoll = str(venv / "bin" / "nexopoll")
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    (home / "config").mkdir(parents=True)
    elsewhere.mkdir()
    env = _env(home, redis_server.url)

    def run(*args: str, cwd: Path = elsewhere, **extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [nexopoll, *args],
            cwd=cwd,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"nexopoll {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    # the modules are the wheel's, and every path the settings derive lies under HOME
    shown = run(
        "shell",
        "-c",
        (
            "import json, nexopoll, admin_ext, pollers; from django.conf import settings as s; "
            "print(json.dumps([nexopoll.__file__, admin_ext.__file__, pollers.__file__, "
            "str(s.DATA_DIR), s.NEXOPOLL_CONFIG, s.NEXOPOLL_PLUGINS_DIR, s.STATIC_ROOT]))"
        ),
    ).stdout
    modules, paths = json.loads(shown.splitlines()[-1])[:3], json.loads(shown.splitlines()[-1])[3:]
    assert all(m.startswith(str(venv)) for m in modules), modules
    assert paths == [
        str(home / "data"),
        str(home / "config" / "pollers.yaml"),
        str(home / "plugins"),
        str(home / "data" / "static"),
    ]

    with TestHTTPServer() as feed:
        items = [{"id": 1, "title": "one"}, {"id": 2, "title": "two"}]
        feed.route("GET", "/items", json_reply({"items": items}))
        (home / "config" / "pollers.yaml").write_text(JOB.format(url=feed.url("/items")))

        run("migrate", "--noinput", "-v", "0")
        assert (home / "data" / "nexopoll.sqlite3").is_file()
        assert "ok: pollers.yaml valid" in run("check").stdout
        run("reload")
        # NEXOPOLL_HOME defaults to the current directory
        listed = run("pollers", "list", cwd=home, NEXOPOLL_HOME="").stdout
        assert "feed" in listed and "webhook_poll" in listed
        tick = json.loads(run("run", "feed", "--json").stdout)
        assert tick["status"] == "ok" and tick["committed"], tick
        assert tick["items_seen"] == 2 and len(tick["delivery_ids"]) == 2, tick
        assert feed.hits("/items") == 1

    run("collectstatic", "--noinput", "-v", "0")
    css = (ROOT / "admin_ext" / "static" / "admin_ext" / "nexopoll.css").read_bytes()
    assert (home / "data" / "static" / "admin_ext" / "nexopoll.css").read_bytes() == css

    # `nexopoll runserver` serves the admin's CSS from the installed package
    port = free_port()
    server = subprocess.Popen(
        [nexopoll, "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=elsewhere,
        env={**env, "DJANGO_SECRET_KEY": secrets.token_urlsafe(40)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        status, body = _wait_for(f"http://127.0.0.1:{port}/static/admin_ext/nexopoll.css")
        assert status == 200 and body == css
        status, _ = _wait_for(f"http://127.0.0.1:{port}/admin/login/")
        assert status == 200
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert b"Traceback" not in out, out.decode(errors="replace")
    # nothing was written inside the installed package
    site = Path(modules[0]).parents[1]
    assert not (site / "data").exists() and not (site / "config").exists()
