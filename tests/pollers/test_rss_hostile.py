"""Hostile feeds: entity declarations and DTD internal subsets are refused before any
parser sees them, in every encoding and wherever they hide in the prolog; a plain
public DOCTYPE passes; the quadratic blow-up is contained."""

from __future__ import annotations

import codecs
import time

import pytest

from nexopoll.core.errors import PermanentError
from pollers._xmlguard import HostileFeedError, check, decode, root_start, sanitize
from pollers.rss import RssPoller
from pollers.rss_feed import parse_feed
from tests.pollers.conftest import guarded_fetch
from tests.support.fakes import FakeHost, make_context
from tests.support.httpserver import reply
from tests.support.memory import peak_memory

from .rss_fixtures import fixture

HOST = "feeds.example.test"
ITEM = "<item><title>&a;</title><guid>1</guid></item>"
LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE rss [\n<!ENTITY a "lol">\n'
    + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">\n' for i in range(8))
    + ']>\n<rss version="2.0"><channel><title>&i;</title>'
    + ITEM
    + "</channel></rss>"
)


def quadratic(value_kb: int = 30, refs: int = 13_000) -> str:
    """One big "safe" entity referenced many times: feedparser keeps and expands it."""
    return (
        f'<?xml version="1.0"?>\n<!DOCTYPE rss [\n<!ENTITY a "{"x" * value_kb * 1024}">\n]>\n'
        f'<rss version="2.0"><channel><title>t</title><item><guid>1</guid><title>'
        f"{'&a;' * refs}</title></item></channel></rss>"
    )


# --- what is refused ------------------------------------------------------------------
@pytest.mark.parametrize(
    "doc",
    [
        LAUGHS,
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        '<rss version="2.0"><channel><title>&x;</title></channel></rss>',
        '<!DOCTYPE r [<!ENTITY % p SYSTEM "http://169.254.169.254/">%p;]><rss/>',
        '<!DOCTYPE rss [<!ATTLIST rss version CDATA "2.0">]><rss><channel/></rss>',
        '<!DOCTYPE rss SYSTEM "x.dtd" [ ]><rss/>',
        # after comments, PIs, a stylesheet, junk text, a fake root inside a comment
        '<?xml version="1.0"?><!-- ' + "c" * 70_000 + ' --><!DOCTYPE r [<!ENTITY a "x">]><rss/>',
        '<?xml version="1.0"?><?xml-stylesheet href="s.xsl"?>\n<!ENTITY a "x"><rss/>',
        'Warning: include() failed in /var/www/feed.php\n<!DOCTYPE r [<!ENTITY a "x">]><rss/>',
        '<!-- <rss> --><!DOCTYPE r [<!ENTITY a "x">]><rss><channel/></rss>',
        '<!DOCTYPE r PUBLIC "a>b" "c" [<!ATTLIST r a CDATA "x">]><rss/>',
        # case and spacing that a lenient parser may still honour
        '<!doctype rss [<!entity a "x">]><rss/>',
        '<! ENTITY a "x"><rss/>',
        # inside the first element's text, where feedparser's own prolog regex looks
        '<rss version="2.0">\n<!ENTITY a "x">\n<channel/></rss>',
        # a fake CDATA in the prolog does not hide anything
        '<![CDATA[\n<!ENTITY a "x">\n]]><!DOCTYPE r><rss/>',
    ],
)
def test_entity_declarations_and_internal_subsets_are_refused(doc) -> None:
    with pytest.raises(HostileFeedError):
        sanitize(doc.encode("utf-8"))


@pytest.mark.parametrize(
    ("encoding", "bom"),
    [
        ("utf-8", codecs.BOM_UTF8),
        ("utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-16-be", codecs.BOM_UTF16_BE),
        ("utf-32-le", codecs.BOM_UTF32_LE),
        ("utf-32-be", codecs.BOM_UTF32_BE),
        ("utf-16-le", b""),  # no BOM: the NUL pattern of the first characters tells
        ("utf-16-be", b""),
        ("utf-32-le", b""),
        ("utf-32-be", b""),
        ("cp037", b""),  # EBCDIC
    ],
)
def test_refused_in_every_encoding(encoding, bom) -> None:
    name = encoding.split("-")[0] + "-" + encoding.split("-")[1] if "-" in encoding else encoding
    doc = LAUGHS.replace('<?xml version="1.0"?>', f'<?xml version="1.0" encoding="{name}"?>')
    with pytest.raises(HostileFeedError):
        sanitize(bom + doc.encode(encoding))


@pytest.mark.parametrize(
    "body",
    [
        # UTF-7 hides "<" as "+ADw-"
        b'<?xml version="1.0" encoding="UTF-7"?>+ADw-!DOCTYPE r +AFs-+ADw-!ENTITY a "x"+AD4-+AF0-'
        b"+AD4-<rss/>",
        # a declaration lying about a wide encoding is ignored: decoded as UTF-8 and caught
        b'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [<!ENTITY a "x">]><rss/>',
    ],
)
def test_declared_encodings_cannot_smuggle_a_declaration(body) -> None:
    with pytest.raises(HostileFeedError):
        sanitize(body)


def test_the_http_charset_never_overrides_the_bytes() -> None:
    doc = '<!DOCTYPE r [<!ENTITY a "x">]><rss/>'
    with pytest.raises(HostileFeedError):
        sanitize(doc.encode("utf-16-le"), "latin-1")  # no BOM, no declaration: NULs tell
    with pytest.raises(HostileFeedError):
        sanitize(codecs.BOM_UTF16_LE + doc.encode("utf-16-le"), "latin-1")


# --- what passes ----------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32", "iso-8859-1"])
def test_a_plain_public_doctype_is_fine_in_any_encoding(encoding) -> None:
    text = decode(fixture("rss091.xml"))
    body = text.replace("ISO-8859-1", encoding).encode(encoding)  # utf-16/32 add a BOM
    feed = parse_feed(body)
    assert feed.version == "rss091n" and len(feed.entries) == 3
    assert "café" in feed.entries[1].fields["summary"]


def test_entity_text_inside_body_cdata_is_an_article_not_a_declaration() -> None:
    doc = (
        b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title><item><guid>1</guid>'
        b"<title>XXE explained</title><description><![CDATA[<pre>\n<!DOCTYPE r [\n"
        b'<!ENTITY xxe SYSTEM "file:///etc/passwd">]></pre>]]></description></item>'
        b"</channel></rss>"
    )
    (entry,) = parse_feed(doc).entries
    assert '&lt;!ENTITY xxe SYSTEM "file:///etc/passwd"' in entry.fields["summary"]
    # the same text outside CDATA is refused
    with pytest.raises(HostileFeedError):
        sanitize(doc.replace(b"<![CDATA[", b"").replace(b"]]>", b""))


def test_the_parser_reads_exactly_the_scanned_utf8() -> None:
    body = codecs.BOM_UTF16_BE + fixture("rss10.rdf").decode().replace(
        'encoding="utf-8"', 'encoding="UTF-16"'
    ).encode("utf-16-be")
    clean = sanitize(body)
    assert clean.startswith(b'<?xml version="1.0" encoding="utf-8"?>')
    assert "Über die Zukunft — café ☕" in clean.decode("utf-8")
    assert parse_feed(body).entries[1].fields["title"] == "Über die Zukunft — café ☕"


def test_root_start_follows_the_prolog_grammar() -> None:
    doc = '<?xml version="1.0"?><!-- <fake> --><!DOCTYPE rss PUBLIC "a" "b"><rss/>'
    assert doc[root_start(doc) :] == "<rss/>"
    check(doc)  # a plain DOCTYPE: no error


# --- containment ----------------------------------------------------------------------
def test_the_quadratic_blow_up_is_refused_fast_and_small() -> None:
    doc = quadratic().encode()
    assert 60_000 < len(doc) < 80_000  # the ~70 KB feed that feedparser grows to ~1 GB
    with peak_memory() as peak:
        started = time.monotonic()
        with pytest.raises(HostileFeedError):
            parse_feed(doc)
        elapsed = time.monotonic() - started
    assert elapsed < 1.0 and peak[0] < 5 * 1024 * 1024


@pytest.mark.parametrize("name", ["laughs", "quadratic", "xxe"])
def test_a_hostile_feed_pauses_the_job_and_delivers_nothing(srv, name) -> None:
    docs = {
        "laughs": LAUGHS.encode("utf-16"),
        "quadratic": quadratic().encode(),
        "xxe": b'<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><rss version="2.0">'
        b"<channel><item><guid>1</guid><title>&x;</title></item></channel></rss>",
    }
    srv.route("GET", "/feed.xml", reply(200, docs[name], {"Content-Type": "application/rss+xml"}))
    fetch = guarded_fetch(srv, HOST)
    host = FakeHost()
    cfg = {"feed_url": srv.url("/feed.xml", host=HOST), "deliver": {"channel": "log", "to": "x"}}
    with pytest.raises(PermanentError, match="feed refused"):
        RssPoller(fetch=fetch).tick(make_context(cfg, host=host))
    assert host.deliveries == []


def test_the_http_charset_decodes_a_document_that_declares_none() -> None:
    doc = '<rss version="2.0"><channel><title>Café</title></channel></rss>'.encode("latin-1")
    assert parse_feed(doc, charset="iso-8859-1").title == "Café"
    assert parse_feed(doc).title == "Café"  # not UTF-8: windows-1252 as the fallback


@pytest.mark.parametrize(
    ("doc", "refused"),
    [
        ("<rss><![CDATA[" + "<!DOCTYPE x " * 400_000 + "]]></rss>", False),  # 4.8 MB in CDATA
        ("<rss>" + "<!DOCTYPE " * 500_000 + "</rss>", True),  # never closes
        ("<" * 5_000_000 + "<rss/>", False),  # junk before the root
        ("<?a?>" * 1_000_000 + "<rss/>", True),  # a million prolog parts
        ("<!-- x -->" * 20_000 + "<rss/>", True),
        ("<rss><![CDATA[" + "<![CDATA[<!ENTITY " * 250_000 + "]]></rss>", False),
    ],
)
def test_the_scan_is_linear_on_adversarial_documents(doc, refused) -> None:
    started = time.monotonic()
    if refused:
        with pytest.raises(HostileFeedError):
            check(doc)
    else:
        check(doc)
    assert time.monotonic() - started < 1.5
