import doctest

from nexopoll.core import redact as redact_mod
from nexopoll.core.redact import redact, secret_values


def test_secret_values_are_the_referenced_env_values():
    env = {"TOKEN": "s3cret-value", "SHORT": "ab", "OTHER": "unrelated"}
    config = {"url": "https://x/bot${TOKEN}/get", "h": ["${SHORT}"], "lit": "$${OTHER}"}
    assert secret_values(config, env) == {"s3cret-value"}


def test_redact_masks_every_occurrence_longest_first():
    text = "token abcdef and abcdefgh, again abcdefgh"
    assert redact(text, {"abcdef", "abcdefgh"}) == "token *** and ***, again ***"
    assert redact("nothing here", set()) == "nothing here"


def test_docstring_example():
    assert doctest.testmod(redact_mod).failed == 0
