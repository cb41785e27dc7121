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
        (
            "https://api.example.org/bot123456:ABCdefGHIjkl/getUpdates?offset=1",
            "https://api.example.org/bot123456:ABCdefGHIjkl/getUpdates: request failed (refused)",
        ),
        # urllib3/requests error formats: host and path apart, query dropped
        (
            SLACK,
            "HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries exceeded "
            "with url: /services/T0A1B2C3D/B4E5F6G7H/xYz9SecretWebhookTok3n (Caused by "
            "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: "
            "Failed to establish a new connection: [Errno 111] Connection refused'))",
        ),
        # the host case-folded, the query dropped, the scheme dropped
        (FEED, "feeds.example.com/v1/tok-9f8e7d6c5b4a/items.json: timed out"),
        (FEED, "GET https://FEEDS.EXAMPLE.COM/V1/TOK-9F8E7D6C5B4A/ITEMS.JSON failed"),
        # the query alone, as a server might echo it
        (FEED, "400 Bad Request: unknown parameter api_key=Qk3yS3cretV4lue"),
        # a secret host name
        (
            "https://Tenant-7Q2X-Private.example.net/feed",
            "Failed to resolve 'tenant-7q2x-private.example.net' ([Errno -2] Name not known)",
        ),
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
)
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


# --- every decoded form: escapes undone wherever they sit, wholly or partly -------------------
def readings(text: str) -> set[str]:
    """``text`` as any reader might decode it (an independent reference: stdlib decoders)."""
    import html
    import re
    from urllib.parse import unquote_plus

    def json_unescape(t: str) -> str:
        t = re.sub(
            r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})",
            lambda m: (
                (chr(int(m[1], 16)) + chr(int(m[2], 16)))
                .encode("utf-16", "surrogatepass")
                .decode("utf-16")
            ),
            t,
        )
        return re.sub(
            r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})", lambda m: chr(int(m[1] or m[2], 16)), t
        )

    out = {text}
    for _ in range(2):
        for t in list(out):
            out |= {unquote(t), unquote_plus(t), html.unescape(t), json_unescape(t)}
    return out


def assert_nothing_decodes_to_a_secret(text: str, secret: str) -> None:
    low = secret.lower()
    grams = {low[i : i + 8] for i in range(len(low) - 7)}
    for reading in readings(text):
        found = [g for g in grams if g in reading.lower()]
        assert not found, f"{found[:3]} of the secret in {reading!r} (a reading of {text!r})"


ENCODERS = {
    "pct": lambda c: "".join(f"%{b:02X}" for b in c.encode()),
    "pct-lower": lambda c: "".join(f"%{b:02x}" for b in c.encode()),
    "pct-twice": lambda c: "".join(f"%25{b:02X}" for b in c.encode()),
    "json-u": lambda c: (
        json.dumps(c, ensure_ascii=True)[1:-1] if ord(c) > 127 or c in '"\\' else f"\\u{ord(c):04x}"
    ),
    "py-x": lambda c: f"\\x{ord(c):02x}" if ord(c) < 256 else c,
    "html-dec": lambda c: f"&#{ord(c)};",
    "html-hex": lambda c: f"&#x{ord(c):X};",
    "html-named": lambda c: {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}.get(c, c),
    "plus": lambda c: "+" if c == " " else c,
}
SECRETS = ["S3cretP4thPart42", "p@ss w0rd+&café/ñ%42 x", "https://hooks.example.com/T0/B1/xYzT0k3n"]


def test_the_issue_example_partly_percent_encoded():
    text = "GET https://api.example/x?key=S3cr%65tP4t%68Part42 failed"
    assert redact(text, {"S3cretP4thPart42"}) == "GET https://api.example/x?key=*** failed"


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("scheme", list(ENCODERS))
@pytest.mark.parametrize("share", [1, 3, 100])  # every char, every third, all chars
def test_partly_or_wholly_encoded_secrets_are_masked(secret, scheme, share):
    enc = ENCODERS[scheme]
    written = "".join(enc(c) if i % share == 0 else c for i, c in enumerate(secret))
    text = f"error at {written} (retry)"
    clean = redact(text, frozenset({secret}))
    assert_nothing_decodes_to_a_secret(clean, secret)
    assert clean.startswith("error at ") and clean.endswith(" (retry)")


def test_random_mixes_of_escapes_never_let_a_secret_through():
    rnd = random.Random(16)
    for _ in range(400):
        secret = rnd.choice(SECRETS)
        a = rnd.randrange(len(secret) - 8)
        piece = secret[a : a + rnd.randint(8, 40)]
        written = "".join(
            ENCODERS[rnd.choice(list(ENCODERS))](c) if rnd.random() < 0.4 else c for c in piece
        )
        if rnd.random() < 0.3:
            written = written.upper() if rnd.random() < 0.5 else written.lower()
        text = rnd.choice(["", "x=", "url: /", "'"]) + written + rnd.choice(["", "&y=1", " ok"])
        assert_nothing_decodes_to_a_secret(redact(text, frozenset({secret})), secret)


@pytest.mark.parametrize("user", ["u", "us", "usr", "user:"])
def test_a_secret_inside_base64_is_masked_at_any_alignment(user):
    import base64

    secret = "S3cretP4thPart42"
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        blob = encode(f"{user}:{secret}".encode()).decode()
        clean = redact(f"Authorization: Basic {blob}", frozenset({secret}))
        assert MASK in clean
        assert len(clean) - len("Authorization: Basic ") < len(blob) - 8


def test_decoding_keeps_the_rest_readable_and_is_cheap():
    import time

    text = ("caf%C3%A9 &amp; \\u00e9 x+y %ZZ &bogus; " * 100) + "S3cr%65tP4t%68Part42"
    started = time.perf_counter()
    clean = redact(text, frozenset({"S3cretP4thPart42"}))
    assert time.perf_counter() - started < 0.2
    assert clean == ("caf%C3%A9 &amp; \\u00e9 x+y %ZZ &bogus; " * 100) + MASK
