"""The redaction rule: no run of 8+ characters of a secret survives, in any normalisation."""

import doctest
import json
import random
import string
from urllib.parse import quote, unquote

import pytest

from nexopoll.core import redact as redact_mod
from nexopoll.core.redact import MASK, redact, secret_values
from tests.support.secrets import assert_no_secret, leaks

SLACK = "https://hooks.slack.com/services/T0A1B2C3D/B4E5F6G7H/xYz9SecretWebhookTok3n"
FEED = "https://Feeds.Example.COM/v1/tok-9f8e7d6c5b4a/items.json?api_key=Qk3yS3cretV4lue"


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


@pytest.mark.parametrize(
    ("secret", "text"),
    [
        # a token in a path, the URL shortened by the HTTP layer (scheme, host, path only)
        ("https://api.example.org/bot123456:ABCdefGHIjkl/getUpdates?offset=1",
         "https://api.example.org/bot123456:ABCdefGHIjkl/getUpdates: request failed (refused)"),
        # urllib3/requests error formats: host and path apart, query dropped
        (SLACK, "HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries exceeded "
                "with url: /services/T0A1B2C3D/B4E5F6G7H/xYz9SecretWebhookTok3n (Caused by "
                "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: "
                "Failed to establish a new connection: [Errno 111] Connection refused'))"),
        # the host case-folded, the query dropped, the scheme dropped
        (FEED, "feeds.example.com/v1/tok-9f8e7d6c5b4a/items.json: timed out"),
        (FEED, "GET https://FEEDS.EXAMPLE.COM/V1/TOK-9F8E7D6C5B4A/ITEMS.JSON failed"),
        # the query alone, as a server might echo it
        (FEED, "400 Bad Request: unknown parameter api_key=Qk3yS3cretV4lue"),
        # a secret host name
        ("https://Tenant-7Q2X-Private.example.net/feed",
         "Failed to resolve 'tenant-7q2x-private.example.net' ([Errno -2] Name not known)"),
        # the path percent-decoded in the message …
        ("https://x.example/hook/a%2Fb%20T0kenValue42", "POST /hook/a/b T0kenValue42 -> 500"),
        # … or percent-encoded (lower- or upper-case hex) where the secret has it raw
        ("https://x.example/hook/my token/value 42!", "url: /hook/my%20token%2Fvalue%2042%21"),
        ("https://x.example/hook/my token/value 42!", "url: /hook/my%20token/value%2042!"),
        ("https://x.example/hook/my token/value 42!", "url: /hook/my+token/value+42!"),
        # JSON- or repr-escaped
        ('pa"ss\\word-1234', json.dumps({"error": 'bad pa"ss\\word-1234'})),
        # an IDNA host in its punycode spelling
        ("https://bücher-geheim-shop.example/feed", "connect to xn--bcher-geheim-shop-vsb.example"),
        # truncated: what is left of it
        (SLACK, "…ervices/T0A1B2C3D/B4E5F6G"),
    ],
)  # fmt: skip
def test_no_run_of_eight_chars_of_a_secret_survives(secret, text):
    assert leaks(text, secret), "the example must contain the secret in some form"
    clean = redact(text, frozenset({secret}))
    assert MASK in clean
    assert_no_secret(clean, secret)


def test_the_rest_of_the_message_stays_readable():
    text = (
        "HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries exceeded with url: "
        "/services/T0A1B2C3D/B4E5F6G7H/xYz9SecretWebhookTok3n (Caused by ConnectTimeoutError)"
    )
    assert redact(text, {SLACK}) == (
        "HTTPSConnectionPool(host='***', port=443): Max retries exceeded with url: *** "
        "(Caused by ConnectTimeoutError)"
    )


def test_short_secrets_are_masked_where_whole_only():
    assert redact("pin 4711x in 4711 and 471", {"4711x"}) == "pin *** in 4711 and 471"
    assert redact("PIN 4711X", {"4711x"}) == "PIN ***"


def test_random_mixes_of_secret_fragments_leave_nothing_of_eight_chars():
    rnd = random.Random(5)
    secrets = [SLACK, FEED, "tok_" + "".join(rnd.choices(string.ascii_letters, k=28))]
    for _ in range(300):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            s = rnd.choice(secrets)
            a = rnd.randrange(len(s))
            piece = s[a : a + rnd.randint(1, 40)]
            piece = rnd.choice([piece, piece.lower(), piece.upper(), quote(piece), unquote(piece)])
            parts.append(piece)
            parts.append(rnd.choice(["", " ", "/", "x", ": request failed ", "'"]))
        text = "".join(parts)
        assert_no_secret(redact(text, frozenset(secrets)), *secrets)


def test_redact_is_cheap_for_a_long_message():
    import time

    secrets = frozenset({SLACK, FEED})
    text = ("x" * 50 + SLACK[10:40]) * 40  # 3,200 chars, 40 partial hits
    redact(text, secrets)  # compiles and caches the matcher
    started = time.perf_counter()
    for _ in range(20):
        clean = redact(text, secrets)
    assert (time.perf_counter() - started) / 20 < 0.05
    assert_no_secret(clean, SLACK)


def test_a_file_reference_is_masked_like_a_variable():
    from nexopoll.core.redact import redact, secret_values

    env = {"file:/run/secrets/bot": "123456:ABCdef"}
    secrets = secret_values({"token": "${file:/run/secrets/bot}"}, env)
    assert redact("GET /bot123456:ABCdef/x", secrets) == "GET /bot***/x"
