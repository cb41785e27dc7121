"""Every number in pollers.yaml has bounds the DB and ``timedelta`` can hold, and a value
past them (``10**15``) is refused by ``pollers check`` with file:line and the field.

Also: credentials written in plain text and values the DB's JSON column cannot hold.
"""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

HUGE = "1000000000000000"  # 10**15
HUGER = "1000000000000000000"  # 10**18
KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"

JOB = """\
pollers:
  default_jitter_ms: 0
  jobs:
    - id: a
      kind: {kind}
      agent: ana
      schedule: {{every_secs: 60}}
      config:
        {config}
        deliver: {{channel: log, to: ops}}
      {extra}
agents:
  ana:
    log: {{}}
"""

RSS = "feed_url: https://example.com/feed.xml"
HOOK = "url: https://example.com/items.json"

# name -> (yaml text, the field path the message names, a marker on the line it is on)
CASES = {
    "failure_alert_cooldown_secs": (
        f"pollers:\n  failure_alert_cooldown_secs: {HUGE}\n",
        "pollers.failure_alert_cooldown_secs",
    ),
    "breaker_threshold": (f"pollers:\n  breaker_threshold: {HUGER}\n", "pollers.breaker_threshold"),
    "default_jitter_ms": (f"pollers:\n  default_jitter_ms: {HUGE}\n", "pollers.default_jitter_ms"),
    "lease_ttl_factor": ("pollers:\n  lease_ttl_factor: 1.0e+300\n", "pollers.lease_ttl_factor"),
    "every_secs": (
        JOB.format(kind="scripted", config="", extra="").replace(
            "every_secs: 60", f"every_secs: {HUGE}"
        ),
        "jobs[a].schedule.every_secs",
    ),
    "stagger_jitter_ms": (
        JOB.format(kind="scripted", config="", extra="").replace(
            "every_secs: 60", f"every_secs: 60, stagger_jitter_ms: {HUGE}"
        ),
        "jobs[a].schedule.stagger_jitter_ms",
    ),
    "at": (
        JOB.format(kind="scripted", config="", extra="").replace(
            "every_secs: 60", "at: '9999-12-31T23:59:59Z'"
        ),
        "jobs[a].schedule.at",
    ),
    "host_limits.in_flight": (
        JOB.format(kind="scripted", config="", extra=f"host_limits: {{in_flight: {HUGE}}}"),
        "jobs[a].host_limits.in_flight",
    ),
    "host_limits.per_sec": (
        JOB.format(kind="scripted", config="", extra=f"host_limits: {{per_sec: {HUGER}}}"),
        "jobs[a].host_limits.per_sec",
    ),
    "any config integer": (
        JOB.format(kind="scripted", config=f"big: {HUGER}000000", extra=""),
        "jobs[a].config.big",
    ),
    "any config float": (
        JOB.format(kind="scripted", config="ratio: .inf", extra=""),
        "jobs[a].config.ratio",
    ),
    "telegram.max_per_second": (
        "agents:\n  ana:\n    telegram: {token: '${TG_TOKEN}', max_per_second: 1.0e+300}\n",
        "agents.ana.telegram.max_per_second",
    ),
    "llm.max_tokens_cap": (f"llm:\n  max_tokens_cap: {HUGE}\n", "llm.max_tokens_cap"),
}
for _kind, _first in (("rss", RSS), ("webhook_poll", HOOK)):
    for _field in ("max_per_tick", "timeout_secs", "max_bytes", "seen_capacity"):
        CASES[f"{_kind}.{_field}"] = (
            JOB.format(kind=_kind, config=f"{_first}\n        {_field}: {HUGE}", extra=""),
            f"jobs[a].config.{_field}",
        )
for _field in ("max_per_tick", "dispatch_delay_ms"):
    CASES[f"gmail.{_field}"] = (
        JOB.format(kind="gmail", config=f"{_field}: {HUGE}", extra=""),
        f"jobs[a].config.{_field}",
    )
for _field in ("max_per_tick", "max_pages"):
    CASES[f"google_calendar.{_field}"] = (
        JOB.format(kind="google_calendar", config=f"{_field}: {HUGE}", extra=""),
        f"jobs[a].config.{_field}",
    )


def line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(needle)


def check(cfg) -> str:
    err = StringIO()
    with pytest.raises(CommandError, match="problem"):
        call_command("pollers", "check", stdout=StringIO(), stderr=err)
    return err.getvalue()


@pytest.fixture
def checked(cfg, settings, monkeypatch):
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    monkeypatch.setenv("TG_TOKEN", "123:tg-token-value")
    return cfg


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_past_its_bounds_is_refused_with_file_line_and_field(checked, case):
    text, field = CASES[case]
    checked.write_text(text)
    err = check(checked)
    value_marker = field.rsplit(".", 1)[-1] + ":"
    line = line_of(text, value_marker)
    assert f"{checked.path}:{line}: {field}: " in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (f"headers: {{Authorization: 'Bearer {KEY}'}}", "headers.Authorization"),
        (f"headers: {{X-Api-Key: {KEY}}}", "headers.X-Api-Key"),
        (f"headers: {{Cookie: 'session={KEY}'}}", "headers.Cookie"),
        (f"headers: {{Proxy-Authorization: 'Basic {KEY}'}}", "headers.Proxy-Authorization"),
        (f"headers: {{X-Auth-Token: {KEY}}}", "headers.X-Auth-Token"),
    ],
)
def test_a_plain_text_credential_in_headers_is_refused(checked, config, field):
    text = JOB.format(kind="webhook_poll", config=f"{HOOK}\n        {config}", extra="")
    checked.write_text(text)
    err = check(checked)
    line = line_of(text, "headers:")
    assert f"{checked.path}:{line}: jobs[a].config.{field}: " in err, err
    assert "${ENV_VAR}" in err
    assert KEY not in err


def test_credentials_given_as_references_pass_the_check(checked, monkeypatch):
    monkeypatch.setenv("API_TOKEN", "sk_live_from_the_env")
    config = (
        f"{HOOK}?page=1\n        headers: {{Authorization: 'Bearer ${{API_TOKEN}}', "
        "X-Api-Key: '${API_TOKEN}', Accept: application/json}"
    )
    checked.write_text(JOB.format(kind="webhook_poll", config=config, extra=""))
    out = StringIO()
    call_command("pollers", "check", stdout=out, stderr=StringIO())
    assert "ok:" in out.getvalue()


def test_one_bad_agent_is_one_message_and_rejects_only_its_jobs(checked):
    text = (
        "agents:\n  ana:\n    log: {}\n  bob:\n    webhook: {url: 'https://example.com/h', "
        "secret: plain-hook-secret}\npollers:\n  jobs:\n"
        + "".join(
            f"    - {{id: {j}, kind: scripted, agent: {a}, schedule: {{every_secs: 60}}, "
            "config: {deliver: {channel: log, to: ops}}}\n"
            for j, a in (("b1", "bob"), ("b2", "bob"), ("a1", "ana"))
        )
    )
    checked.write_text(text.replace("secret: plain-hook-secret", "secret: '${TG_TOKEN}'"))
    assert checked.reload().add == ["a1", "b1", "b2"]
    checked.write_text(text)
    err = check(checked)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert f"{checked.path}:5: agents.bob.webhook.secret: " in errors[0]
    assert "b1, b2" in errors[0] and "a1" not in errors[0]
    assert "plain-hook-secret" not in err
    res = checked.reload()  # bob's jobs keep their last good definitions
    assert res.keep == ["a1"] and res.kept_invalid == ["b1", "b2"] and len(res.issues) == 1


@pytest.mark.parametrize("key", ["tick_timeout_secs", "max_concurrent_ticks"])
def test_a_plugin_manifest_number_past_its_bounds_fails_the_check(checked, settings, key):
    from nexopoll.runtime.registry import reset_registry
    from tests.plugins.conftest import write_plugin

    plugins = checked.path.parent / "plugins"
    path = write_plugin(plugins, "big", ["big_kind"])
    text = path.read_text()
    path.write_text(re.sub(rf"{key} = \d+", f"{key} = {HUGER}", text))
    settings.NEXOPOLL_PLUGINS_DIR = str(plugins)
    reset_registry()
    try:
        checked.write_text("pollers: {}\n")
        err = check(checked)
    finally:
        reset_registry()
    line = line_of(path.read_text(), f"{key} =")
    assert f"{path}:{line}: [plugin.poller] {key} must be an integer in " in err, err


def test_a_plain_credential_stored_before_the_rule_is_masked_when_shown(checked, monkeypatch):
    """A definition kept from before plain-text credentials were refused (a row written
    by an older version) is shown by `pollers show` and the API with them masked."""
    from django.utils import timezone

    from nexopoll import services
    from nexopoll.models import PollJob

    monkeypatch.setenv("API_TOKEN", "from-the-env")
    config = f"{HOOK}\n        headers: {{Authorization: 'Bearer ${{API_TOKEN}}'}}"
    checked.write_text(JOB.format(kind="webhook_poll", config=config, extra=""))
    assert checked.reload().add == ["a"]
    job = PollJob.objects.get(job_id="a")
    job.config = {
        **job.config,
        "headers": {"Authorization": f"Bearer {KEY}"},
        "url": f"https://bot:{KEY}@example.com/x?api_key={KEY}&page=2",
    }
    job.save()
    shown = services.show_job("a", now=timezone.now())
    assert shown["config"]["headers"] == {"Authorization": "***"}
    assert shown["config"]["url"] == "https://bot:***@example.com/x?api_key=***&page=2"
    out = StringIO()
    call_command("pollers", "show", "a", stdout=out)
    assert KEY not in out.getvalue() and KEY not in services.definition_yaml(job)
