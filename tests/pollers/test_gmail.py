"""gmail poller against a local server speaking Gmail v1 and the OAuth token endpoint."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    PermanentError,
    TransientError,
)
from pollers import _google
from pollers.gmail import SEEN_CAPACITY, GmailPoller, decode_cursor, encode_cursor, remember
from tests.support.apibases import point_api
from tests.support.fakes import FakeHost, make_context
from tests.support.google_server import gmail_message, text_part, write_credentials
from tests.support.procs import free_port

DELIVER = {"channel": "log", "to": "ops"}


def run(config, binding, cursor=None, job_id="leads", host=None):
    host = host or FakeHost(credentials={"google": binding})
    ack = GmailPoller().tick(
        make_context({"deliver": DELIVER, **config}, host=host, cursor=cursor, job_id=job_id)
    )
    return ack, host


# --- config ---------------------------------------------------------------------------


def test_minimal_config_accepted_with_seed_defaults():
    cfg = GmailPoller().parse_config({"deliver": DELIVER})
    assert cfg.query == "is:unread" and cfg.max_per_tick == 20 and cfg.dispatch_delay_ms == 1000
    assert cfg.mark_read_on_dispatch is True and cfg.sender_allowlist == [] and cfg.extract == {}


@pytest.mark.parametrize(
    ("config", "path", "words"),
    [
        ({"querry": "x"}, "config.querry", "Extra inputs"),
        ({"extract": {"name": "Nombre: ("}}, "config.extract", "invalid regex"),
        ({"extract": {"name": "Nombre: .+"}}, "config.extract", "capture group"),
        ({"message_template": "{nmae}"}, "config", "unknown field(s): nmae"),
        ({"require_fields": ["phone"]}, "config", "unknown field(s): phone"),
        ({"newer_than": "yesterday"}, "config.newer_than", "1d"),
        ({"sender_allowlist": ["a@b@c"]}, "config.sender_allowlist", "domain"),
        ({"max_per_tick": "5"}, "config.max_per_tick", "integer"),
    ],
)
def test_bad_config_is_rejected_with_the_field(config, path, words):
    with pytest.raises(ConfigError) as err:
        GmailPoller().validate({"deliver": DELIVER, **config})
    assert err.value.path == path and words in str(err.value)


def test_seed_example_config_is_accepted():
    GmailPoller().validate(
        {
            "query": "is:unread subject:(lead OR interesado)",
            "newer_than": "1d",
            "max_per_tick": 20,
            "dispatch_delay_ms": 1000,
            "sender_allowlist": ["@mycompany.com"],
            "extract": {"name": "Nombre:\\s*(.+)", "phone": "Tel:\\s*(\\+?\\d+)"},
            "require_fields": ["name", "phone"],
            "message_template": "New lead 🚨 {name} — {phone}\n{snippet}",
            "mark_read_on_dispatch": True,
            "deliver": {"channel": "whatsapp", "to": "57300"},
        }
    )


# --- cursor and dedup -----------------------------------------------------------------


def test_cursor_round_trips_and_is_bounded():
    seen = [f"m{i}" for i in range(10)]
    assert decode_cursor(encode_cursor(seen)) == seen
    assert json.loads(encode_cursor(seen))["v"] == 1
    ring = remember([f"m{i}" for i in range(SEEN_CAPACITY)], ["new1", "new2"])
    assert len(ring) == SEEN_CAPACITY and ring[-2:] == ["new1", "new2"] and ring[0] == "m2"
    for bad in (b"nope", b'{"v": 2, "seen": []}', b'{"v": 1, "seen": [1]}'):
        with pytest.raises(PermanentError):
            decode_cursor(bad)


def test_dedup_across_ticks_and_max_per_tick_backlog(google, binding):
    for i in range(5):
        google.add_message(gmail_message(f"m{i}", subject=f"s{i}", internal_date=1000 + i))
    config = {"max_per_tick": 3, "mark_read_on_dispatch": False, "message_template": "{subject}"}
    ack, host = run(config, binding)
    # the 3 newest ids are taken, delivered oldest first
    assert host.texts == ["s2", "s3", "s4"] and ack.items_dispatched == 3
    ack2, host2 = run(config, binding, cursor=ack.next_cursor)
    assert host2.texts == ["s0", "s1"]
    ack3, host3 = run(config, binding, cursor=ack2.next_cursor)
    assert host3.texts == [] and ack3.next_cursor is None  # cursor kept as is
    assert all(google.unread(f"m{i}") for i in range(5))  # mark_read off: nothing modified


def test_list_pages_past_seen_mail_to_find_new_mail(google, binding):
    for i in range(150):
        google.add_message(gmail_message(f"m{i:03}", internal_date=1000 + i))
    seen = [f"m{i:03}" for i in range(1, 150)]  # only the oldest (on page 2) is new
    config = {"mark_read_on_dispatch": False, "message_template": "{id}"}
    _, host = run(config, binding, cursor=encode_cursor(seen))
    assert host.texts == ["m000"] and len(google.calls("list")) == 2


# --- content --------------------------------------------------------------------------


def test_extract_from_body_then_snippet_require_fields_and_utf8_template(google, binding):
    google.add_message(
        gmail_message(
            "a", subject="Señal ñandú 🚨", body="Nombre: José Ñúñez\nTel: +573001", internal_date=1
        )
    )
    google.add_message(
        gmail_message(
            "b", body="<no fields in the body>", snippet="Nombre: Zoë Tel: 42", internal_date=2
        )
    )
    google.add_message(gmail_message("c", body="Nombre: Sin Teléfono", internal_date=3))
    config = {
        "extract": {"name": "Nombre:\\s*([^\\n]+?)(?:\\s+Tel|$)", "phone": "Tel:\\s*(\\+?\\d+)"},
        "require_fields": ["name", "phone"],
        "message_template": "Lead 🚨 {name} — {phone} ({subject})",
    }
    ack, host = run(config, binding)
    assert host.texts == [
        "Lead 🚨 José Ñúñez — +573001 (Señal ñandú 🚨)",
        "Lead 🚨 Zoë — 42 (hello)",
    ]
    assert [d.payload["item_id"] for d in host.deliveries] == ["a", "b"]
    # the mail that failed require_fields is remembered (not re-fetched) but left unread
    assert set(decode_cursor(ack.next_cursor)) == {"a", "b", "c"}
    host.commit()
    assert not google.unread("a") and not google.unread("b") and google.unread("c")


def test_multipart_quoted_printable_latin1_and_html_fallback(google, binding):
    # Gmail serves the part already decoded from quoted-printable (the header stays)
    qp = "Nombre: Müller café\nTel: 99\n".encode("latin-1")
    multipart = {
        "mimeType": "multipart/mixed",
        "parts": [
            {
                "mimeType": "multipart/alternative",
                "parts": [
                    text_part(
                        qp,
                        "text/plain",
                        Content_Type='text/plain; charset="ISO-8859-1"',
                        Content_Transfer_Encoding="quoted-printable",
                    ),
                    text_part("<p>ignored</p>", "text/html"),
                ],
            },
            {"mimeType": "application/pdf", "filename": "a.pdf", "body": {"attachmentId": "x"}},
        ],
    }
    html_only = {
        "mimeType": "multipart/alternative",
        "parts": [
            text_part(
                "<html><style>p{}</style><p>Nombre: Ana &amp; Eva</p><p>Tel: 7</p></html>",
                "text/html",
            )
        ],
    }
    google.add_message(gmail_message("qp", body=multipart, snippet="x", internal_date=1))
    google.add_message(gmail_message("h", body=html_only, snippet="x", internal_date=2))
    config = {
        "extract": {"name": "Nombre:\\s*(.+)", "phone": "Tel:\\s*(\\d+)"},
        "message_template": "{name}|{phone}",
    }
    _, host = run(config, binding)
    assert host.texts == ["Müller café|99", "Ana & Eva|7"]


@pytest.mark.parametrize(
    ("sender", "allowed"),
    [
        ("Ana <ana@mycompany.com>", True),
        ("ANA@MyCompany.COM", True),
        ("boss@example.com", True),
        ('"x@evil" <a@mycompany.com.evil>', False),
        ("a@mycompany.com.evil", False),
        ('"a@mycompany.com" <x@evil.com>', False),
        ("x@evil.com (a@mycompany.com)", False),
        ("evil@sub.mycompany.com", False),
        ("a@mycompany.com, x@evil.com", False),
        ("other@example.com", False),
        ("not an address", False),
    ],
)
def test_sender_allowlist_matches_the_parsed_address_not_a_substring(
    google, binding, sender, allowed
):
    google.add_message(gmail_message("m", sender=sender))
    config = {"sender_allowlist": ["@mycompany.com", "boss@example.com"]}
    _, host = run(config, binding)
    assert (len(host.deliveries) == 1) is allowed


# --- mark read ------------------------------------------------------------------------


def test_mark_read_happens_only_when_the_runtime_commits(google, binding):
    google.add_message(gmail_message("m1"))
    _, host = run({}, binding)
    assert len(host.deliveries) == 1 and google.calls("modify") == []
    assert google.unread("m1")  # the tick itself changed nothing at the source
    host.commit()
    assert [c["path"] for c in google.calls("modify")] == ["/gmail/v1/users/me/messages/m1/modify"]
    assert json.loads(google.calls("modify")[0]["body"]) == {"removeLabelIds": ["UNREAD"]}
    assert not google.unread("m1")


def test_a_failed_mark_read_is_logged_and_the_seen_set_prevents_a_duplicate(google, binding):
    google.add_message(gmail_message("m1"))
    google.fail("modify", 503)
    ack, host = run({}, binding)
    host.commit()  # must not raise
    assert google.unread("m1")
    assert any(m == "gmail.mark_read_failed" for _, m, _ in host.logs)
    _, host2 = run({}, binding, cursor=ack.next_cursor)
    assert host2.deliveries == []


# --- OAuth ----------------------------------------------------------------------------


def test_expired_token_is_refreshed_once_at_the_token_files_token_uri(google, tmp_path):
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    creds = write_credentials(tmp_path, google, token="stale", expiry=past)
    google.add_message(gmail_message("m1"))
    run({"mark_read_on_dispatch": False}, creds)
    run({"mark_read_on_dispatch": False}, creds)
    refreshes = google.calls("token")
    assert len(refreshes) == 1  # the new token is reused by the second tick
    form = refreshes[0]["body"].decode()
    assert "grant_type=refresh_token" in form and "refresh_token=rt-good" in form
    used = {c["headers"]["authorization"] for c in google.calls("list")}
    assert used == {"Bearer at-1"}


def test_a_401_forces_one_refresh_and_retry(google, binding):
    google.add_message(gmail_message("m1"))
    run({"mark_read_on_dispatch": False}, binding)
    google.issued.clear()  # the server forgets every token it gave (early expiry)
    _, host = run({"mark_read_on_dispatch": False, "max_per_tick": 5}, binding, job_id="other")
    assert len(google.calls("token")) == 2 and len(host.deliveries) == 1


def test_jobs_of_one_account_share_one_auth_client_and_one_refresh(google, binding):
    google.add_message(gmail_message("m1"))
    a = _google.auth_client(_google.GoogleBinding.from_credentials(binding))
    b = _google.auth_client(_google.GoogleBinding.from_credentials(dict(binding)))
    assert a is b
    errors: list[BaseException] = []

    def tick(job_id: str) -> None:
        try:
            run({"mark_read_on_dispatch": False}, binding, job_id=job_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=tick, args=(f"job{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(google.calls("token")) == 1 and a.refreshes == 1


@pytest.mark.parametrize(
    ("mode", "error", "words"),
    [
        ("invalid_grant", PermanentError, "invalid_grant"),
        ("revoked", PermanentError, "expired or revoked"),
        ("invalid_client", PermanentError, "invalid_client"),
        ("503", TransientError, "503"),
        ("429", TransientError, "429"),
    ],
)
def test_token_endpoint_errors_are_classified(google, binding, mode, error, words):
    google.token_mode = mode
    with pytest.raises(error) as err:
        run({}, binding)
    assert words in str(err.value)
    if error is PermanentError:
        assert "rt-good" not in str(err.value) and "csecret" not in str(err.value)
        # the rejected refresh token is remembered: a sibling job fails without a call
        calls = len(google.calls("token"))
        with pytest.raises(PermanentError):
            run({}, binding, job_id="sibling")
        assert len(google.calls("token")) == calls
    else:
        assert len(google.calls("token")) == 1  # no sleeping retries inside the tick


@pytest.mark.parametrize(
    ("reply", "error", "words"),
    [
        (401, PermanentError, "401"),
        (503, TransientError, "503"),
        (429, TransientError, "429"),
        (
            (403, {"error": {"errors": [{"reason": "rateLimitExceeded"}]}}),
            TransientError,
            "rate limited",
        ),
        (
            (403, {"error": {"errors": [{"reason": "insufficientPermissions"}]}}),
            PermanentError,
            "insufficientPermissions",
        ),
        ((400, {"error": {"message": "Invalid query"}}), PermanentError, "Invalid query"),
    ],
)
def test_api_errors_are_classified(google, binding, reply, error, words):
    google.fail("list", reply, reply)  # twice: a 401 is retried once after a refresh
    with pytest.raises(error) as err:
        run({}, binding)
    assert words in str(err.value)


def test_missing_binding_or_files_are_permanent(google, binding, tmp_path):
    with pytest.raises(CredentialsMissingError):
        GmailPoller().tick(make_context({"deliver": DELIVER}, host=FakeHostNoGoogle()))
    with pytest.raises(CredentialsMissingError, match="token_path"):
        run({}, {**binding, "token_path": str(tmp_path / "absent.json")})
    bad = tmp_path / "bad.json"
    bad.write_text('{"token": "x"}')
    with pytest.raises(CredentialsMissingError, match="refresh_token"):
        run({}, {"token_path": str(bad)})


def test_message_deleted_between_list_and_get_is_skipped(google, binding):
    google.add_message(gmail_message("gone"))
    google.add_message(gmail_message("here", internal_date=5))
    google.fail("get", 404)
    _, host = run({"message_template": "{id}"}, binding)
    assert len(host.deliveries) == 1


def test_unreachable_api_is_transient(monkeypatch, binding, google):

    port = free_port()
    point_api(monkeypatch, "gmail", f"http://127.0.0.1:{port}")
    with pytest.raises(TransientError):
        run({}, binding)


class FakeHostNoGoogle(FakeHost):
    def credentials_get(self, channel):
        raise CredentialsMissingError(f"agent 'ana' has no {channel!r} binding")


# --- the custom tool ------------------------------------------------------------------


def test_gmail_count_unread_counts_without_changing_anything(google, binding):
    for i in range(7):
        google.add_message(gmail_message(f"m{i}", unread=i < 4))
    (tool,) = GmailPoller().custom_tools()
    assert tool.name == "gmail_count_unread" and tool.parameters["required"] == ["job_id"]
    job = {"config": {"query": "in:inbox", "deliver": DELIVER}, "credentials": {"google": binding}}
    result = tool.handler({"job_id": "leads", "job": job})
    assert result == {"job_id": "leads", "unread": 4, "capped": False}
    assert google.calls("modify") == [] and google.calls("get") == []
    assert "is:unread" in google.calls("list")[0]["query"]["q"]


def test_legacy_style_text_client_files_complete_the_token_file(google, tmp_path):
    (tmp_path / "cid.txt").write_text(google.client_id + "\n")
    (tmp_path / "cs.txt").write_text(google.client_secret + "\n")
    token = tmp_path / "tok.json"
    token.write_text(json.dumps({"refresh_token": "rt-good", "token_uri": google.token_uri}))
    binding = {
        "client_id_path": str(tmp_path / "cid.txt"),
        "token_path": str(token),
        "client_secret_path": str(tmp_path / "cs.txt"),
    }
    google.add_message(gmail_message("m1"))
    _, host = run({}, binding)
    assert len(host.deliveries) == 1
    assert f"client_id={google.client_id}" in google.calls("token")[0]["body"].decode()


def test_a_reauthorized_token_file_is_picked_up_without_a_restart(google, binding):
    google.token_mode = "revoked"
    with pytest.raises(PermanentError):
        run({}, binding)
    google.token_mode = "ok"
    with pytest.raises(PermanentError):  # remembered: no new refresh for the same file
        run({}, binding)
    path = binding["token_path"]
    doc = json.loads(open(path).read())
    doc["refresh_token"] = "rt-good"
    doc["note"] = "re-authorized"
    with open(path, "w") as fh:
        json.dump(doc, fh)
    google.add_message(gmail_message("m1"))
    _, host = run({}, binding)
    assert len(host.deliveries) == 1
