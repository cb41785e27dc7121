"""The pure escaping rules of :mod:`nexopoll.core.markup` and the template's trusted spans."""

import doctest

import pytest

from nexopoll.core import markup, templates
from nexopoll.core.markup import (
    compose,
    escape_html,
    escape_markdown,
    escape_markdown_v2,
    escape_slack,
)
from nexopoll.core.templates import render_message

MDV2_SPECIAL = "_*[]()~`>#+-=|{}.!\\"  # the Bot API's list, and the backslash itself


def test_docstring_examples():
    assert doctest.testmod(markup).failed == 0
    assert doctest.testmod(templates).failed == 0


@pytest.mark.parametrize("char", list(MDV2_SPECIAL))
def test_every_markdown_v2_special_character_is_escaped(char):
    assert escape_markdown_v2(f"a{char}b") == f"a\\{char}b"


def test_ordinary_characters_are_left_alone():
    text = "abc XYZ 0123 ñ 🚀 @ % $ ^ & ' \" , ; : ? / \n"
    assert escape_markdown_v2(text) == text.replace(".", "\\.")
    assert escape_slack("plain @here text") == "plain @here text"


def test_slack_escapes_ampersand_first_so_entities_show_literally():
    assert escape_slack("&lt;!channel&gt;") == "&amp;lt;!channel&amp;gt;"
    assert escape_slack("<!channel>") == "&lt;!channel&gt;"


def test_html_and_legacy_markdown():
    assert escape_html("<a href='x' title=\"y\">&</a>") == (
        "&lt;a href=&#39;x&#39; title=&quot;y&quot;&gt;&amp;&lt;/a&gt;"
    )
    assert escape_markdown("a_b*c`d[e]f") == "a\\_b\\*c\\`d\\[e]f"


def test_compose_escapes_only_outside_the_trusted_spans():
    text, spans = render_message("*{a}* <{b|raw}>", {"a": "x_y", "b": "z.w"})
    assert text == "*x_y* <z.w>"
    assert compose(text, [tuple(s) for s in spans], escape_markdown_v2, 100) == "*x\\_y* <z.w>"


def test_a_field_can_be_named_like_the_marker_and_pipes_stay_in_paths():
    assert render_message("{a|b}", {"a|b": "v"}) == ("v", [])
    assert render_message("{|raw}", {"|raw": "<v>"}) == ("<v>", [])
