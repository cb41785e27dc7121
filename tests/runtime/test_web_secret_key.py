"""The web process (nexopoll.wsgi: gunicorn, runserver) refuses the built-in SECRET_KEY
unless DEBUG is on; the CLI and the workers run without a key."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.procs import ROOT, run_in_root, run_manage

LOAD_WSGI = "import nexopoll.wsgi; print('web ok')"


def run_python(code: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    base.update(
        DJANGO_SETTINGS_MODULE="nexopoll.settings",
        PYTHONPATH=str(ROOT),
        NEXOPOLL_DATA_DIR=str(tmp_path),
        **env,
    )
    return run_in_root(base, "-c", code, timeout=60)


@pytest.mark.parametrize(
    "env",
    [
        {},  # no key at all
        {"DJANGO_DEBUG": "0"},
        {"DJANGO_SECRET_KEY": "nexopoll-insecure-dev-key-change-me"},  # the default, spelled out
        {"DJANGO_SECRET_KEY": "short"},
    ],
)
def test_web_refuses_to_start_without_a_real_key(tmp_path, env):
    res = run_python(LOAD_WSGI, tmp_path, **env)
    assert res.returncode != 0 and "web ok" not in res.stdout
    assert "ImproperlyConfigured" in res.stderr and "DJANGO_SECRET_KEY" in res.stderr


def test_web_starts_with_a_key_from_env_or_file_or_in_debug(tmp_path):
    key = "k" * 20 + "-0123456789abcdefghij"
    assert "web ok" in run_python(LOAD_WSGI, tmp_path, DJANGO_SECRET_KEY=key).stdout
    key_file = tmp_path / "secret_key"
    key_file.write_text(key + "\n")
    res = run_python(
        LOAD_WSGI + "; from django.conf import settings; print(settings.SECRET_KEY)",
        tmp_path,
        DJANGO_SECRET_KEY_FILE=str(key_file),
    )
    assert "web ok" in res.stdout and key in res.stdout
    assert "web ok" in run_python(LOAD_WSGI, tmp_path, DJANGO_DEBUG="1").stdout


def test_cli_runs_without_a_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST"))}
    env |= {"NEXOPOLL_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "nexopoll.settings"}
    res = run_manage(env, "pollers", "--help", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "run" in res.stdout and "resume" in res.stdout
