"""``manage.py pollers import-legacy``: legacy gmail-poller.yaml → pollers.yaml jobs."""

from __future__ import annotations

import io
import textwrap
from datetime import UTC, datetime

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from nexopoll.core.config import load_config
from nexopoll.legacy_import import LegacyImportError, merge, translate
from nexopoll.runtime.registry import get_registry

LEGACY = textwrap.dedent("""\
    gmail_poller:
      enabled: true
      interval_secs: 120
      accounts:
        - id: ana_acc
          agent_id: ana
          token_path: ./secrets/ana_token.json
          client_id_path: ./secrets/ana_client_id.txt
          client_secret_path: ./secrets/ana_client_secret.txt
      jobs:
        - name: Lead Alert
          account: ana_acc
          query: "is:unread subject:lead"
          forward_to_subject: plugin.outbound.webhook.ana
          forward_to: "ops"
          extract: {name: "Nombre:\\\\s*(.+)"}
          require_fields: [name]
          message_template: "New lead 🚨 {name}"
          newer_than: 1d
          sender_allowlist: ["@mycompany.com"]
        - name: invoices
          account: ana_acc
          query: "is:unread label:invoice"
          interval_secs: 600
          forward_to_subject: plugin.outbound.log
          forward_to: "books"
          message_template: "{snippet}"
          mark_read_on_dispatch: false
        - name: orphan
          account: nobody
          query: x
          forward_to_subject: plugin.outbound.log
          forward_to: y
          message_template: z
    """)

EXISTING = textwrap.dedent("""\
    # operator's file: this comment must survive
    pollers:
      default_jitter_ms: 0   # inline comment too
      jobs:
        # hand-migrated already
        - id: gmail_legacy_invoices
          kind: gmail
          agent: ana
          schedule: {every_secs: 60}
          config:
            query: "label:invoice"
            deliver: {channel: log, to: manual}
    agents:
      ana:
        log: {}
        webhook: {url: "https://hooks.example/ana"}   # the lead alert delivers here
    """)


def test_translate_maps_every_field_and_reports_what_it_skips():
    tr = translate(LEGACY, validate=get_registry().get("gmail").validate)
    assert [j["id"] for j in tr.jobs] == ["gmail_legacy_lead_alert", "gmail_legacy_invoices"]
    lead, invoices = tr.jobs
    assert lead["kind"] == "gmail" and lead["agent"] == "ana"
    assert lead["schedule"] == {"every_secs": 120} and invoices["schedule"] == {"every_secs": 600}
    assert lead["config"] == {
        "query": "is:unread subject:lead",
        "newer_than": "1d",
        "max_per_tick": 20,
        "dispatch_delay_ms": 1000,
        "sender_allowlist": ["@mycompany.com"],
        "extract": {"name": "Nombre:\\s*(.+)"},
        "require_fields": ["name"],
        "message_template": "New lead 🚨 {name}",
        "mark_read_on_dispatch": True,
        "deliver": {"channel": "webhook", "to": "ops"},
    }
    assert invoices["config"]["mark_read_on_dispatch"] is False
    assert tr.agents == {
        "ana": {
            "client_id_path": "./secrets/ana_client_id.txt",
            "token_path": "./secrets/ana_token.json",
            "client_secret_path": "./secrets/ana_client_secret.txt",
        }
    }
    assert any("orphan" in w and "unknown account" in w for w in tr.warnings)


def test_single_account_shorthand_and_disabled_file():
    text = "gmail_poller:\n  token_path: t.json\n  jobs:\n    - {name: A, query: q}\n"
    tr = translate(text)
    assert tr.jobs[0]["agent"] == "default" and tr.agents == {"default": {"token_path": "t.json"}}
    assert any("whatsapp" in w for w in tr.warnings)  # no forward_to_subject: a fallback, said
    off = translate("gmail_poller:\n  enabled: false\n  jobs: [{name: a}]\n")
    assert off.jobs == [] and "enabled: false" in off.warnings[0]
    with pytest.raises(LegacyImportError):
        translate("just: [text")
    with pytest.raises(LegacyImportError):
        translate("gmail_poller: {}")


def test_merge_keeps_comments_and_explicit_entries_win():
    result = merge(EXISTING, translate(LEGACY))
    assert result.added == ["gmail_legacy_lead_alert"]
    assert result.collisions == ["gmail_legacy_invoices"]
    assert result.agents_added == ["ana"]
    text = result.text
    for comment in ("# operator's file", "# inline comment too", "# hand-migrated already"):
        assert comment in text
    doc = yaml.safe_load(text)
    jobs = {j["id"]: j for j in doc["pollers"]["jobs"]}
    assert jobs["gmail_legacy_invoices"]["config"]["deliver"]["to"] == "manual"  # untouched
    assert doc["agents"]["ana"]["log"] == {} and "token_path" in doc["agents"]["ana"]["google"]
    assert "New lead 🚨 {name}" in text  # UTF-8 kept, not escaped
    loaded = load_config(
        text,
        source="p.yaml",
        env={},
        now=datetime(2026, 1, 1, tzinfo=UTC),
        validators=get_registry().validators(),
    )
    assert set(loaded.jobs) == {"gmail_legacy_invoices", "gmail_legacy_lead_alert"}


@pytest.fixture
def files(tmp_path, settings):
    legacy = tmp_path / "gmail-poller.yaml"
    legacy.write_text(LEGACY)
    target = tmp_path / "pollers.yaml"
    target.write_text(EXISTING)
    settings.NEXOPOLL_CONFIG = str(target)
    return legacy, target


def _call(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("pollers", "import-legacy", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_command_without_write_prints_what_it_would_add_and_changes_nothing(files):
    legacy, target = files
    out, err = _call(str(legacy))
    assert target.read_text() == EXISTING
    added = yaml.safe_load(out.split("\n", 1)[1])
    assert [j["id"] for j in added["pollers"]["jobs"]] == ["gmail_legacy_lead_alert"]
    assert "collision: gmail_legacy_invoices" in err and "explicit entry wins" in err


def test_command_write_merges_and_reports_each_collision(files):
    legacy, target = files
    out, err = _call(str(legacy), "--write")
    assert "1 job(s) added (gmail_legacy_lead_alert)" in out and "1 collision" in out
    assert "collision: gmail_legacy_invoices" in err
    text = target.read_text()
    assert "# hand-migrated already" in text and "gmail_legacy_lead_alert" in text
    # running it again adds nothing and reports both ids as collisions
    out2, err2 = _call(str(legacy), "--write")
    assert "0 job(s) added" in out2 and err2.count("collision:") == 2


def test_command_creates_a_missing_config_and_refuses_an_unreadable_legacy_file(files, tmp_path):
    legacy, target = files
    target.unlink()
    _call(str(legacy), "--write")
    doc = yaml.safe_load(target.read_text())
    assert len(doc["pollers"]["jobs"]) == 2
    with pytest.raises(CommandError, match="cannot read"):
        _call(str(tmp_path / "absent.yaml"))
