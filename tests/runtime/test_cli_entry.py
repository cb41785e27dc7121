"""The ``nexopoll`` console script runs every management command, not only the pollers verbs."""

from __future__ import annotations

import os
import subprocess

from nexopoll.cli import command_line
from tests.support.procs import run_in_root


def test_pollers_verbs_and_the_pollers_prefix_run_the_pollers_command():
    assert command_line(["list", "--json"]) == ["nexopoll", "pollers", "list", "--json"]
    assert command_line(["pollers", "list"]) == ["nexopoll", "pollers", "list"]
    assert command_line(["check"]) == ["nexopoll", "pollers", "check"]  # pollers wins a clash
    assert command_line(["--help"]) == ["nexopoll", "pollers", "--help"]
    assert command_line([]) == ["nexopoll", "pollers"]


def test_other_management_commands_run_as_under_manage_py():
    assert command_line(["migrate", "--noinput"]) == ["nexopoll", "migrate", "--noinput"]
    assert command_line(["createsuperuser"]) == ["nexopoll", "createsuperuser"]
    assert command_line(["collectstatic"]) == ["nexopoll", "collectstatic"]
    assert command_line(["runserver", "127.0.0.1:8001"]) == [
        "nexopoll",
        "runserver",
        "127.0.0.1:8001",
    ]
    # (tests/test_wheel.py runs `nexopoll pollers list` and `nexopoll runserver` installed)


def test_the_console_script_migrates_and_creates_a_superuser(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "NEXOPOLL_CONFIG": str(tmp_path / "none.yaml"),
        "DJANGO_SUPERUSER_PASSWORD": "pw-1234-x",
    }

    def nexopoll(*args: str) -> subprocess.CompletedProcess:
        return run_in_root(env, "-m", "nexopoll.cli", *args)

    migrated = nexopoll("migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    made = nexopoll("createsuperuser", "--noinput", "--username", "op", "--email", "op@example.com")
    assert made.returncode == 0, made.stderr
    listed = nexopoll("list")
    assert listed.returncode == 0, listed.stderr
    assert "no jobs: run `nexopoll reload`" in listed.stdout
