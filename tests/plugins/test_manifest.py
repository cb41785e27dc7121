"""Manifest validation exactly as seed 004, duplicate kinds, discovery."""

from __future__ import annotations

import re

import pytest

from nexopoll.plugins.manifest import (
    DuplicateKindError,
    ManifestError,
    check_kinds,
    load_manifests,
    parse_manifest,
)

from .conftest import manifest_text, write_plugin

GOOD = """
[plugin]
id = "gcal"
[plugin.entrypoint]
command = "node"
args = ["plugin.js", "--fast"]
env = { TOKEN = "${GCAL_TOKEN}" }
[plugin.poller]
kinds = ["google_calendar", "gcal2"]
lifecycle = "ephemeral"
max_concurrent_ticks = 64
tick_timeout_secs = 3600
"""


def test_a_full_manifest_parses():
    m = parse_manifest(GOOD, "/p/gcal/nexopoll-plugin.toml")
    assert m.plugin_id == "gcal" and m.command == "node"
    assert m.args == ("plugin.js", "--fast") and m.env == {"TOKEN": "${GCAL_TOKEN}"}
    assert m.kinds == ("google_calendar", "gcal2")
    assert (m.lifecycle, m.max_concurrent_ticks, m.tick_timeout_secs) == ("ephemeral", 64, 3600)
    assert m.directory == "/p/gcal"


def test_defaults_are_long_lived_one_tick_sixty_seconds():
    m = parse_manifest(
        '[plugin]\nid="x"\n[plugin.entrypoint]\ncommand="x"\n[plugin.poller]\nkinds=["ab"]\n', "f"
    )
    assert (m.lifecycle, m.max_concurrent_ticks, m.tick_timeout_secs) == ("long_lived", 1, 60)
    assert m.args == () and m.env == {}


def bad(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


CASES = [
    ("not toml", "= = =", "not valid TOML"),
    ("no [plugin]", "x = 1", "[plugin] is missing"),
    ("id missing", bad('id = "gcal"', ""), "[plugin] id must be"),
    ("id empty", bad('id = "gcal"', 'id = ""'), "[plugin] id must be"),
    ("id not a string", bad('id = "gcal"', "id = 3"), "[plugin] id must be"),
    (
        "entrypoint missing",
        bad(
            '[plugin.entrypoint]\ncommand = "node"\nargs = ["plugin.js", '
            '"--fast"]\nenv = { TOKEN = "${GCAL_TOKEN}" }',
            "",
        ),
        "[plugin.entrypoint] is missing",
    ),
    ("command missing", bad('command = "node"', ""), "command must be a non-empty string"),
    ("command blank", bad('command = "node"', 'command = "  "'), "command must be a non-empty"),
    (
        "args not list",
        bad('args = ["plugin.js", "--fast"]', 'args = "plugin.js"'),
        "args must be a list of strings",
    ),
    (
        "args not strings",
        bad('args = ["plugin.js", "--fast"]', "args = [1]"),
        "args must be a list of strings",
    ),
    (
        "env not strings",
        bad('env = { TOKEN = "${GCAL_TOKEN}" }', "env = { TOKEN = 1 }"),
        "env must be a table of strings",
    ),
    (
        "env bad name",
        bad('env = { TOKEN = "${GCAL_TOKEN}" }', 'env = { "A-B" = "x" }'),
        "is not a variable name",
    ),
    ("poller missing", GOOD.split("[plugin.poller]")[0], "[plugin.poller] is missing"),
    ("kinds missing", bad('kinds = ["google_calendar", "gcal2"]', ""), "kinds must be a non-empty"),
    (
        "kinds empty",
        bad('kinds = ["google_calendar", "gcal2"]', "kinds = []"),
        "kinds must be a non-empty",
    ),
    (
        "kinds duplicate",
        bad('kinds = ["google_calendar", "gcal2"]', 'kinds = ["ab", "ab"]'),
        "'ab' is listed twice",
    ),
    ("kind uppercase", bad('"gcal2"]', '"Gcal"]'), "kind 'Gcal' must match"),
    ("kind one char", bad('"gcal2"]', '"g"]'), "kind 'g' must match"),
    ("kind digit first", bad('"gcal2"]', '"2cal"]'), "kind '2cal' must match"),
    ("kind dash", bad('"gcal2"]', '"g-cal"]'), "kind 'g-cal' must match"),
    ("kind newline", bad('"gcal2"]', '"gcal\\n"]'), "must match"),
    ("kind not string", bad('"gcal2"]', "7]"), "kind 7 must match"),
    (
        "lifecycle",
        bad('lifecycle = "ephemeral"', 'lifecycle = "forever"'),
        "lifecycle must be one of long_lived, ephemeral",
    ),
    (
        "max 0",
        bad("max_concurrent_ticks = 64", "max_concurrent_ticks = 0"),
        "max_concurrent_ticks must be an integer in 1..=64, got 0",
    ),
    ("max 65", bad("max_concurrent_ticks = 64", "max_concurrent_ticks = 65"), "1..=64, got 65"),
    ("max bool", bad("max_concurrent_ticks = 64", "max_concurrent_ticks = true"), "got True"),
    ("max float", bad("max_concurrent_ticks = 64", "max_concurrent_ticks = 2.5"), "got 2.5"),
    (
        "timeout 0",
        bad("tick_timeout_secs = 3600", "tick_timeout_secs = 0"),
        "tick_timeout_secs must be an integer in 1..=3600, got 0",
    ),
    ("timeout 3601", bad("tick_timeout_secs = 3600", "tick_timeout_secs = 3601"), "got 3601"),
    ("timeout string", bad("tick_timeout_secs = 3600", 'tick_timeout_secs = "60"'), "got '60'"),
    (
        "unknown key",
        bad("lifecycle =", "lifecycl = 1\nlifecycle ="),
        "unknown key plugin.poller.lifecycl",
    ),
    (
        "topic trailing dot",
        bad("lifecycle =", 'broker_topic_prefix = "a.b."\nlifecycle ='),
        "broker_topic_prefix must be non-empty",
    ),
]


@pytest.mark.parametrize(("name", "text", "message"), CASES, ids=[c[0] for c in CASES])
def test_every_validation_error_is_reported_with_the_file(name, text, message):
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "/plugins/x/nexopoll-plugin.toml")
    assert message in str(info.value)
    assert re.match(r"/plugins/x/nexopoll-plugin\.toml(:\d+)?: ", str(info.value))


def test_all_problems_are_reported_at_once():
    text = bad("tick_timeout_secs = 3600", "tick_timeout_secs = 0").replace(
        'lifecycle = "ephemeral"', 'lifecycle = "x"'
    )
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "f")
    assert len(info.value.problems) == 2


def test_a_kind_claimed_by_two_plugins_names_both(tmp_path):
    write_plugin(tmp_path, "alpha", ["shared_kind", "a_only"])
    write_plugin(tmp_path, "beta", ["shared_kind"])
    good, errors = load_manifests(str(tmp_path))
    assert errors == [] and [m.plugin_id for m in good] == ["alpha", "beta"]
    with pytest.raises(DuplicateKindError) as info:
        check_kinds(good, {})
    text = str(info.value)
    assert "'shared_kind'" in text and "plugin 'alpha'" in text and "plugin 'beta'" in text
    assert str(tmp_path / "alpha") in text and str(tmp_path / "beta") in text


def test_a_kind_claimed_by_a_plugin_and_a_builtin_names_both(tmp_path):
    write_plugin(tmp_path, "alpha", ["webhook_poll"])
    good, _ = load_manifests(str(tmp_path))
    with pytest.raises(DuplicateKindError, match=r"built-in pollers\.webhook_poll and by plugin"):
        check_kinds(good, {"webhook_poll": "built-in pollers.webhook_poll"})


def test_discovery_finds_manifests_one_level_down_and_keeps_bad_ones_apart(tmp_path):
    write_plugin(tmp_path, "alpha", ["aa"])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "nexopoll-plugin.toml").write_text("[plugin]\n")
    (tmp_path / "notes").mkdir()  # no manifest: ignored
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup" / "nexopoll-plugin.toml").write_text(manifest_text("alpha", ["bb"]))
    good, errors = load_manifests(str(tmp_path))
    assert [m.plugin_id for m in good] == ["alpha"]
    text = " ".join(map(str, errors))
    assert "broken" in text and "[plugin] id must be" in text
    assert "plugin id 'alpha' is also used by" in text
    assert load_manifests(str(tmp_path / "missing")) == ([], [])


@pytest.mark.parametrize("key", ["tick_timeout_secs", "max_concurrent_ticks"])
@pytest.mark.parametrize("value", ["1000000000000000", "1000000000000000000", "0", "-1"])
def test_a_number_past_its_bounds_is_refused_with_file_line_and_field(key, value):
    good = manifest_text("x", ["k1"])
    text = re.sub(rf"{key} = \d+", f"{key} = {value}", good)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t.startswith(key))
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "/plugins/x/nexopoll-plugin.toml")
    assert str(info.value).startswith(
        f"/plugins/x/nexopoll-plugin.toml:{line}: [plugin.poller] {key}"
    )
