"""A digit that is not ASCII 0-9 in a template or a dotted path: refused at load, harmless at tick.

Old behaviour: a superscript two is ``isdigit()`` but ``int()`` refuses it, so a template
that validated crashed every tick; an Arabic-indic one read as index 1.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexopoll.core.config import load_config
from nexopoll.core.errors import PermanentError
from nexopoll.core.templates import TemplateError, check_path, check_template, lookup, render
from pollers.webhook_poll import WebhookPollPoller, parse_items

ODD_DIGITS = ["\u0661", "\uff11", "\u00b2", "\u2460", "\u0967", "\u07c0", "\U0001d7ce"]
ITEM = {"tags": ["a", "b"], "n": {"1": "one"}}


@pytest.mark.parametrize("digit", ODD_DIGITS, ids=ascii)
@pytest.mark.parametrize("shape", ["{tags.%s}", "{n.%s}", "x {tags.1%s} y", "{%s}"])
def test_check_template_refuses_non_ascii_digits(digit, shape):
    with pytest.raises(TemplateError, match="non-ASCII digit"):
        check_template(shape % digit)


@pytest.mark.parametrize("digit", ODD_DIGITS, ids=ascii)
def test_render_and_lookup_never_crash_on_them(digit):
    assert render("[{tags." + digit + "}]", ITEM) == "[]"
    assert lookup(ITEM, f"tags.{digit}", "missing") == "missing"
    assert lookup({"k": {digit: 5}}, f"k.{digit}") == 5  # a mapping key like any other


@pytest.mark.parametrize("digit", ODD_DIGITS, ids=ascii)
def test_check_path_refuses_them(digit):
    with pytest.raises(TemplateError, match="non-ASCII digit"):
        check_path(f"data.items.{digit}")


def test_huge_ascii_index_is_missing_not_a_crash():
    assert render("{tags." + "9" * 5000 + "}", ITEM) == ""
    assert lookup(ITEM, "tags." + "0" * 10, "missing") == "missing"


@pytest.mark.parametrize("template", ["{tags.1}", "{名前}", "{五}", "{dc:creator}", "{n.1}"])
def test_ordinary_templates_still_validate(template):
    check_template(template)
    assert check_path("data.items") == ["data", "items"] and check_path("") == []


@pytest.mark.parametrize("digit", ODD_DIGITS[:3], ids=ascii)
def test_webhook_poll_template_with_odd_digit_is_rejected_at_load(digit):
    text = (
        "pollers:\n  jobs:\n    - id: j\n      kind: webhook_poll\n      agent: a\n"
        "      schedule: {every_secs: 60}\n      config:\n"
        "        url: https://api.example/items\n"
        "        deliver: {channel: log, to: ops}\n"
        f'        message_template: "{{tags.{digit}}}"\n'
    )
    cfg = load_config(
        text,
        source="p.yaml",
        env={},
        now=datetime(2026, 1, 1, tzinfo=UTC),
        validators={"webhook_poll": WebhookPollPoller().validate},
    )
    [issue] = cfg.issues
    assert (issue.path, issue.line) == ("jobs[j].config.message_template", 10)
    assert "non-ASCII digit" in issue.message


@pytest.mark.parametrize("digit", ODD_DIGITS, ids=ascii)
def test_items_path_with_odd_digit_is_a_clear_permanent_error_at_tick(digit):
    with pytest.raises(PermanentError, match="is not a JSON array"):
        parse_items(b'{"items": [[1, 2]]}', f"items.{digit}")
