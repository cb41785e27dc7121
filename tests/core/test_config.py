from __future__ import annotations

import textwrap
import time
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel, ConfigDict

from nexopoll.core.config import (
    AgentSpec,
    ConfigFileError,
    ConfigIssue,
    DeliverTarget,
    LoadedConfig,
    PollersSettings,
    env_refs,
    expand_env,
    load_config,
)
from nexopoll.core.errors import ConfigError
from nexopoll.core.schedule import AtSchedule, CronSchedule, EverySchedule

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SOURCE = "config/pollers.yaml"
ENV = {"ANA_TOKEN": "tok-ana-123456", "JIRA_TOKEN": "jira-secret-value", "HOOK_SECRET": "hs-9999"}

seen_configs: list[dict] = []


def webhook_validate(config: dict) -> None:
    seen_configs.append(config)
    url = config.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"url must be an http(s) URL, got {url!r}", path="url")


class NoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    message: str = "tick"


def noop_validate(config: dict) -> None:
    NoopConfig.model_validate(config)


VALIDATORS = {"webhook_poll": webhook_validate, "noop": noop_validate, "rss": noop_validate}


def load(text: str | bytes, env: dict | None = None, validators=None) -> LoadedConfig:
    if isinstance(text, str):
        text = textwrap.dedent(text)
    return load_config(
        text,
        source=SOURCE,
        env=ENV if env is None else env,
        now=NOW,
        validators=VALIDATORS if validators is None else validators,
    )


def file_error(text: str | bytes) -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        load(text)
    return info.value


def line_of(text: str, needle: str) -> int:
    lines = textwrap.dedent(text).splitlines()
    matches = [i + 1 for i, line in enumerate(lines) if needle in line]
    assert len(matches) == 1, (needle, matches)
    return matches[0]


def only_issue(cfg: LoadedConfig) -> ConfigIssue:
    assert len(cfg.issues) == 1, [str(i) for i in cfg.issues]
    return cfg.issues[0]


FULL = """\
    agents:
      ana:
        telegram: { account: ana_bot, token: "${ANA_TOKEN}" }
        webhook:
          url: https://hooks.example.com/ana
          secret: "${HOOK_SECRET}"
        google: { client_id_path: ./secrets/c.json, token_path: ./secrets/t.json }
    pollers:
      enabled: true
      state_db: ./data/poller.db
      default_jitter_ms: 1500
      lease_ttl_factor: 3
      failure_alert_cooldown_secs: 600
      breaker_threshold: 7
      jobs:
        - id: ana_jira
          kind: webhook_poll
          agent: ana
          schedule: { every_secs: 300, stagger_jitter_ms: 250 }
          config:
            url: https://company.atlassian.net/rest/api/3/search
            headers:
              Authorization: "Bearer ${JIRA_TOKEN}"
            literal: "$${NOT_A_VAR}"
          failure_to: { channel: telegram, to: 1194292426 }
          paused_on_boot: true
        - id: ana.cron-1
          kind: noop
          agent: ana
          schedule:
            cron: "0 */5 * * * *"
            tz: America/Bogota
        - id: once
          kind: noop
          agent: ops
          schedule: { at: "2026-04-26T17:00:00+02:00" }
          config: { message: hi }
    """


def test_full_file_loads_every_field_and_applies_defaults():
    cfg = load(FULL)

    assert cfg.issues == []
    assert cfg.settings == PollersSettings(
        enabled=True,
        default_jitter_ms=1500,
        lease_ttl_factor=3.0,
        failure_alert_cooldown_secs=600,
        breaker_threshold=7,
    )
    assert list(cfg.jobs) == ["ana_jira", "ana.cron-1", "once"]

    jira = cfg.jobs["ana_jira"]
    assert (jira.kind, jira.agent) == ("webhook_poll", "ana")
    assert jira.schedule == EverySchedule(timedelta(seconds=300))
    assert jira.jitter_ms == 250
    assert jira.config == {
        "url": "https://company.atlassian.net/rest/api/3/search",
        "headers": {"Authorization": "Bearer ${JIRA_TOKEN}"},
        "literal": "$${NOT_A_VAR}",
    }
    assert jira.failure_to == DeliverTarget("telegram", "1194292426")
    assert jira.paused_on_boot is True
    assert jira.line == line_of(FULL, "- id: ana_jira")
    assert len(jira.definition_hash) == 64

    cron = cfg.jobs["ana.cron-1"]
    assert cron.schedule == CronSchedule("0 */5 * * * *", "America/Bogota")
    assert cron.jitter_ms == 1500
    assert cron.config == {}
    assert cron.failure_to is None
    assert cron.paused_on_boot is False

    once = cfg.jobs["once"]
    assert once.schedule == AtSchedule(datetime(2026, 4, 26, 15, 0, tzinfo=UTC))
    assert once.agent == "ops"  # undeclared agents are accepted

    assert cfg.agents["ana"] == AgentSpec(
        "ana",
        {
            "telegram": {"account": "ana_bot", "token": "${ANA_TOKEN}"},
            "webhook": {"url": "https://hooks.example.com/ana", "secret": "${HOOK_SECRET}"},
            "google": {"client_id_path": "./secrets/c.json", "token_path": "./secrets/t.json"},
        },
    )


def test_validator_sees_expanded_config_but_spec_keeps_raw_values():
    seen_configs.clear()
    cfg = load(FULL)
    assert seen_configs == [
        {
            "url": "https://company.atlassian.net/rest/api/3/search",
            "headers": {"Authorization": "Bearer jira-secret-value"},
            "literal": "${NOT_A_VAR}",
        }
    ]
    assert "jira-secret-value" not in repr(cfg)
    assert "tok-ana-123456" not in repr(cfg)


def test_settings_defaults_when_only_jobs_given():
    cfg = load(
        """\
        pollers:
          jobs:
            - {id: a, kind: noop, agent: x, schedule: {every_secs: 1.5}}
        """
    )
    assert cfg.settings == PollersSettings()
    assert cfg.settings.enabled is True
    assert cfg.jobs["a"].jitter_ms == 5000
    assert cfg.jobs["a"].schedule == EverySchedule(timedelta(seconds=1.5))


@pytest.mark.parametrize("text", ["", "# nothing here\n", "agents: {}\n"])
def test_empty_file_or_no_pollers_key_is_off(text):
    cfg = load(text)
    assert cfg.settings.enabled is False
    assert cfg.jobs == {}
    assert cfg.issues == []


def test_empty_pollers_key_means_defaults_and_no_jobs():
    cfg = load("pollers:\n")
    assert cfg.settings == PollersSettings()
    assert cfg.jobs == {}


def test_enabled_false_loads_no_jobs_and_skips_their_validation():
    cfg = load(
        """\
        pollers:
          enabled: false
          jobs:
            - {id: a, kind: noop, agent: x, schedule: {every_secs: 60}}
            - {id: b, kind: nope, bogus: 1}
        """
    )
    assert cfg.settings.enabled is False
    assert cfg.jobs == {}
    assert cfg.issues == []


# --- whole-file errors ---------------------------------------------------------------


def test_yaml_syntax_error_names_file_and_line_without_traceback():
    text = """\
        pollers:
          jobs:
            - id: a
              kind: [noop
            - id: b
        """
    err = file_error(text)
    assert len(err.issues) == 1
    issue = err.issues[0]
    assert issue.line in (4, 5)
    assert str(err).startswith(f"{SOURCE}:{issue.line}: YAML syntax error")
    assert "Traceback" not in str(err)


def test_tab_indentation_is_a_syntax_error_at_its_line():
    err = file_error("pollers:\n  jobs: []\n\tenabled: true\n")
    assert err.issues[0].line == 3


def test_duplicate_key_reports_line_of_the_duplicate():
    text = """\
        pollers:
          jobs:
            - id: a
              kind: noop
              agent: x
              kind: rss
              schedule: {every_secs: 60}
        """
    err = file_error(text)
    assert err.issues[0].line == line_of(text, "kind: rss")
    assert "duplicate key 'kind'" in err.issues[0].message
    assert f"first defined at line {line_of(text, 'kind: noop')}" in err.issues[0].message


def test_billion_laughs_is_rejected_quickly():
    lol = ["lol0: &lol0 lol"]
    for i in range(1, 10):
        refs = ", ".join([f"*lol{i - 1}"] * 10)
        lol.append(f"lol{i}: &lol{i} [{refs}]")
    text = "\n".join(lol) + "\npollers:\n  jobs: []\n"
    started = time.perf_counter()
    err = file_error(text)
    assert time.perf_counter() - started < 0.5
    assert err.issues[0].line == 1
    assert "anchors and aliases are not allowed" in str(err)


def test_even_a_harmless_alias_is_rejected():
    text = """\
        pollers:
          jobs:
            - id: a
              kind: noop
              agent: x
              schedule: {every_secs: 60}
              config: {message: hello}
            - id: b
              kind: noop
              agent: x
              schedule: {every_secs: 60}
              config: *cfg
        """
    err = file_error(text)
    assert err.issues[0].line == line_of(text, "*cfg")
    assert "anchors and aliases" in err.issues[0].message


@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_hundred_megabyte_file_is_rejected_by_size(as_bytes):
    text = "pollers:\n  jobs: []\n# " + "x" * (100 * 1024 * 1024)
    data = text.encode() if as_bytes else text
    started = time.perf_counter()
    with pytest.raises(ConfigFileError) as info:
        load_config(data, source=SOURCE, env=ENV, now=NOW, validators=VALIDATORS)
    assert time.perf_counter() - started < 0.1
    assert str(info.value) == f"{SOURCE}: file is larger than 67108864 bytes"


def test_multibyte_text_is_measured_in_utf8_bytes():
    text = "pollers:\n  jobs: []\n# " + "é" * (33 * 1024 * 1024) + "\n"
    assert len(text) < 64 * 1024 * 1024 < len(text.encode())
    assert "larger than" in str(file_error(text))


def test_file_just_under_the_limit_loads():
    text = "pollers:\n  jobs: []\n#" + "x" * (64 * 1024 * 1024 - 30) + "\n"
    assert len(text.encode()) <= 64 * 1024 * 1024
    assert load(text).jobs == {}


def test_non_utf8_bytes_are_a_file_error():
    err = file_error(b"pollers:\n  jobs: []\n# \xff\xfe\n")
    assert err.issues[0].line == 3
    assert "UTF-8" in err.issues[0].message


def test_non_string_key_is_rejected_with_line():
    text = """\
        pollers:
          jobs:
            - id: a
              kind: noop
              agent: x
              schedule: {every_secs: 60}
              config:
                on: 1
        """
    err = file_error(text)
    assert err.issues[0].line == line_of(text, "on: 1")
    assert "keys must be strings" in err.issues[0].message


@pytest.mark.parametrize(
    "text, message",
    [
        ("- just\n- a list\n", "top level must be a mapping"),
        ("poller:\n  jobs: []\n", "unknown top-level key"),
        ("pollers: [1, 2]\n", "must be a mapping"),
        ("pollers:\n  jobs: {a: 1}\n", "valid list"),
        ("agents: [ana]\npollers: {}\n", "mapping of agent id"),
        ("pollers: !!binary aGk=\n", "unsupported YAML tag !!binary"),
    ],
)
def test_wrong_top_level_shape_is_a_file_error(text, message):
    err = file_error(text)
    assert message in str(err)


def test_bad_settings_make_the_file_unusable_with_line():
    text = """\
        pollers:
          default_jitter_ms: 100
          breaker_threshold: 0
          jobs: []
        """
    err = file_error(text)
    issue = err.issues[0]
    assert (issue.line, issue.path) == (3, "pollers.breaker_threshold")
    assert "greater than or equal to 1" in issue.message


def test_unknown_settings_field_is_a_file_error():
    err = file_error("pollers:\n  enable: true\n")
    assert err.issues[0].line == 2
    assert "unknown field" in err.issues[0].message
    assert "enabled" in err.issues[0].message


def test_more_than_a_hundred_thousand_jobs_is_a_file_error():
    jobs = "\n".join(f"    - {{id: j{i}}}" for i in range(100_001))
    err = file_error("pollers:\n  jobs:\n" + jobs + "\n")
    assert "too many jobs (100001; at most 100000)" in str(err)


def test_ten_thousand_jobs_load_fast():
    jobs = "\n".join(
        f"    - {{id: job{i:05d}, kind: noop, agent: ana, schedule: {{every_secs: 60}}}}"
        for i in range(10_000)
    )
    text = "pollers:\n  jobs:\n" + jobs + "\n"
    started = time.process_time()  # CPU, not wall: a busy machine must not fail it
    cfg = load(text)
    elapsed = time.process_time() - started
    assert len(cfg.jobs) == 10_000
    assert cfg.issues == []
    assert elapsed < 3.0, elapsed  # about 0.5 s: a guard against a superlinear load


# --- per-job errors: line, path, job id, siblings unaffected ------------------------

THREE_JOBS = """\
    pollers:
      jobs:
        - id: first
          kind: noop
          agent: x
          schedule: {every_secs: 60}
        - id: second
          kind: noop
          agent: x
          schedule: {every_secs: 60}
          retries: 3
        - id: third
          kind: noop
          agent: x
          schedule: {every_secs: 60}
    """


def test_unknown_field_in_job_two_is_reported_at_its_line_and_siblings_load():
    cfg = load(THREE_JOBS)
    issue = only_issue(cfg)
    assert issue.job_id == "second"
    assert issue.path == "jobs[second].retries"
    assert issue.line == line_of(THREE_JOBS, "retries: 3")
    assert issue.message.startswith("unknown field (allowed: agent, config, failure_to,")
    assert str(issue) == f"{SOURCE}:{issue.line}: jobs[second].retries: {issue.message}"
    assert list(cfg.jobs) == ["first", "third"]


def test_issue_str_without_line_or_path():
    assert str(ConfigIssue("f.yaml", None, None, "", "boom")) == "f.yaml: boom"
    assert str(ConfigIssue("f.yaml", 3, "a", "jobs[a].x", "bad")) == "f.yaml:3: jobs[a].x: bad"
    err = ConfigFileError([ConfigIssue("f", 1, None, "", "a"), ConfigIssue("f", 2, None, "", "b")])
    assert str(err) == "f:1: a\nf:2: b"


def job_text(body: str, job_id: str = "bad") -> str:
    """A file with a good job 'ok' and one job whose extra lines are ``body``."""
    body = textwrap.indent(textwrap.dedent(body), " " * 6)
    return (
        "pollers:\n"
        "  jobs:\n"
        "    - {id: ok, kind: noop, agent: x, schedule: {every_secs: 60}}\n"
        f"    - id: {job_id}\n" + body
    )


def bad_job_issues(body: str, env: dict | None = None) -> list[ConfigIssue]:
    cfg = load(job_text(body), env=env)
    assert list(cfg.jobs) == ["ok"]
    assert cfg.issues, "the bad job was accepted"
    assert all(issue.job_id == "bad" for issue in cfg.issues)
    return cfg.issues


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("paused_on_boot", '"yes"', "valid boolean"),
        ("kind", "42", "valid string"),
        ("config", "[1, 2]", "valid dictionary"),
        ("failure_to", "telegram", "valid dictionary"),
    ],
)
def test_wrong_type_rejects_job_at_the_field_line(field, value, message):
    defaults = {"kind": "noop", "agent": "x", "schedule": "{every_secs: 60}"}
    defaults[field] = value
    body = "".join(f"{k}: {v}\n" for k, v in defaults.items())
    issues = bad_job_issues(body)
    assert len(issues) == 1
    assert issues[0].path == f"jobs[bad].{field}"
    assert issues[0].line == line_of(job_text(body), f"{field}: {value}")
    assert message in issues[0].message


def test_quoted_number_is_not_silently_coerced():
    [issue] = bad_job_issues('kind: noop\nagent: x\nschedule:\n  every_secs: "60"\n')
    assert issue.path == "jobs[bad].schedule.every_secs"
    assert issue.line == 8


def test_missing_required_fields_are_named():
    issues = bad_job_issues("kind: noop\n")
    assert {(i.path, i.message) for i in issues} == {
        ("jobs[bad].agent", "field required"),
        ("jobs[bad].schedule", "field required"),
    }


def test_job_without_valid_id_is_labelled_by_index():
    cfg = load(job_text("kind: noop\nagent: x\nschedule: {every_secs: 60}\n", job_id="Bad Id!"))
    issue = only_issue(cfg)
    assert issue.job_id is None
    assert issue.path == "jobs[1].id"
    assert issue.line == 4
    assert "invalid job id" in issue.message


@pytest.mark.parametrize(
    "cron, message",
    [
        ("61 * * * *", "invalid cron expression '61 * * * *'"),
        ("61 * * * * *", "invalid cron expression '61 * * * * *'"),
        ("0 0 0 31 2 *", "never fires"),
    ],
)
def test_bad_cron_names_job_path_and_line(cron, message):
    body = f'kind: noop\nagent: x\nschedule:\n  cron: "{cron}"\n'
    [issue] = bad_job_issues(body)
    assert issue.path == "jobs[bad].schedule.cron"
    assert issue.line == line_of(job_text(body), "cron:")
    assert message in issue.message
    assert str(issue).startswith(f"{SOURCE}:{issue.line}: jobs[bad].schedule.cron: ")


def test_unknown_time_zone_points_at_tz():
    body = 'kind: noop\nagent: x\nschedule:\n  cron: "0 * * * * *"\n  tz: Mars/Olympus\n'
    [issue] = bad_job_issues(body)
    assert (issue.path, issue.line) == ("jobs[bad].schedule.tz", 9)
    assert "unknown time zone 'Mars/Olympus'" in issue.message


@pytest.mark.parametrize(
    "schedule, path, message",
    [
        ("{every_secs: 60, cron: '0 * * * * *'}", "schedule", "exactly one of"),
        ("{stagger_jitter_ms: 10}", "schedule", "exactly one of"),
        ("{every_secs: 0}", "schedule.every_secs", "at least 1 second"),
        ("{every_secs: -5}", "schedule.every_secs", "at least 1 second"),
        ("{every_secs: .inf}", "schedule.every_secs", "finite"),
        ("{every_secs: 1.0e+300}", "schedule.every_secs", "less than or equal"),
        ("{every_secs: true}", "schedule.every_secs", "must be a number"),
        ("{every_secs: 60, tz: UTC}", "schedule.tz", "only valid with cron"),
        ("{every_secs: 60, stagger_jitter_ms: -1}", "schedule.stagger_jitter_ms", "from 0 to"),
        ("{at: 2026-04-26T15:00:00}", "schedule.at", "no UTC offset"),
        ("{at: 2026-04-26}", "schedule.at", "not an RFC3339 timestamp"),
        ("{at: '2026-13-26T15:00:00Z'}", "schedule.at", "not a valid date"),
        ("{every: 60}", "schedule.every", "unknown field"),
        ("{every_secs: 0.0000001}", "schedule.every_secs", "at least 1 second"),
        ("{every_secs: 0.000001}", "schedule.every_secs", "at least 1 second (got 1e-06)"),
        ("{every_secs: 0.5}", "schedule.every_secs", "at least 1 second"),
        ("{every_secs: 0.999}", "schedule.every_secs", "at least 1 second"),
    ],
)
def test_invalid_schedules(schedule, path, message):
    [issue] = bad_job_issues(f"kind: noop\nagent: x\nschedule: {schedule}\n")
    assert issue.path == f"jobs[bad].{path}"
    assert message in issue.message


def test_at_accepts_fractional_seconds_and_lowercase_z():
    cfg = load(job_text("kind: noop\nagent: x\nschedule: {at: '2026-04-26t15:00:00.1234567z'}\n"))
    assert cfg.issues == []
    assert cfg.jobs["bad"].schedule == AtSchedule(datetime(2026, 4, 26, 15, 0, 0, 123456, UTC))


def test_at_in_the_past_is_accepted():
    cfg = load(job_text("kind: noop\nagent: x\nschedule: {at: '2020-01-01T00:00:00Z'}\n"))
    assert cfg.issues == []


def test_unknown_kind_lists_known_kinds_sorted():
    [issue] = bad_job_issues("kind: rsss\nagent: x\nschedule: {every_secs: 60}\n")
    assert issue.path == "jobs[bad].kind"
    assert issue.line == 5
    assert "'rsss'" in issue.message
    assert "known kinds: noop, rss, webhook_poll" in issue.message
    assert "did you mean 'rss'?" in issue.message


def test_missing_env_var_names_the_variable_the_job_and_the_line():
    body = """\
        kind: webhook_poll
        agent: x
        schedule: {every_secs: 60}
        config:
          url: https://example.com
          headers:
            Authorization: "Bearer ${MISSING_TOKEN}"
        """
    issues = bad_job_issues(body)
    assert len(issues) == 1
    issue = issues[0]
    assert issue.message == "environment variable MISSING_TOKEN is not set"
    assert issue.path == "jobs[bad].config.headers.Authorization"
    assert issue.line == line_of(job_text(body), "Authorization:")
    assert "jobs[bad]" in str(issue) and "MISSING_TOKEN" in str(issue)


def test_malformed_env_reference_is_rejected():
    [issue] = bad_job_issues(
        "kind: noop\nagent: x\nschedule: {every_secs: 60}\nconfig: {message: '${ANA-TOKEN}'}\n"
    )
    assert issue.path == "jobs[bad].config.message"
    assert "malformed" in issue.message


def test_env_reference_outside_config_is_rejected():
    [issue] = bad_job_issues(
        "kind: noop\nagent: x\nschedule: {every_secs: 60}\n"
        "failure_to: {channel: log, to: '${ANA_TOKEN}'}\n"
    )
    assert issue.path == "jobs[bad].failure_to.to"
    assert "only allowed inside config" in issue.message


def test_validator_config_error_maps_to_config_path_and_line():
    body = "kind: webhook_poll\nagent: x\nschedule: {every_secs: 60}\nconfig:\n  url: ftp://x\n"
    [issue] = bad_job_issues(body)
    assert issue.path == "jobs[bad].config.url"
    assert issue.line == line_of(job_text(body), "url: ftp://x")
    assert issue.message == "url must be an http(s) URL, got 'ftp://x'"


def test_validator_pydantic_error_maps_to_config_path():
    body = "kind: noop\nagent: x\nschedule: {every_secs: 60}\nconfig:\n  mesage: hi\n"
    [issue] = bad_job_issues(body)
    assert issue.path == "jobs[bad].config.mesage"
    assert issue.line == line_of(job_text(body), "mesage: hi")
    assert issue.message == "unknown field"


def test_validator_messages_never_leak_expanded_secrets():
    body = (
        "kind: webhook_poll\nagent: x\nschedule: {every_secs: 60}\nconfig: {url: '${JIRA_TOKEN}'}\n"
    )
    [issue] = bad_job_issues(body)
    assert "jira-secret-value" not in str(issue)
    assert "***" in issue.message


def test_validator_mutating_its_argument_does_not_change_the_stored_config():
    def mutating(config: dict) -> None:
        config["injected"] = True
        config["headers"]["X"] = "y"

    text = job_text("kind: m\nagent: x\nschedule: {every_secs: 60}\nconfig: {headers: {}}\n")
    cfg = load(text, validators={**VALIDATORS, "m": mutating})
    assert cfg.jobs["bad"].config == {"headers": {}}


def test_crashing_validator_rejects_only_its_job():
    def broken(config: dict) -> None:
        raise KeyError("boom")

    cfg = load(
        job_text("kind: broken\nagent: x\nschedule: {every_secs: 60}\n"),
        validators={**VALIDATORS, "broken": broken},
    )
    issue = only_issue(cfg)
    assert issue.path == "jobs[bad].config"
    assert "KeyError" in issue.message
    assert list(cfg.jobs) == ["ok"]


def test_duplicate_job_id_rejects_the_later_one_naming_the_first_line():
    text = """\
        pollers:
          jobs:
            - id: dup
              kind: noop
              agent: x
              schedule: {every_secs: 60}
            - id: other
              kind: noop
              agent: x
              schedule: {every_secs: 60}
            - id: dup
              kind: rss
              agent: x
              schedule: {every_secs: 90}
        """
    cfg = load(text)
    issue = only_issue(cfg)
    assert issue.line == 11
    assert issue.message == "duplicate job id 'dup' (first defined at line 3)"
    assert list(cfg.jobs) == ["dup", "other"]
    assert cfg.jobs["dup"].kind == "noop"


def test_non_mapping_job_is_rejected_alone():
    cfg = load(
        "pollers:\n  jobs:\n    - just a string\n"
        "    - {id: ok, kind: noop, agent: x, schedule: {every_secs: 60}}\n"
    )
    issue = only_issue(cfg)
    assert (issue.path, issue.line) == ("jobs[0]", 3)
    assert list(cfg.jobs) == ["ok"]


# --- agents --------------------------------------------------------------------------

AGENTS = """\
    agents:
      ana:
        telegram: { account: ana_bot, token: "123456:literal-bot-token" }
      bob:
        slack: { bot_token: "${BOB_SLACK}" }
      cat:
        webhook: { url: https://x, secret: "${ANA_TOKEN}" }
    pollers:
      jobs:
        - {id: via_ana, kind: noop, agent: ana, schedule: {every_secs: 60}}
        - {id: via_bob, kind: noop, agent: bob, schedule: {every_secs: 60}}
        - {id: via_cat, kind: noop, agent: cat, schedule: {every_secs: 60}}
        - {id: via_dan, kind: noop, agent: dan, schedule: {every_secs: 60}}
    """


def test_literal_secret_in_agent_binding_is_rejected_without_echoing_it():
    cfg = load(AGENTS)
    agent_issues = [i for i in cfg.issues if i.path.startswith("agents.")]
    by_path = {i.path: i for i in agent_issues}
    ana = by_path["agents.ana.telegram.token"]
    assert ana.message == "secrets must be given as ${ENV_VAR} or ${file:/path} references"
    assert ana.line == line_of(AGENTS, "ana_bot")
    assert ana.job_id is None
    assert "literal-bot-token" not in "\n".join(str(i) for i in cfg.issues)

    bob = by_path["agents.bob.slack.bot_token"]
    assert bob.message == "environment variable BOB_SLACK is not set"
    assert len(agent_issues) == 2

    assert set(cfg.agents) == {"cat"}
    assert list(cfg.jobs) == ["via_cat", "via_dan"]
    # one issue per agent error: it rejects the agent's jobs, which get no issue of their own
    assert len(cfg.issues) == 2
    assert (ana.rejects, bob.rejects) == (("via_ana",), ("via_bob",))
    assert ana.job_ids == ("via_ana",)
    assert str(ana).endswith("(agent 'ana' is rejected, and with it its jobs: via_ana)")


@pytest.mark.parametrize(
    "binding, ok",
    [
        ("{password: '${P}'}", True),
        ("{client_secret: '${P}'}", True),
        ("{api_key: hunter2}", False),
        ("{apikey: hunter2}", False),
        ("{refresh_token: hunter2}", False),
        ("{db_password: ''}", False),
        ("{token: null}", False),
        ("{token: 'Bearer ${P}'}", False),
        ("{token: '$${P}'}", False),
        ("{nested: {signing_secret: hunter2}}", False),
        ("{token_path: ./t.json, account: a}", True),
    ],
)
def test_secret_named_binding_keys_must_be_env_references(binding, ok):
    cfg = load(f"agents:\n  ana:\n    chan: {binding}\npollers: {{}}\n", env={"P": "x"})
    assert ("ana" in cfg.agents) is ok
    assert all("hunter2" not in str(i) for i in cfg.issues)


def test_agent_with_bad_shape_is_an_issue_not_a_file_error():
    cfg = load("agents:\n  ana: [telegram]\n  bob:\npollers: {}\n")
    assert [i.path for i in cfg.issues] == ["agents.ana"]
    assert cfg.agents == {"bob": AgentSpec("bob", {})}


# --- expand_env / env_refs -------------------------------------------------------


def test_expand_env_recurses_and_handles_escapes():
    value = {
        "a": "x ${A} y ${B}",
        "escaped": "$${A}",
        "nested": [{"k": "${A}"}, 3, None, True, ["${B}"]],
        "${A}": "keys are not expanded",
        "plain": "no refs $A {A} $$",
    }
    assert expand_env(value, {"A": "1", "B": "two"}) == {
        "a": "x 1 y two",
        "escaped": "${A}",
        "nested": [{"k": "1"}, 3, None, True, ["two"]],
        "${A}": "keys are not expanded",
        "plain": "no refs $A {A} $$",
    }
    assert value["a"] == "x ${A} y ${B}"  # input untouched


def test_expand_env_missing_var_names_var_and_path_but_no_values():
    with pytest.raises(ConfigError) as info:
        expand_env(
            {"h": [{"auth": "${PRESENT} ${ANA_TOKEN}"}]}, {"PRESENT": "s3cr3t"}, path="config"
        )
    assert info.value.reason == "environment variable ANA_TOKEN is not set"
    assert info.value.path == "config.h[0].auth"
    assert "s3cr3t" not in str(info.value)


def test_expand_env_rejects_malformed_reference():
    with pytest.raises(ConfigError, match="malformed"):
        expand_env("${1BAD}", {})


def test_env_refs_ignores_escaped_references():
    value = {"a": "${A}-${B}", "b": ["$${C}", {"d": "${D}"}], "${KEY}": 1, "n": 5}
    assert env_refs(value) == {"A", "B", "D"}


# --- definition_hash -------------------------------------------------------------

HASH_A = """\
    pollers:
      jobs:
        - id: j
          kind: webhook_poll
          agent: ana
          schedule: {every_secs: 60}
          config:
            url: https://example.com
            headers: {Accept: json, Authorization: "Bearer ${JIRA_TOKEN}"}
    """

HASH_B = """\
    pollers:
      jobs:
        - config:
            headers: {Authorization: "Bearer ${JIRA_TOKEN}", Accept: json}
            url: https://example.com
          schedule: {every_secs: 60.0}
          agent: ana
          kind: webhook_poll
          id: j
    """


def job_hash(text: str, env: dict | None = None) -> str:
    cfg = load(text, env=env)
    assert cfg.issues == []
    return cfg.jobs["j"].definition_hash


def test_definition_hash_is_stable_across_key_order():
    assert job_hash(HASH_A) == job_hash(HASH_B)


def test_definition_hash_ignores_env_values():
    assert job_hash(HASH_A) == job_hash(HASH_A, env={**ENV, "JIRA_TOKEN": "rotated"})


@pytest.mark.parametrize(
    "old, new",
    [
        ("Accept: json", "Accept: xml"),
        ("every_secs: 60", "every_secs: 61"),
        ("agent: ana", "agent: bob"),
        ("schedule: {every_secs: 60}", "schedule: {every_secs: 60, stagger_jitter_ms: 1}"),
        ("  jobs:", "  default_jitter_ms: 1\n  jobs:"),
        ("agent: ana", "agent: ana\n      paused_on_boot: true"),
        ("agent: ana", "agent: ana\n      failure_to: {channel: log, to: ops}"),
    ],
)
def test_definition_hash_changes_with_the_definition(old, new):
    text = textwrap.dedent(HASH_A)
    assert old in text
    assert job_hash(text) != job_hash(text.replace(old, new, 1))
