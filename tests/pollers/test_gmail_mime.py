"""gmail's reading of real mail: the sender, the body's part and its decoding.

Mails are written as raw RFC 5322 text and served by the local Gmail fake the
way Gmail serves them (:func:`gmail_from_raw`: headers as sent, parts' data
already decoded from their transfer encoding). The RFC 2047 vectors are the
examples of RFC 2047 section 8 and variations on them.
"""

from __future__ import annotations

import base64
import quopri

import pytest

from pollers._mail import parse_from
from pollers.gmail import GmailPoller
from tests.support.fakes import FakeHost, make_context
from tests.support.google_server import gmail_from_raw

DELIVER = {"channel": "log", "to": "ops"}
ALLOW = ["@mycompany.com"]


def mail(sender: str, body: str = "hi", *, headers: str = "", content: str | None = None) -> bytes:
    head = f"From: {sender}\r\nTo: ops@mycompany.com\r\nSubject: s\r\n{headers}"
    if content is None:
        content = f"Content-Type: text/plain; charset=utf-8\r\n\r\n{body}"
    return (head + "MIME-Version: 1.0\r\n" + content).encode()


def poll(google, binding, raws, config) -> FakeHost:
    for i, raw in enumerate(raws):
        google.add_message(gmail_from_raw(f"m{i}", raw, internal_date=i))
    host = FakeHost(credentials={"google": binding})
    GmailPoller().tick(make_context({"deliver": DELIVER, **config}, host=host, job_id="leads"))
    return host


# --- the sender ---------------------------------------------------------------------------
SPOOFS = [
    "=?utf-8?Q?boss@mycompany.com_=28?= <attacker@evil.com>)",
    "=?utf-8?Q?boss@mycompany.com_=28?= <attacker@evil.com>",
    "=?utf-8?Q?boss@mycompany.com?= <attacker@evil.com>",
    "=?utf-8?Q?=3Cboss=40mycompany=2Ecom=3E?= <attacker@evil.com>",  # encoded <…> and @
    "=?utf-8?B?Ym9zc0BteWNvbXBhbnkuY29tIDw=?= <attacker@evil.com>",  # "boss@mycompany.com <"
    "=?utf-8?Q?boss=40mycompany.com?=",  # an encoded address and nothing else
    "=?utf-8?Q?boss@mycompany.com?=",
    "<=?utf-8?Q?boss=40mycompany.com?=>",
    "=?utf-8?Q?x?= <=?utf-8?Q?boss?=@mycompany.com>",  # an encoded word as the local part
    "=?utf-8?Q?x?= <boss@=?utf-8?Q?mycompany.com?=>",
    "=?utf-8?Q?boss@mycompany.com=2C?= attacker@evil.com",  # an encoded comma
    "=?utf-8?Q?boss@mycompany.com?= =?utf-8?Q?_<a@evil.com>?= <b@evil.com>",
    '"=?utf-8?Q?boss@mycompany.com?=" <attacker@evil.com>',
    "attacker@evil.com (=?utf-8?Q?boss@mycompany.com?=)",  # a comment
    "boss(=?utf-8?Q?x?=)@mycompany.com.evil.com",
    "undisclosed: =?utf-8?Q?boss@mycompany.com?= <a@evil.com>;",  # group syntax
    "Team: boss@mycompany.com;",  # a group is no From
    "boss@mycompany.com, attacker@evil.com",  # several addresses
    "attacker@evil.com, boss@mycompany.com",
    "<attacker@evil.com> boss@mycompany.com",
    "boss@mycompany.com <attacker@evil.com>",
    '"boss@mycompany.com"@evil.com',
    "=?utf-8?Q?boss@mycompany.com?=\t<attacker@evil.com>",
    "=?iso-8859-1?B?Ym9zc0BteWNvbXBhbnkuY29t?= <attacker@evil.com>",
    '"boss@mycompany.com" <=?utf-8?Q?boss?=@mycompany.com>',  # the literal elsewhere
    "boss@mycompany.com <=?utf-8?Q?boss?=@mycompany.com>",
]


@pytest.mark.parametrize("sender", SPOOFS)
def test_an_encoded_word_never_passes_the_sender_allowlist(google, binding, sender):
    host = poll(google, binding, [mail(sender)], {"sender_allowlist": ALLOW})
    assert host.deliveries == []
    assert not parse_from(sender)[1].endswith("@mycompany.com")


def test_a_mail_with_two_from_headers_matches_nothing(google, binding):
    raw = mail("attacker@evil.com", headers="From: boss@mycompany.com\r\n")
    assert poll(google, binding, [raw], {"sender_allowlist": ALLOW}).deliveries == []


def test_the_spoof_is_read_as_its_real_address_and_shown_quoted(google, binding):
    raw = mail("=?utf-8?Q?boss@mycompany.com_=28?= <attacker@evil.com>")
    host = poll(google, binding, [raw], {"message_template": "{from_address}|{from_name}|{from}"})
    assert host.texts == [
        'attacker@evil.com|boss@mycompany.com (|"boss@mycompany.com (" <attacker@evil.com>'
    ]


# RFC 2047 section 8 and variations: (raw From, display name, address)
RFC2047 = [
    ("=?US-ASCII?Q?Keith_Moore?= <moore@cs.utk.edu>", "Keith Moore", "moore@cs.utk.edu"),
    (
        "=?ISO-8859-1?Q?Keld_J=F8rn_Simonsen?= <keld@dkuug.dk>",
        "Keld Jørn Simonsen",
        "keld@dkuug.dk",
    ),
    (
        "=?ISO-8859-1?Q?Andr=E9?= Pirard <PIRARD@vm1.ulg.ac.be>",
        "André Pirard",
        "pirard@vm1.ulg.ac.be",
    ),
    (
        "=?ISO-8859-1?Q?Olle_J=E4rnefors?= <ojarnef@admin.kth.se>",
        "Olle Järnefors",
        "ojarnef@admin.kth.se",
    ),
    (
        "Nathaniel Borenstein <nsb@thumper.bellcore.com> (=?iso-8859-8?b?7eXs+SDv4SDp7Oj08A==?=)",
        "Nathaniel Borenstein",
        "nsb@thumper.bellcore.com",
    ),
    ("=?ISO-8859-1?Q?a?= <x@mycompany.com>", "a", "x@mycompany.com"),
    ("=?ISO-8859-1?Q?a?= b <x@mycompany.com>", "a b", "x@mycompany.com"),
    ("=?ISO-8859-1?Q?a?= =?ISO-8859-1?Q?b?= <x@mycompany.com>", "ab", "x@mycompany.com"),
    ("=?ISO-8859-1?Q?a?=  =?ISO-8859-1?Q?b?= <x@mycompany.com>", "ab", "x@mycompany.com"),
    ("=?ISO-8859-1?Q?a_b?= <x@mycompany.com>", "a b", "x@mycompany.com"),
    ("=?ISO-8859-1?Q?a?= =?ISO-8859-2?Q?_b?= <x@mycompany.com>", "a b", "x@mycompany.com"),
    (
        "=?ISO-8859-1?B?SWYgeW91IGNhbiByZWFkIHRoaXMgeW8=?= <x@mycompany.com>",
        "If you can read this yo",
        "x@mycompany.com",
    ),
    # real senders the old decode-then-parse dropped: a comma or quotes in the name
    ("=?utf-8?Q?Doe=2C_John?= <john@mycompany.com>", "Doe, John", "john@mycompany.com"),
    ("=?utf-8?Q?=22Johnny=22_Doe?= <john@mycompany.com>", '"Johnny" Doe', "john@mycompany.com"),
    ("=?utf-8?B?TcO8bGxlciwgSsO8cmdlbg==?= <j@mycompany.com>", "Müller, Jürgen", "j@mycompany.com"),
    (
        "=?utf-8?Q?Ventas_=3Cventas=3E?= <ventas@mycompany.com>",
        "Ventas <ventas>",
        "ventas@mycompany.com",
    ),
    ('"Doe, John" <john@mycompany.com>', "Doe, John", "john@mycompany.com"),
    ("=?utf-8?q?Ana?=<ana@mycompany.com>", "Ana", "ana@mycompany.com"),  # no space before <
    ("José <jose@mycompany.com>", "José", "jose@mycompany.com"),  # raw UTF-8 (RFC 6532)
    ("=?utf-8?b?8J+agCBSb2NrZXQ=?= <r@mycompany.com>", "🚀 Rocket", "r@mycompany.com"),
    ("=?iso-2022-jp?b?GyRCJUYlOSVIGyhC?= <t@mycompany.com>", "テスト", "t@mycompany.com"),
    ("=?utf-8?q?a=5Fb_c=3F?= <x@mycompany.com>", "a_b c?", "x@mycompany.com"),
    ("=?UTF-8?Q?Caf=C3=A9?= <cafe@MyCompany.com>", "Café", "cafe@mycompany.com"),
    (
        "=?utf-8?q?Long?=\r\n =?utf-8?q?_Name?= <l@mycompany.com>",
        "Long Name",
        "l@mycompany.com",
    ),  # folded
    ('"Smith, J." <j@mycompany.com> (Sales)', "Smith, J.", "j@mycompany.com"),
    ("Lists <bounce+ab=cd@mycompany.com>", "Lists", "bounce+ab=cd@mycompany.com"),  # VERP
]


@pytest.mark.parametrize(("raw", "name", "address"), RFC2047)
def test_rfc2047_display_names_are_decoded_after_the_address_is_parsed(
    google, binding, raw, name, address
):
    assert parse_from(raw) == (name, address)
    host = poll(
        google,
        binding,
        [mail(raw)],
        {"sender_allowlist": [address], "message_template": "{from_name}"},
    )
    assert host.texts == [name]


# --- the body's decoding ------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Nombre: Ana\nphone=34612345678\nref=3D41 =C3=A9\n",  # ASCII: looked still-encoded
        "Nombre: Ana\nphone=34612345678\nref=3D41 caf\u00e9 =C3=A9\n",
    ],
)
def test_a_quoted_printable_body_is_decoded_once(google, binding, text):
    qp = quopri.encodestring(text.encode("utf-8")).decode()
    content = (
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: quoted-printable\r\n\r\n{qp}"
    )
    host = poll(
        google,
        binding,
        [mail("ana@mycompany.com", content=content)],
        {
            "extract": {"phone": r"phone=(\d+)", "ref": r"ref=(\S+)"},
            "message_template": "{phone} {ref} {body}",
        },
    )
    assert host.texts == ["34612345678 3D41 " + text]


def test_a_base64_body_whose_text_looks_like_base64_is_decoded_once(google, binding):
    text = "SGVsbG8="  # the mail's own text happens to be valid base64
    b64 = base64.b64encode(text.encode()).decode()
    content = (
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: base64\r\n\r\n{b64}\r\n"
    )
    host = poll(
        google,
        binding,
        [mail("ana@mycompany.com", content=content)],
        {"message_template": "{body}"},
    )
    assert host.texts == [text]


def test_the_fake_serves_parts_as_gmail_does(google):
    content = (
        "Content-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db\r\n"
    )
    doc = gmail_from_raw("x", mail("=?utf-8?Q?A?= <a@b.c>", content=content))
    payload = doc["payload"]
    assert {"name": "From", "value": "=?utf-8?Q?A?= <a@b.c>"} in payload["headers"]
    assert {"name": "Content-Transfer-Encoding", "value": "quoted-printable"} in payload["headers"]
    assert base64.urlsafe_b64decode(payload["body"]["data"]) == b"a=b\r\n"


# --- the body's part ----------------------------------------------------------------------
def multipart(kind: str, *parts: str, boundary: str | None = None) -> str:
    b = boundary or f"b-{kind}-{len(parts)}-{abs(hash(parts)) % 10_000}"
    inner = "".join(f"--{b}\r\n{p}\r\n" for p in parts)
    return f'Content-Type: multipart/{kind}; boundary="{b}"\r\n\r\n{inner}--{b}--\r\n'


def plain(text: str, extra: str = "") -> str:
    return f"Content-Type: text/plain; charset=utf-8\r\n{extra}\r\n{text}"


def html_part(text: str) -> str:
    return f"Content-Type: text/html; charset=utf-8\r\n\r\n<html><p>{text}</p></html>"


def forwarded(body: str) -> str:
    inner = f"From: old@elsewhere.com\r\nSubject: fwd\r\nMIME-Version: 1.0\r\n{body}"
    return f"Content-Type: message/rfc822\r\n\r\n{inner}"


ATTACHED_TXT = plain(
    "FROM THE ATTACHMENT", 'Content-Disposition: attachment; filename="notes.txt"\r\n'
)
INLINE_ATTACHMENT_NO_NAME = plain("ATTACHED, NO NAME", "Content-Disposition: attachment\r\n")
IMAGE = "Content-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n"

BODIES = {
    "alternative prefers plain": (
        multipart("alternative", plain("OWN plain"), html_part("OWN html")),
        "OWN plain",
    ),
    "alternative html first still plain": (
        multipart("alternative", html_part("OWN html"), plain("OWN plain")),
        "OWN plain",
    ),
    "own html before a forwarded plain": (
        multipart("mixed", html_part("OWN html"), forwarded(plain("FORWARDED"))),
        "OWN html",
    ),
    "own text after a forwarded message": (
        multipart("mixed", forwarded(plain("FORWARDED")), plain("OWN later")),
        "OWN later",
    ),
    "own alternative html-only before forwarded": (
        multipart(
            "mixed",
            multipart("alternative", html_part("OWN html")),
            forwarded(multipart("alternative", plain("FORWARDED"), html_part("FORWARDED"))),
        ),
        "OWN html",
    ),
    "mixed with an attached text file first": (
        multipart("mixed", ATTACHED_TXT, html_part("OWN html"), IMAGE),
        "OWN html",
    ),
    "an attachment without a filename": (
        multipart("mixed", INLINE_ATTACHMENT_NO_NAME, plain("OWN")),
        "OWN",
    ),
    "nested related html root": (
        multipart(
            "mixed",
            multipart(
                "alternative",
                plain("OWN plain"),
                multipart("related", html_part("OWN html"), IMAGE),
            ),
            ATTACHED_TXT,
        ),
        "OWN plain",
    ),
    "related only": (
        multipart("related", html_part("OWN related html"), IMAGE),
        "OWN related html",
    ),
    "forwarded only": (multipart("mixed", forwarded(plain("FORWARDED only"))), "FORWARDED only"),
    "forwarded html only": (
        multipart("mixed", IMAGE, forwarded(html_part("FORWARDED html"))),
        "FORWARDED html",
    ),
    "a forwarded message nested in a forwarded one": (
        multipart(
            "mixed", forwarded(multipart("mixed", forwarded(plain("DEEP")), plain("FIRST FORWARD")))
        ),
        "FIRST FORWARD",
    ),
}


@pytest.mark.parametrize("case", list(BODIES))
def test_the_body_is_the_messages_own_text(google, binding, case):
    content, expected = BODIES[case]
    host = poll(
        google,
        binding,
        [mail("ana@mycompany.com", content=content)],
        {"message_template": "{body}"},
    )
    assert host.texts == [expected]
