"""The email channel against a local SMTP server (aiosmtpd), through Django's mail."""

from __future__ import annotations

import pytest

from nexopoll.channels import OutboundMessage, get_channel
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from tests.support.smtpserver import SMTPServer, free_port


def message(text="Invoice 42 is due\nPay by Friday.", to="ops@example.com", **payload):
    return OutboundMessage(
        delivery_id="3f0c1e9a-0000-4000-8000-000000000001",
        job_id="gmail1",
        agent="ana",
        channel="email",
        recipient=to,
        payload={"text": text, **payload},
        attempt=1,
    )


@pytest.fixture(autouse=True)
def smtp_backend(settings):
    """pytest-django swaps in the locmem backend; these tests talk SMTP for real."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


@pytest.fixture
def smtp(settings):
    with SMTPServer() as server:
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        yield server


def send(msg, **binding) -> None:
    get_channel("email").send(
        msg, {"sender": "Nexopoll <bot@example.com>", **binding}, deadline_secs=5
    )


def test_a_mail_goes_to_the_recipient_from_the_sender_with_the_first_line_as_subject(smtp):
    send(message())
    [mail] = smtp.messages
    assert smtp.envelopes == [("bot@example.com", ["ops@example.com"])]
    assert mail["Subject"] == "Invoice 42 is due"
    assert mail["From"] == "Nexopoll <bot@example.com>" and mail["To"] == "ops@example.com"
    assert mail["Message-ID"] == "<3f0c1e9a-0000-4000-8000-000000000001@nexopoll>"
    assert mail["X-Nexopoll-Delivery-Id"] == "3f0c1e9a-0000-4000-8000-000000000001"
    body = mail.get_payload(decode=True).decode().replace("\r\n", "\n").strip()
    assert body == "Invoice 42 is due\nPay by Friday."


def test_a_subject_template_fills_from_the_payload(smtp):
    send(message(item_id="m-7"), subject="[{job_id}] mail {item_id}")
    assert smtp.messages[0]["Subject"] == "[gmail1] mail m-7"


def test_a_refused_recipient_is_permanent(smtp):
    smtp.rcpt_reply = "550 5.1.1 no such user"
    with pytest.raises(PermanentError, match="refused the recipient"):
        send(message())
    assert smtp.messages == []


@pytest.mark.parametrize("where", ["rcpt_reply", "data_reply"])
def test_a_4xx_reply_is_transient(smtp, where):
    setattr(smtp, where, "451 4.3.0 try again later")
    with pytest.raises(TransientError):
        send(message())


def test_a_5xx_data_reply_is_permanent(smtp):
    smtp.data_reply = "554 5.7.1 message rejected"
    with pytest.raises(PermanentError, match="554"):
        send(message())


def test_no_server_is_transient(settings):
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    with pytest.raises(TransientError):
        send(message())


def test_a_recipient_that_is_no_address_is_permanent_and_nothing_is_sent(smtp):
    with pytest.raises(PermanentError):
        send(message(to="not an address\r\nBcc: x@y.z"))
    assert smtp.messages == []


def test_a_failed_login_holds_the_delivery(settings):
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    port = free_port()

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            return "250 OK"

    controller = Controller(
        Handler(),
        hostname="127.0.0.1",
        port=port,
        auth_require_tls=False,
        authenticator=lambda *a: AuthResult(success=False, handled=False),
    )
    controller.start()
    try:
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "bot", "wrong-password"
        with pytest.raises(ConfigError, match="login refused"):
            send(message())
    finally:
        controller.stop()
