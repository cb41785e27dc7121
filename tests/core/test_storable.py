from __future__ import annotations

import math

import pytest

from nexopoll.core.storable import storable, storable_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("plain", "plain"), ("a\x00b\x00", "ab"), ("x\ud800y", "x\ufffdy"), ("\udfff", "\ufffd")],
)
def test_storable_text(text, expected):
    assert storable_text(text) == expected


def test_storable_fixes_strings_keys_and_non_finite_floats_at_any_depth():
    value = {"a\x00": ["b\x00", {"c": math.inf}], "n": 1, "f": 1.5, "ok": True, "none": None}
    assert storable(value) == {"a": ["b", {"c": None}], "n": 1, "f": 1.5, "ok": True, "none": None}


def test_storable_returns_a_clean_value_as_it_is():
    value = {"a": ["b", {"c": 1.0}], "n": 2**70}
    assert storable(value) is value
