"""`manage.py` from a plain shell (no `make`): the demo's variables have defaults, and a
warning's hint, followed to the letter, works."""

from __future__ import annotations

import shlex

import pytest

from tests.support.procs import run_in_root, run_manage, stack_env


def _plain_env(tmp_path, redis_url: str, config: str | None = None) -> dict[str, str]:
    env = stack_env(redis_url, f"sqlite:///{tmp_path / 'db.sqlite3'}", config or "")
    for name in ("NEXOPOLL_DEMO_BASE", "PORT", "NEXOPOLL_PUBLIC_VARS", "FEED_BASE"):
        env.pop(name, None)
    if config is None:  # the repository's own config/pollers.yaml (the demo jobs)
        env.pop("NEXOPOLL_CONFIG")
    return env


def test_check_and_createsuperuser_print_no_warning_without_make(tmp_path, redis_server):
    env = _plain_env(tmp_path, redis_server.url)
    check = run_manage(env, "check")
    assert check.returncode == 0, check.stderr
    assert "W001" not in check.stderr + check.stdout and "NEXOPOLL_DEMO_BASE" not in check.stderr
    helped = run_manage(env, "createsuperuser", "--help")
    assert helped.returncode == 0 and "W00" not in helped.stderr + helped.stdout
    # and the demo jobs load with the default base: `pollers reload` applies them
    assert run_manage(env, "migrate", "--noinput", "-v", "0").returncode == 0
    reload = run_manage(env, "pollers", "reload")
    assert reload.returncode == 0, reload.stderr
    assert "demo_items" in run_manage(env, "pollers", "list").stdout


def test_the_default_base_follows_port(tmp_path, redis_server):
    env = {**_plain_env(tmp_path, redis_server.url), "PORT": "8123"}
    code = (
        "from nexopoll.runtime.secretenv import secret_env; "
        "print(secret_env()['NEXOPOLL_DEMO_BASE'])"
    )
    shown = run_manage(env, "shell", "-c", code)
    assert shown.stdout.strip().splitlines()[-1] == "http://127.0.0.1:8123", shown.stderr


def test_following_the_hint_of_an_unset_variable_succeeds(tmp_path, redis_server):
    config = tmp_path / "pollers.yaml"
    config.write_text(
        "pollers:\n  jobs:\n    - id: feed\n      kind: rss\n      agent: ana\n"
        "      schedule: {every_secs: 60}\n"
        "      config: {feed_url: '${FEED_BASE}/blog.xml', deliver: {channel: log, to: x}}\n"
        "agents:\n  ana:\n    log: {}\n"
    )
    env = _plain_env(tmp_path, redis_server.url, str(config))
    assert run_manage(env, "migrate", "--noinput", "-v", "0").returncode == 0
    check = run_manage(env, "check")
    assert "nexopoll.W001" in check.stderr and "FEED_BASE is not set" in check.stderr
    hint = next(line for line in check.stderr.splitlines() if "HINT:" in line)
    assert "export FEED_BASE=" in hint and "python manage.py pollers reload" in hint
    # follow it: export the variable in this shell, run the command the hint names
    env["FEED_BASE"] = "https://feeds.example.com"
    command = hint.split("then run `")[1].split("`")[0]
    assert shlex.split(command)[:2] == ["python", "manage.py"]
    done = run_in_root(env, *shlex.split(command)[1:])
    assert done.returncode == 0, done.stderr
    assert "W001" not in done.stderr


@pytest.mark.parametrize("args", [("pollers", "check"), ("check",)])
def test_no_warning_once_the_variable_is_set(tmp_path, redis_server, args):
    env = _plain_env(tmp_path, redis_server.url)
    done = run_manage(env, *args)
    assert "W001" not in done.stderr and "is not set" not in done.stderr + done.stdout
